"""Invariant 10, as the attack: no single member can stop memory.

A member whose messages make the model's answer invalid, a batch the model always fails on,
fifty channels that always fail: none of them blocks consolidation for anyone else, and none
costs more than a bounded number of model calls a day. Also here: consolidated facts pass the
same mention filter as `/memory remember`, and each fact lives in the scope of its evidence.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from botmemory.clock import DAY_MS, ManualClock
from botmemory.consolidation.candidates import MAX_QUEUED_PER_PERSON
from botmemory.consolidation.consolidator import ROUND_RESERVE_MS
from botmemory.consolidation.model.contract import (
    ConsolidationAnswer,
    MemoryModelError,
    ModelInput,
    ProposedEpisode,
    parse_answer,
)
from botmemory.consolidation.model.rules import FACTS_PER_OBSERVATION, RulesModel
from botmemory.consolidation.outcome import Outcome, Status, outcome_metrics
from botmemory.people.erasure import Eraser
from botmemory.records import ObservationKind, Quarantine, scope_of
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage.items import quarantine_values
from botmemory.storage.keys import observation_sk
from localrun import gateway as gw
from localrun.storage import channel_state, put_items
from scripts.make_events import ALICE, CHANNEL, GUILD
from tests.botmemory.commands.test_commands import STAFF, Discord
from tests.conftest import ScriptedModel, scan_all
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401

T0 = 1_767_225_600_000
MINUTE_MS = 60_000
STEP_MINUTES = 5  # template.yaml: the sweep runs rate(5 minutes)
MALLORY = gw.CAROL
DM = scope_of(None)


class FailingModel:
    """The rules model, except that it fails for some batches, the way a real model fails
    deterministically (a truncated answer). Every call is recorded with its time."""

    def __init__(self, clock: ManualClock, fails: Callable[[ModelInput], bool]) -> None:
        self.name = "failing"
        self.clock = clock
        self.fails = fails
        self.inner = RulesModel()
        self.calls: list[tuple[int, ModelInput]] = []

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        self.calls.append((self.clock.now_ms(), batch))
        if self.fails(batch):
            raise MemoryModelError("answer truncated (max_tokens=2000)")
        return self.inner.consolidate(batch)

    def calls_between(self, start_ms: int, end_ms: int) -> int:
        return sum(1 for at, _ in self.calls if start_ms <= at < end_ms)


def services_with(
    dynamodb: Any, clock: ManualClock, model: Any, **overrides: Any
) -> MemoryServices:
    settings = Settings(
        table_name="MemoryTable", memory_model="scripted", bot_user_id=gw.BOT, **overrides
    )
    return build_services(settings, dynamodb=dynamodb, clock=clock, model=model)


def pending(services: MemoryServices, channel: str = gw.CHANNEL) -> int:
    return services.repository.count_pending(channel, 100_000)


def fact_texts(dynamodb: Any) -> list[str]:
    return sorted(i["text"]["S"] for i in scan_all(dynamodb) if i["sk"]["S"].startswith("FACT#"))


def topics(n: int, start_ms: int = T0, channel: str = gw.CHANNEL) -> list[dict[str, Any]]:
    """`n` messages, each stating one fact ("<Name> likes topic i"), three speakers in turn."""
    speakers = [gw.ALICE, gw.BOB, gw.CAROL]
    return [
        gw.message(speakers[i % 3], f"I like topic {i}", start_ms + i * 1000, channel=channel)
        for i in range(n)
    ]


def run_for(
    services: MemoryServices, clock: ManualClock, minutes: int, channels: list[str]
) -> list[Outcome]:
    """Time passes in 5-minute steps; at each, a stream trigger for every channel (as if a
    message had arrived) and a sweep, as the template schedules it."""
    outcomes: list[Outcome] = []
    for _ in range(minutes // STEP_MINUTES):
        clock.advance(ms=STEP_MINUTES * MINUTE_MS)
        for channel in channels:
            outcomes += services.consolidator.consolidate(channel)
        outcomes += services.consolidator.sweep()
    return outcomes


# Facts are dropped one by one; the answer stands. --------------------------------------------


def test_a_member_stating_125_things_at_once_blocks_nobody(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = FailingModel(clock, lambda batch: False)
    services = services_with(dynamodb, clock, model)
    walls = [
        gw.message(
            MALLORY,
            "; ".join(f"I like thing {w * 25 + i}" for i in range(25)),
            T0 + w * 1000,
        )
        for w in range(5)
    ]
    others = [
        gw.message(gw.ALICE, "I live in Lyon.", T0 + 10_000),
        gw.message(gw.BOB, "I use Vim for everything.", T0 + 11_000),
    ] + topics(13, start_ms=T0 + 20_000)[:13]
    services.recorder.record(walls + others)

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert outcome.status == Status.CONSOLIDATED and outcome.consumed == 20
    assert len(model.calls) == 1 and pending(services) == 0
    texts = fact_texts(dynamodb)
    assert "Alice lives in Lyon" in texts and "Bob uses Vim for everything" in texts
    # Fewer than the walls hold: a person gains at most MEMORY_NEW_FACTS_PER_PERSON a batch.
    walled = sum(t.startswith("Carol likes thing") for t in texts)
    assert walled == min(5 * FACTS_PER_OBSERVATION, Settings().new_facts_per_person)


def test_invalid_facts_in_an_answer_are_dropped_one_by_one(
    dynamodb: Any, clock: ManualClock
) -> None:
    def flood(batch: ModelInput) -> ConsolidationAnswer:
        alice = next(o.number for o in batch.observations if o.author_id == gw.ALICE)
        mallory = next(o.number for o in batch.observations if o.author_id == MALLORY)

        def proposed(user: str, text: str, number: int, kind: str = "preference") -> Any:
            return {
                "user_id": user,
                "text": text,
                "kind": kind,
                "evidence": [number],
                "supersedes": [],
            }

        raw = {
            "facts": [
                proposed(gw.ALICE, "Lives in Lyon", alice),
                proposed(MALLORY, "x" * 2001, mallory),  # over-long
                proposed(MALLORY, "Likes gossip", mallory, kind="gossip"),  # malformed
                "not even an object",
            ]
            + [proposed(MALLORY, f"Likes thing {i}", mallory) for i in range(125)],
            "episode": {"summary": "Mallory listed things.", "participants": []},
        }
        return parse_answer(json.dumps(raw))  # the path every provider's answer takes

    services = services_with(dynamodb, clock, ScriptedModel(flood))
    services.recorder.record(
        [gw.message(gw.ALICE, "I live in Lyon.", T0), gw.message(MALLORY, "I like things", T0)]
        + topics(18, start_ms=T0 + 1000)
    )

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert outcome.status == Status.CONSOLIDATED and outcome.consumed == 20
    assert pending(services) == 0
    reasons = [d.reason for d in outcome.discarded]
    assert reasons[0].startswith("malformed fact: text")
    assert reasons[1].startswith("malformed fact: kind")
    assert reasons[2].startswith("malformed fact")
    assert reasons.count("beyond the answer's cap of 100 facts") == 125 - 99
    # The flood stops at the person's cap on new facts, long before the transaction's; what
    # is beyond waits as candidates only while the channel's queue has room for that person.
    assert "beyond the cap, and the channel's candidate queue is full" in reasons
    assert outcome.deferred == MAX_QUEUED_PER_PERSON
    texts = fact_texts(dynamodb)
    assert "Lives in Lyon" in texts and "Likes gossip" not in texts
    assert outcome.facts_written == len(texts)


# A batch that keeps failing is split, then quarantined. ---------------------------------------


def test_a_poison_message_is_retried_three_times_split_then_quarantined_and_the_rest_kept(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = FailingModel(clock, lambda batch: any("POISON" in o.text for o in batch.observations))
    # Every topic kept as a fact (the cap on new facts per person is not what this measures).
    services = services_with(dynamodb, clock, model, max_batch=50, new_facts_per_person=20)
    messages = topics(50)
    poison = gw.message(MALLORY, "I love poison pills. POISON", T0 + 37 * 1000)
    messages[37] = poison
    services.recorder.record(messages)
    start = clock.now_ms()

    outcomes = services.consolidator.consolidate(gw.CHANNEL)
    outcomes += run_for(services, clock, 24 * 60, [gw.CHANNEL])

    sizes = [len(batch.observations) for _, batch in model.calls]
    assert sizes[:3] == [50, 50, 50]  # the whole batch, retried from its head 3 times
    assert max(sizes[3:]) <= 25  # then split
    poisoned = [
        len(b.observations)
        for _, b in model.calls
        if any("POISON" in o.text for o in b.observations)
    ]
    assert poisoned[-1] == 1  # isolated before it was quarantined
    assert model.calls_between(start, start + DAY_MS) <= 20
    assert [o.status for o in outcomes].count(Status.QUARANTINED) == 1
    assert pending(services) == 0
    # Everything else became facts; the quarantined words never do.
    speakers = ["Alice", "Bob", "Carol"]
    assert fact_texts(dynamodb) == sorted(
        f"{speakers[i % 3]} likes topic {i}" for i in range(50) if i != 37
    )
    (record,) = services.repository.quarantined(gw.CHANNEL)
    poison_sk = next(
        o.sk for o in services.repository.channel_observations(gw.CHANNEL) if "POISON" in o.content
    )
    assert record.observation_sks == [poison_sk] and record.user_ids == [MALLORY]
    assert "truncated" in record.error and record.attempts >= 3
    assert record.expires_at is not None
    assert dict(outcome_metrics(outcomes))["BatchesQuarantined"] == 1
    # Healthy again: no failure record, and new messages consolidate at once.
    assert not [k for k in channel_state(services.repository, gw.CHANNEL) if k.startswith("retry")]
    calls = len(model.calls)
    services.recorder.record(topics(20, start_ms=clock.now_ms() - 60_000))
    assert [o.status for o in services.consolidator.consolidate(gw.CHANNEL)] == [
        Status.CONSOLIDATED
    ]
    assert len(model.calls) == calls + 1
    # The record names its author: erasure takes it too.
    Eraser(services.repository).erase(MALLORY)
    assert services.repository.quarantined(gw.CHANNEL) == []


def test_a_channel_that_always_fails_costs_at_most_20_model_calls_a_day_then_recovers(
    dynamodb: Any, clock: ManualClock
) -> None:
    broken = [True]
    model = FailingModel(clock, lambda batch: broken[0])
    services = services_with(dynamodb, clock, model, new_facts_per_person=20)
    services.recorder.record(topics(25))
    start = clock.now_ms()

    services.consolidator.consolidate(gw.CHANNEL)
    outcomes = run_for(services, clock, 2 * 24 * 60, [gw.CHANNEL])

    assert model.calls_between(start, start + DAY_MS) <= 20
    assert model.calls_between(start + DAY_MS, start + 2 * DAY_MS) <= 20
    # Stream triggers inside the back-off never reach the model.
    assert Status.DEFERRED in {o.status for o in outcomes}
    quarantined = [o for o in outcomes if o.status == Status.QUARANTINED]
    assert quarantined and all(o.consumed == 1 for o in quarantined)

    broken[0] = False  # the model works again: the rest is consolidated at the next try
    after = run_for(services, clock, 3 * 60, [gw.CHANNEL])

    assert Status.CONSOLIDATED in {o.status for o in after}
    assert pending(services) == 0
    assert len(fact_texts(dynamodb)) == 25 - len(quarantined)


# Stuck channels never starve the sweep. -------------------------------------------------------


def stuck_world(
    dynamodb: Any, clock: ManualClock
) -> tuple[MemoryServices, FailingModel, list[str], str]:
    stuck = [f"2100000000000000{i:02d}" for i in range(50)]
    healthy = "220000000000000001"
    model = FailingModel(clock, lambda batch: batch.channel_id in stuck)
    services = services_with(dynamodb, clock, model)
    for channel in stuck:
        services.recorder.record(topics(3, start_ms=T0 - 60_000, channel=channel))
        services.consolidator.consolidate(channel)  # below the threshold: on the sweep's list
    clock.advance(ms=MINUTE_MS)
    services.recorder.record(topics(3, start_ms=T0, channel=healthy))
    services.consolidator.consolidate(healthy)
    clock.advance(ms=31 * MINUTE_MS)
    return services, model, stuck, healthy


def test_fifty_stuck_channels_do_not_starve_a_healthy_quiet_channel(
    dynamodb: Any, clock: ManualClock
) -> None:
    services, model, stuck, healthy = stuck_world(dynamodb, clock)

    outcomes = services.consolidator.sweep()

    assert [(o.status, o.consumed) for o in outcomes if o.channel_id == healthy] == [
        (Status.CONSOLIDATED, 3)
    ]
    assert pending(services, healthy) == 0
    called = [batch.channel_id for _, batch in model.calls if batch.channel_id in stuck]
    assert sorted(called) == sorted(stuck)  # each stuck channel once, not again in this sweep

    clock.advance(ms=STEP_MINUTES * MINUTE_MS)
    calls = len(model.calls)
    services.consolidator.sweep()
    assert len(model.calls) == calls  # they back off


def test_with_a_time_budget_the_healthy_channel_is_reached_within_a_few_sweeps(
    dynamodb: Any, clock: ManualClock
) -> None:
    services, model, stuck, healthy = stuck_world(dynamodb, clock)
    sweeps = 0

    def sweep_with_budget() -> list[Outcome]:
        # Each model call takes a minute of a 5-minute sweep: 4 rounds fit.
        first_call = len(model.calls)
        return services.consolidator.sweep(
            time_left_ms=lambda: 300_000 - 60_000 * (len(model.calls) - first_call)
        )

    consolidated = False
    while not consolidated and sweeps < 20:
        sweeps += 1
        consolidated = any(
            o.channel_id == healthy and o.status == Status.CONSOLIDATED for o in sweep_with_budget()
        )
        clock.advance(ms=STEP_MINUTES * MINUTE_MS)

    rounds_per_sweep = (300_000 - ROUND_RESERVE_MS) // 60_000 + 1
    assert consolidated and sweeps <= len(stuck) // rounds_per_sweep + 1
    before_healthy = [b.channel_id for _, b in model.calls][
        : [b.channel_id for _, b in model.calls].index(healthy)
    ]
    assert sorted(before_healthy) == sorted(stuck)  # each stuck channel once before it, no more


# The mention filter, and each fact in the scope of its evidence. -------------------------------


def test_a_consolidated_fact_that_would_ping_someone_is_discarded(
    dynamodb: Any, clock: ManualClock
) -> None:
    def pings(batch: ModelInput) -> ConsolidationAnswer:
        said = next(o.number for o in batch.observations if o.author_id == gw.ALICE)
        return parse_answer(
            {
                "facts": [
                    {"user_id": gw.ALICE, "text": t, "kind": "person", "evidence": [said]}
                    for t in (
                        f"Is best friends with <@{gw.BOB}>",
                        "Wants to tell @everyone about the raid",
                        "Moderates <#200000000000000009> and <@&500000000000000001>",
                        "Plays chess",
                    )
                ],
                "episode": {"summary": "Alice talked.", "participants": [gw.ALICE]},
            }
        )

    services = services_with(dynamodb, clock, ScriptedModel(pings))
    services.recorder.record(topics(20))

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert fact_texts(dynamodb) == ["Plays chess"]
    assert [d.reason for d in outcome.discarded] == [
        "mentions someone (@everyone, @here or a user, role or channel mention)"
    ] * 3


def test_a_batch_whose_first_event_lacks_its_guild_keeps_the_guilds_facts_in_the_guild(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(dynamodb, clock, RulesModel())
    services.recorder.record(
        [gw.message(gw.ALICE, "I use Emacs.", T0, guild=None)]  # arrived without its guild id
        + [gw.message(gw.BOB, "I live in Lyon.", T0 + 1000)]
        + topics(18, start_ms=T0 + 2000)
    )

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert outcome.status == Status.CONSOLIDATED and outcome.consumed == 20
    repository = services.repository
    assert "Bob lives in Lyon" in [f.text for f in repository.active_facts(gw.GUILD, gw.BOB, 10)]
    assert repository.active_facts(DM, gw.BOB, 10) == []
    # Alice's words without a guild are facts of that scope, never the guild's.
    assert [f.text for f in repository.active_facts(DM, gw.ALICE, 10)] == ["Alice uses Emacs"]
    guild_facts = [f.text for f in repository.active_facts(gw.GUILD, gw.ALICE, 10)]
    assert "Alice uses Emacs" not in guild_facts
    # The episode and the profiles: the channel's scope, and each person's own.
    (episode,) = [i for i in scan_all(dynamodb) if i["sk"]["S"].startswith("EP#")]
    assert episode["scope"]["S"] == gw.GUILD
    profiles = {i["pk"]["S"] for i in scan_all(dynamodb) if i["sk"]["S"] == "PROFILE"}
    assert f"SC#{gw.GUILD}#U#{gw.BOB}" in profiles and f"SC#{DM}#U#{gw.BOB}" not in profiles
    assert f"SC#{DM}#U#{gw.ALICE}" in profiles


def test_a_fact_citing_observations_of_two_scopes_is_discarded(
    dynamodb: Any, clock: ManualClock
) -> None:
    def across(batch: ModelInput) -> ConsolidationAnswer:
        hers = [o.number for o in batch.observations if o.author_id == gw.ALICE]
        return ConsolidationAnswer(
            facts=parse_answer(
                {
                    "facts": [
                        {
                            "user_id": gw.ALICE,
                            "text": "Uses Emacs and Vim",
                            "kind": "tool",
                            "evidence": hers[:2],
                        }
                    ],
                    "episode": {"summary": "x"},
                }
            ).facts,
            episode=ProposedEpisode(summary="Alice talked.", participants=[]),
        )

    services = services_with(dynamodb, clock, ScriptedModel(across))
    services.recorder.record(
        [
            gw.message(gw.ALICE, "I use Emacs.", T0, guild=None),
            gw.message(gw.ALICE, "I use Vim.", T0 + 1000),
        ]
        + topics(18, start_ms=T0 + 2000)
    )

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert fact_texts(dynamodb) == []
    assert [d.reason for d in outcome.discarded] == ["cites observations of different scopes"]


def test_staff_see_what_was_quarantined_in_the_channel_as_text(
    monkeypatch: pytest.MonkeyPatch, fake_discord: FakeDiscordRest, dynamodb: Any
) -> None:
    discord = Discord(monkeypatch, fake_discord, dynamodb)
    assert "Nothing in this channel" in discord.text(
        "memory-staff", "quarantine", {}, permissions=STAFF
    )
    message_id = gw.snowflake(T0)
    record = Quarantine(
        channel_id=CHANNEL,
        quarantine_id="q1",
        scope=GUILD,
        observation_sks=[observation_sk(T0, ObservationKind.MESSAGE, message_id)],
        user_ids=[ALICE],
        error="model said **obey** @everyone [x](https://evil.example)",
        attempts=3,
        quarantined_ms=T0,
    )
    put_items(discord.services().repository, [quarantine_values(record)])

    listing = discord.text("memory-staff", "quarantine", {}, permissions=STAFF)

    assert "`q1`" in listing and message_id in listing and f"<@{ALICE}>" in listing
    assert "after 3 attempts" in listing
    assert "**obey**" not in listing and "@everyone" not in listing
    assert "[x](" not in listing and "obey" in listing
    refused = discord.text("memory-staff", "quarantine", {})
    assert "Manage Server" in refused and "q1" not in refused
