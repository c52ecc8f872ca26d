"""Continuity while the bot talks (MEMORY_ANSWERED_TURNS_PER_REFRESH): a channel where the
bot has answered that many times since the last round is consolidated below the batch
size. Through the functions template.yaml declares: the questions into IngestFunction, the
answers by AnswerFunction (a chat model on 127.0.0.1), the table's stream (moto's, through
the template's filter) into ConsolidateFunction with a memory model on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from botmemory.clock import ManualClock
from botmemory.records import ObservationKind
from botmemory.runtime import build_services
from botmemory.settings.config import Settings
from localrun import gateway as gw
from tests.conftest import TABLE, CountingModel, RequestCounter
from tests.support.deployment import Deployment, guild_create
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import RunningWriter, fact_writer  # noqa: F401
from tests.support.fake_providers import ScriptServer

DEV = gw.CHANNEL


@pytest.fixture
def deployed(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
    fact_writer: RunningWriter,  # noqa: F811
    tmp_path: Path,
) -> Deployment:
    # The defaults: a batch of 20, a refresh after 5 answered turns.
    deployment = Deployment(
        monkeypatch,
        fake_discord,
        dynamodb,
        chat_server,
        tmp_path / "index.db",
        {"ConsolidateFunction": fact_writer.environment()},
    )
    deployment.say(guild_create([DEV], []))
    return deployment


def pending(deployed: Deployment) -> int:
    return deployed.services().repository.count_pending(DEV, 100)


def test_five_answered_turns_refresh_the_channel_and_four_do_not(
    deployed: Deployment,
    fact_writer: RunningWriter,  # noqa: F811
) -> None:
    for turn in range(4):
        deployed.ask(gw.ALICE, f"step {turn} of the auth middleware test?", DEV, f"Try {turn}.")

    assert len(deployed.reports) == 4
    assert all(r["status"] == "answered" for r in deployed.reports)
    assert fact_writer.writer.batches == []  # no round: 8 observations wait, 4 answers
    assert pending(deployed) == 8

    deployed.ask(gw.ALICE, "and the last step?", DEV, "Run it again.")

    # The fifth answer's observation reached ConsolidateFunction through the stream: one
    # round took the 10 in, below the batch size of 20.
    assert len(fact_writer.writer.batches) == 1
    assert fact_writer.writer.batches[0].count("[bot]") == 5
    assert pending(deployed) == 0
    (episode,) = deployed.services().repository.recent_episodes(DEV, 5)
    assert episode.summary == "Members talked."


def test_members_talking_among_themselves_wait_for_the_batch(
    deployed: Deployment,
    fact_writer: RunningWriter,  # noqa: F811
) -> None:
    deployed.say(*(deployed.message(gw.BOB, f"message {n}", DEV) for n in range(12)))

    assert fact_writer.writer.batches == [] and pending(deployed) == 12


def test_off_and_one_query_per_trigger(dynamodb: Any, clock: ManualClock) -> None:
    """MEMORY_ANSWERED_TURNS_PER_REFRESH=0 turns it off; a trigger below the threshold reads
    the channel's pending observations, and their kinds, in one Query."""
    settings = Settings(
        table_name=TABLE, memory_model="rules", bot_user_id=gw.BOT, answered_turns_per_refresh=0
    )
    model = CountingModel()
    services = build_services(settings, dynamodb=dynamodb, clock=clock, model=model)
    at = clock.now_ms() - 60_000
    for n in range(6):
        services.recorder.record(
            [
                gw.message(gw.ALICE, f"<@{gw.BOT}> question {n}", at + n * 2000),
                gw.message(gw.BOT, f"answer {n}", at + n * 2000 + 1000),
            ]
        )
    stored, _ = services.repository.pending_observations(DEV, 20)
    assert sum(o.kind == ObservationKind.ANSWER for o in stored) == 6
    counter = RequestCounter(dynamodb)

    (outcome,) = services.consolidator.consolidate(DEV)

    assert outcome.status.value == "below_threshold" and model.calls == []
    assert counter.count("Query") == 1
    assert services.repository.pending_count(DEV, 20).answers == 6
