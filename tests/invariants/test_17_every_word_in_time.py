"""Every observation is consumed within its bound (botmemory.consolidation.bounds), over days.

Through the functions template.yaml declares, on moto, in simulated time
(tests.support.simulated_deployment): a server's quiet channels (1, 3 and 5 messages), channels
that cross the threshold, a busy one whose messages arrive while its rounds run, one where the
bot answers, one whose every batch the memory model cannot answer, sweeps every five minutes;
an outage of the memory model; a clock that jumps; a channel whose messages are all deleted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from botmemory.consolidation import bounds
from botmemory.settings.config import Settings
from botmemory.storage import keys
from localrun import gateway as gw
from tests.conftest import scan_all
from tests.support.fake_discord import FakeDiscordRest
from tests.support.fake_memory_model import (  # noqa: F401
    RunningWriter,
    Teaching,
    fact_writer,
)
from tests.support.simulated_deployment import SimulatedDeployment, Tracked

T0 = 1_788_220_800_000  # 2026-09-01T00:00:00Z
MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
MODEL_MS = 3_000  # what each memory model call takes on the simulated clock
SETTINGS = Settings(memory_model="rules")  # the template's defaults are the settings' own

NURSE = "200000000000000101"  # Bob says one thing and nobody else speaks
THREE = "200000000000000103"
FIVE = "200000000000000105"
CROSSING = "200000000000000120"  # 25 in a burst: a full batch, then 5 left over
BELOW = "200000000000000112"  # 12: below the threshold, not tiny
BUSY = "200000000000000150"  # one message every 3 s for half an hour
ANSWERED = "200000000000000160"  # members ask the bot; its answers are observations too
BROKEN = "200000000000000199"  # the model never answers this channel usably
BUSY_EVERY_MS = 3_000
SPEAKERS = (gw.ALICE, gw.BOB, gw.CAROL)


@pytest.fixture
def deployment(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    fake_discord: FakeDiscordRest,
    fact_writer: RunningWriter,  # noqa: F811
) -> Iterator[SimulatedDeployment]:
    fact_writer.writer.teachings.append(Teaching("I am a nurse", "{name} is a nurse"))
    deployed = SimulatedDeployment(
        monkeypatch,
        dynamodb,
        start_ms=T0,
        # One attempt per call: a refused call is not retried after a real sleep.
        environment={**fact_writer.environment(), "MEMORY_MODEL_MAX_ATTEMPTS": "1"},
        discord_url=fake_discord.url,
    )
    fact_writer.writer.on_batch = deployed.model_thinks(MODEL_MS)
    yield deployed


def talk(deployment: SimulatedDeployment, channel: str, count: int, start: int, gap: int) -> None:
    for n in range(count):
        speaker = SPEAKERS[n % len(SPEAKERS)]
        deployment.schedule(start + n * gap, channel, speaker, f"note {n} about the garden")


def fact_texts(dynamodb: Any) -> list[str]:
    return [i["text"]["S"] for i in scan_all(dynamodb) if i["sk"]["S"].startswith("FACT#")]


def quarantined(dynamodb: Any) -> list[dict[str, Any]]:
    return [i for i in scan_all(dynamodb) if i["sk"]["S"].startswith(keys.QUARANTINE_PREFIX)]


def late(deployment: SimulatedDeployment, bound: Any) -> list[tuple[str, int, int | None, int]]:
    """Every observation that waited longer than `bound(tracked, position, waiting)`."""
    found = []
    for channel in {t.channel for t in deployment.tracked.values()}:
        mine = deployment.of(channel)
        for position, tracked in enumerate(mine, start=1):
            limit = bound(tracked, position, len(mine))
            if tracked.waited_ms is None or tracked.waited_ms > limit:
                found.append((channel, position, tracked.waited_ms, limit))
    return found


def metric_sum(printed: str, name: str) -> float:
    lines = [json.loads(line) for line in printed.splitlines() if line.startswith('{"_aws"')]
    return sum(sum(line.get(name, [])) for line in lines)


# A server over two days ------------------------------------------------------------------


def a_server(deployment: SimulatedDeployment) -> None:
    deployment.schedule(T0 + MINUTE, NURSE, gw.BOB, "I am a nurse.")
    talk(deployment, BROKEN, 3, T0 + HOUR, MINUTE)
    talk(deployment, THREE, 3, T0 + 2 * HOUR, 7 * MINUTE)
    talk(deployment, CROSSING, 25, T0 + 3 * HOUR, 5_000)
    talk(deployment, FIVE, 5, T0 + 5 * HOUR, 10 * MINUTE)
    talk(deployment, BELOW, 12, T0 + 8 * HOUR, 2 * MINUTE)
    talk(deployment, BUSY, 600, T0 + 10 * HOUR, BUSY_EVERY_MS)
    for n in range(3):
        deployment.schedule(
            T0 + 12 * HOUR + n * HOUR, ANSWERED, gw.CAROL, f"what is on today {n}?", mention=True
        )
    # A day later, quiet channels speak again.
    deployment.schedule(T0 + DAY + 30 * MINUTE, NURSE, gw.BOB, "night shifts again")
    talk(deployment, THREE, 2, T0 + DAY + 2 * HOUR, 20 * MINUTE)


def server_bound(tracked: Tracked, position: int, waiting: int) -> int:
    if tracked.channel == BROKEN:
        return bounds.failing_ms(SETTINGS, position, waiting)
    if tracked.channel == BUSY:
        # At this rate a batch fills within (batch - 1) messages; then a full batch's bound.
        fill = (SETTINGS.consolidate_every - 1) * BUSY_EVERY_MS
        return fill + bounds.full_batch_ms(SETTINGS)
    return bounds.quiet_ms(SETTINGS)


def test_every_observation_is_consumed_within_its_bound_over_two_days(
    deployment: SimulatedDeployment,
    fact_writer: RunningWriter,  # noqa: F811
) -> None:
    fact_writer.writer.fails = lambda batch: "unusable" if f"Channel {BROKEN}." in batch else None
    a_server(deployment)

    deployment.run_until(T0 + 2 * DAY)

    assert not deployment.pending(), [(t.channel, t.sk) for t in deployment.pending()]
    assert not late(deployment, server_bound)
    # Bob's one line was learned, through the memory model, in its quiet channel; being
    # tiny, it waited for MEMORY_TINY_FLUSH_MINUTES first (one model call for more words).
    assert "Bob is a nurse" in fact_texts(deployment.dynamodb)
    first = deployment.of(NURSE)[0].waited_ms or 0
    assert SETTINGS.tiny_flush_minutes * MINUTE <= first <= bounds.quiet_ms(SETTINGS)
    assert len(deployment.of(BUSY)) == 600
    assert deployment.said_while_thinking > 0  # rounds raced new messages
    assert len(deployment.of(ANSWERED)) == 6  # three questions and three answers
    # The channel the model cannot answer lost its batch one observation at a time, each
    # recorded for staff; no other channel lost anything.
    assert sum(len(q["observation_sks"]["L"]) for q in quarantined(deployment.dynamodb)) == 3
    assert {q["channel_id"]["S"] for q in quarantined(deployment.dynamodb)} == {BROKEN}


def test_the_bounds_are_what_the_docs_promise() -> None:
    # The figures docs/architecture.md (invariant 17) and the README state, default settings.
    assert bounds.full_batch_ms(SETTINGS) == 240_000  # 4 minutes
    assert bounds.quiet_ms(SETTINGS) == 120 * MINUTE + 5 * MINUTE + 10_000 + 110_000
    assert bounds.hot_ms(SETTINGS) == 460_000  # 7 min 40 s
    assert bounds.failures_to_quarantine(SETTINGS, 3) == 5


# An outage is not a poison batch ----------------------------------------------------------


def test_an_outage_backs_off_quarantines_nothing_and_the_bound_starts_again(
    deployment: SimulatedDeployment,
    fact_writer: RunningWriter,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    back = T0 + 10 * HOUR  # the provider answers nobody until then
    fact_writer.writer.fails = lambda _batch: 503 if deployment.clock.now_ms() < back else None
    deployment.schedule(T0 + MINUTE, NURSE, gw.BOB, "I am a nurse.")
    talk(deployment, BELOW, 12, T0 + 20 * MINUTE, MINUTE)
    talk(deployment, CROSSING, 25, T0 + HOUR, 5_000)

    deployment.run_until(back)

    during = capsys.readouterr().out
    assert len(deployment.pending()) == 38  # nothing consumed without its facts
    assert quarantined(deployment.dynamodb) == []
    assert metric_sum(during, "ModelUnavailable") >= 10  # counted (and alarmed, see template)
    assert metric_sum(during, "ObservationsBacklogged") >= 38

    deployment.run_until(back + DAY)

    assert not deployment.pending()
    assert quarantined(deployment.dynamodb) == []
    after = bounds.after_outage_ms(SETTINGS)
    assert all(t.consumed_ms and t.consumed_ms <= back + after for t in deployment.tracked.values())
    assert "Bob is a nurse" in fact_texts(deployment.dynamodb)


# Bad input ---------------------------------------------------------------------------------


def test_a_clock_that_jumps_back_or_a_day_ahead_loses_nothing(
    deployment: SimulatedDeployment,
) -> None:
    deployment.schedule(T0 + MINUTE, NURSE, gw.BOB, "I am a nurse.")
    deployment.schedule(T0 + 2 * MINUTE, THREE, gw.ALICE, "note about the garden")
    deployment.run_until(T0 + 30 * MINUTE)
    deployment.clock.set(T0 + 25 * MINUTE)  # NTP steps the clock back five minutes
    deployment.run_until(T0 + 4 * HOUR)
    assert not deployment.pending()

    deployment.schedule(T0 + 5 * HOUR, BELOW, gw.CAROL, "note after the jump")
    deployment.run_until(T0 + 5 * HOUR + MINUTE)
    deployment.clock.set(T0 + 29 * HOUR)  # and a day ahead
    deployment.run_until(T0 + 29 * HOUR + 10 * MINUTE)

    assert not deployment.pending()
    assert all(
        (t.waited_ms or 0) <= DAY + bounds.quiet_ms(SETTINGS) for t in deployment.tracked.values()
    )


def test_a_channel_whose_every_message_is_deleted_is_consumed_without_a_model_call(
    deployment: SimulatedDeployment,
    fact_writer: RunningWriter,  # noqa: F811
) -> None:
    said: list[dict[str, Any]] = []

    def message(n: int) -> Any:
        def make(now: int) -> dict[str, Any]:
            said.append(gw.message(gw.ALICE, f"I am a nurse, part {n}", now, channel=BELOW))
            return said[-1]

        return make

    for n in range(8):
        deployment.schedule_event(T0 + MINUTE + n * 1000, message(n))
    for n in range(8):
        deployment.schedule_event(T0 + 5 * MINUTE + n * 1000, lambda _now, n=n: gw.delete(said[n]))

    deployment.run_until(T0 + 4 * HOUR)

    assert not deployment.pending()
    assert len(deployment.of(BELOW)) == 16
    assert fact_writer.writer.batches == []  # nothing left to show a model
    assert fact_texts(deployment.dynamodb) == []


def test_a_sweep_message_for_a_channel_done_meanwhile_and_a_repeated_one_are_counted_skips(
    deployment: SimulatedDeployment,
    fact_writer: RunningWriter,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    talk(deployment, CROSSING, 20, T0 + MINUTE, 1000)  # a full batch: consolidated at once
    deployment.run_until(T0 + 5 * MINUTE)
    assert not deployment.pending()
    calls = len(fact_writer.writer.batches)
    capsys.readouterr()

    stale = json.dumps({"channel_id": CROSSING, "source": "sweep", "force": True, "since_ms": T0})
    deployment.send_work(stale, CROSSING, "stale-1")
    deployment.send_work(stale, CROSSING, "stale-2")  # two in flight for one channel
    deployment.run_until(T0 + 6 * MINUTE)

    assert metric_sum(capsys.readouterr().out, "WorkSkipped") == 2
    assert len(fact_writer.writer.batches) == calls  # no model call for either
    assert deployment.worker_failures == 0
