"""The last erasure race: `/memory forget`, through InteractionsFunction's handler, while a
consolidation round that read a restatement of the fact (said before the forget) is in its
model call. The fact stays forgotten: the forget leaves a tombstone, and the round's commit
is conditioned on it (refused and redone from the new state, no observation lost).

Two containers share one table: the test's consolidating services, held inside the model
call, and InteractionsFunction as template.yaml declares it (tests.botmemory.commands.test_commands.Discord)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from botmemory.clock import SystemClock
from botmemory.consolidation.model.contract import (
    ConsolidationAnswer,
    ModelInput,
    ProposedEpisode,
    ProposedFact,
)
from botmemory.consolidation.outcome import Outcome, Status
from botmemory.records import Fact, FactKind
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from localrun import gateway as gw
from scripts.make_events import ALICE, BOT, CHANNEL, GUILD
from tests.botmemory.commands.test_commands import Discord, fake_discord_fixture  # noqa: F401
from tests.botmemory.commands.test_commands import discord as discord
from tests.conftest import TABLE, scan_all

HIKING = "I love hiking in the Alps."


class Restating:
    """Proposes, from each line of Alice's, the fact it states; the first `hold` calls wait
    inside the model until the test releases them."""

    name = "restating"

    def __init__(self, hold: int = 0) -> None:
        self.hold = hold
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        self.calls += 1
        if self.calls <= self.hold:
            self.entered.set()
            assert self.release.wait(30), "the test never released the model"
        lines = [o for o in batch.observations if o.author_id == ALICE]
        return ConsolidationAnswer(
            facts=[
                ProposedFact(
                    user_id=ALICE,
                    text="Loves hiking in the Alps",
                    kind=FactKind.PREFERENCE,
                    evidence=[line.number],
                )
                for line in lines[:1]
            ],
            episode=ProposedEpisode(summary="Alice talked about hiking.", participants=[]),
        )


def consolidating(dynamodb: Any, model: Restating) -> MemoryServices:
    """The consolidation container, on the wall clock the interactions container uses."""
    settings = Settings(table_name=TABLE, memory_model="rules", bot_user_id=BOT)
    return build_services(settings, dynamodb=dynamodb, clock=SystemClock(), model=model)


def said(services: MemoryServices, text: str, seconds_ago: float) -> None:
    at_ms = services.clock.now_ms() - int(seconds_ago * 1000)
    services.recorder.record([gw.message(ALICE, text, at_ms, channel=CHANNEL, guild=GUILD)])


def facts_of_alice(services: MemoryServices) -> list[Fact]:
    return services.repository.all_facts(GUILD, ALICE)


def pending(services: MemoryServices) -> int:
    return services.repository.count_pending(CHANNEL, 100_000)


def test_a_forget_during_the_model_call_keeps_the_fact_forgotten(
    discord: Discord, dynamodb: Any, serialized_moto: None
) -> None:
    model = Restating(hold=1)
    services = consolidating(dynamodb, Restating())
    said(services, HIKING, seconds_ago=120)
    services.consolidator.consolidate(CHANNEL, force=True)
    (fact,) = facts_of_alice(services)
    said(services, HIKING, seconds_ago=60)  # the restatement, said before the forget

    held = consolidating(dynamodb, model)
    outcomes: list[Outcome] = []
    thread = threading.Thread(
        target=lambda: outcomes.extend(held.consolidator.consolidate(CHANNEL, force=True))
    )
    thread.start()
    assert model.entered.wait(30)  # the round has read its batch and is thinking
    answer = discord.text("memory", "forget", {"what": fact.fact_id}, user=ALICE)
    assert "Forgotten" in answer and fact.fact_id in answer
    model.release.set()
    thread.join(30)
    assert not thread.is_alive()
    # Whatever the raced round did, a later round (the retry) finds nothing left to do.
    services.consolidator.consolidate(CHANNEL, force=True)

    assert [f.fact_id for f in facts_of_alice(services)] == []
    assert pending(services) == 0  # the restatement was consumed, not lost
    tombstones = [i for i in scan_all(dynamodb) if i["sk"]["S"] == keys.forgotten_sk(fact.fact_id)]
    assert len(tombstones) == 1


def test_a_forget_between_the_round_s_tombstone_read_and_its_commit_refuses_the_commit(
    discord: Discord, dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The narrowest window: the round has read no tombstone, then the forget lands. The
    commit's condition on the tombstone refuses the round whole; the retry, from the new
    state, consumes the restatement without bringing the fact back."""
    services = consolidating(dynamodb, Restating())
    said(services, HIKING, seconds_ago=120)
    services.consolidator.consolidate(CHANNEL, force=True)
    (fact,) = facts_of_alice(services)
    said(services, HIKING, seconds_ago=60)
    read = services.repository.forgotten_times

    def then_forget(facts: Any) -> dict[tuple[str, str, str], int]:
        found = read(facts)  # nothing forgotten yet ...
        discord.text("memory", "forget", {"what": fact.fact_id}, user=ALICE)  # ... then it is
        return found

    monkeypatch.setattr(services.repository, "forgotten_times", then_forget)
    (raced,) = services.consolidator.consolidate(CHANNEL, force=True)
    assert raced.status == Status.REJECTED and pending(services) == 1
    assert facts_of_alice(services) == []

    monkeypatch.setattr(services.repository, "forgotten_times", read)
    (retried,) = services.consolidator.consolidate(CHANNEL, force=True)

    assert retried.status == Status.CONSOLIDATED and retried.consumed == 1
    assert [d.reason for d in retried.discarded] == ["forgotten by its subject"]
    assert facts_of_alice(services) == [] and pending(services) == 0


def test_said_again_after_the_forget_it_is_remembered_again(
    discord: Discord, dynamodb: Any
) -> None:
    services = consolidating(dynamodb, Restating())
    said(services, HIKING, seconds_ago=120)
    services.consolidator.consolidate(CHANNEL, force=True)
    (fact,) = facts_of_alice(services)
    discord.text("memory", "forget", {"what": fact.fact_id}, user=ALICE)
    said(services, HIKING, seconds_ago=-1)  # after the forget (ids carry their time)

    services.consolidator.consolidate(CHANNEL, force=True)

    assert [f.fact_id for f in facts_of_alice(services)] == [fact.fact_id]
