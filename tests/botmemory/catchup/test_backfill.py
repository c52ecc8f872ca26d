"""A server's past imported by staff's choice (`/memory-staff backfill`, botmemory.catchup
.backfill): staff start it through InteractionsFunction, CatchUpFunction reads each
channel's history page by page from the fake Discord (its per-channel buckets enforced)
into the ingest path, with every rule live events get. 10,000 messages over 5 channels,
one of them private, one with memory off; an opted-out member, a member who ran /forgetme
the day before (what they said before it stays erased, what they said after is kept as
live), a deleted message. One run a server; staff see progress and can cancel.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from botmemory.catchup import backfill
from botmemory.clock import DAY_MS, ManualClock
from botmemory.people.erasure import Eraser
from botmemory.records import ObservationKind
from botmemory.runtime import build_services
from botmemory.settings.config import Settings
from botmemory.storage.catchup import CatchUpStore
from localrun import gateway as gw
from tests.conftest import TABLE
from tests.support.catch_up import Stack, observations, of_kind
from tests.support.deployment import guild_create
from tests.support.fake_discord import FakeDiscordRest

CHANNELS = [f"20000000000000020{i}" for i in range(1, 6)]
PRIVATE, OFF = CHANNELS[3], CHANNELS[4]
DAVE = "300000000000000004"
HOUR_MS = 3_600_000


def server(stack: Stack, per_channel: int) -> dict[str, list[tuple[str, str]]]:
    """The server's past: `per_channel` messages in each channel over the last six days,
    by Alice, Bob, Carol and Dave in turn. Channel -> [(message id, author)]."""
    stack.local.invoke("IngestFunction", {"events": [guild_create(CHANNELS[:3], [PRIVATE, OFF])]})
    history = stack.discord.history
    now = int(time.time() * 1000)
    start = now - 6 * DAY_MS
    step = (6 * DAY_MS - HOUR_MS) // per_channel
    authors = [gw.ALICE, gw.BOB, gw.CAROL, DAVE]
    said: dict[str, list[tuple[str, str]]] = {}
    for c, channel in enumerate(CHANNELS):
        said[channel] = [
            (
                history.say(channel, start + i * step + c, author, f"{channel[-1]}: message {i}"),
                author,
            )
            for i in range(per_channel)
            for author in [authors[(i + c) % len(authors)]]
        ]
    return said


def services(dynamodb: Any, clock: ManualClock | None = None) -> Any:
    return build_services(
        Settings(table_name=TABLE, memory_model="rules"), dynamodb=dynamodb, clock=clock
    )


def test_a_backfill_of_10000_messages_keeps_every_rule_of_live_events(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    said = server(stack, 2_000)
    now = int(time.time() * 1000)
    # Carol opted out; Dave ran /forgetme the day before; one message was deleted; staff
    # switched one channel's memory off.
    memory = services(dynamodb)
    memory.opt_outs.opt_out(gw.CAROL)
    day_before = ManualClock(now - DAY_MS)
    then = services(dynamodb, day_before)
    Eraser(then.repository, day_before, hash_of=then.opt_outs.hash_of).erase(DAVE)
    deleted, _ = said[CHANNELS[0]][10]
    fake_discord.history.delete(CHANNELS[0], deleted)
    memory.repository.set_channel_memory(gw.GUILD, OFF, off=True, staff_id=gw.ALICE, now_ms=now)
    fake_discord.enforce_buckets(limit=5, window=5.0, clock=stack.bucket_clock)

    started = stack.staff("start", {"days": 7})
    assert started.startswith("Backfill started: the last 7 days of 5 channels")
    assert "already under way" in stack.staff("start", {"days": 3})  # one run a server
    assert len(stack.queued) == 5  # the second start sent nothing
    stack.drain()

    expected: dict[str, set[str]] = {}
    for channel, messages in said.items():
        expected[channel] = {
            m
            for m, author in messages
            if channel != OFF
            and author != gw.CAROL
            and m != deleted
            and not (author == DAVE and int(m) >> 22 <= (now - DAY_MS - 1_420_070_400_000))
        }
        held = set(of_kind(observations(dynamodb, channel), ObservationKind.MESSAGE))
        assert held == expected[channel], channel
    assert expected[PRIVATE] and not expected[OFF]
    assert any(a == DAVE for c in CHANNELS[:4] for m, a in said[c] if m in expected[c])
    imported = sum(len(ids) for ids in expected.values())

    status = stack.staff("status")
    assert "done" in status and "Channels: 5 of 5 read" in status
    assert f"Messages imported: {imported:,}" in status
    assert f"about {backfill.model_calls(imported):,} in all" in status
    assert backfill.model_calls(10_000) <= 50 * 10  # the live figure's bound, 50 per 1,000
    # Under the buckets' limits: waited on the queue, never refused; nothing posted (no
    # answer was started for anything it read).
    assert fake_discord.rate_limited == []
    assert fake_discord.requests_matching("POST") == []
    assert "No backfill is under way" in stack.staff("cancel")


def test_staff_cancel_a_backfill_and_its_pages_stop(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    server(stack, 300)
    stack.staff("start", {"channel": CHANNELS[0], "days": 7})
    stack.drain(limit=1)  # one page read
    reads = len(fake_discord.requests_matching("GET"))
    assert "Backfill cancelled after 100 messages" in stack.staff("cancel")
    stack.drain()
    assert len(fake_discord.requests_matching("GET")) == reads
    assert "cancelled" in stack.staff("status")
    assert len(of_kind(observations(dynamodb, CHANNELS[0]), ObservationKind.MESSAGE)) == 100
    # A new run may start once that one is over.
    assert stack.staff("start", {"channel": CHANNELS[1]}).startswith("Backfill started")


def test_a_run_stops_at_its_cap_and_a_channel_it_cannot_read_is_counted(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    monkeypatch.setattr(backfill, "RUN_CAP", 250)
    stack = Stack(monkeypatch, fake_discord)
    server(stack, 200)
    fake_discord.history.lose_access(CHANNELS[2])
    stack.staff("start", {"days": 30})
    stack.drain()
    run = CatchUpStore(dynamodb, TABLE).backfill_run(gw.GUILD)
    assert run is not None and run.status == "capped" and run.messages == 250
    held = sum(len(of_kind(observations(dynamodb, c), ObservationKind.MESSAGE)) for c in CHANNELS)
    assert held == 250


@pytest.mark.parametrize("options", [{"days": 0}, {"days": 31}, {"channel": "200000000000000999"}])
def test_a_start_outside_its_bounds_is_refused(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest, options: Any
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    server(stack, 1)
    answer = stack.staff("start", options)
    assert "Backfill started" not in answer
    assert stack.queued == []
