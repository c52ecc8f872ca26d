"""Catching up on a gap (botmemory.catchup) through CatchUpFunction as template.yaml wires
it (tests/support/catch_up.py): the relay's store records an unresumable session's
30-minute gap with its guilds, the schedule plans it, and the queue's tasks read the fake
Discord's history (which enforces its per-channel buckets) into the ingest path. Every
message of the gap is stored once, a message deleted in the gap is deleted, one edited in
the gap has its current text, a channel the bot can no longer read is skipped and counted,
and no request is refused with a 429: the next page waits for the wait the headers
announced.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from botmemory.consolidation.work import local_event
from botmemory.people.erasure import Eraser
from botmemory.records import ObservationKind
from botmemory.runtime import build_services
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.catchup import CatchUpStore
from localrun import gateway as gw
from relay.store import Store
from tests.conftest import TABLE, scan_all
from tests.support.catch_up import (
    CATCH_UP,
    GENERAL,
    MINUTE_MS,
    QUIET,
    Stack,
    granted,
    observations,
    of_kind,
    thirty_minute_gap,
)
from tests.support.deployment import guild_create
from tests.support.fake_discord import FakeDiscordRest


def test_a_thirty_minute_gap_is_read_back_once_with_its_edits_and_deletes(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    gap = thirty_minute_gap(stack, dynamodb)
    said, before, fleeting, gap_from, gap_to = (
        gap.said,
        gap.before,
        gap.fleeting,
        gap.gap_from,
        gap.gap_to,
    )
    fake_discord.enforce_buckets(limit=2, window=30.0, clock=stack.bucket_clock)
    stack.catch_up()

    items = observations(dynamodb, GENERAL)
    messages = of_kind(items, ObservationKind.MESSAGE)
    assert {m: c for m, c in messages.items() if m in said} == {
        m: [f"in the gap {i}" if i != 7 else "in the gap 7, corrected"] for i, m in enumerate(said)
    }
    assert fleeting not in messages
    assert set(of_kind(items, ObservationKind.DELETE)) == {before[1]}
    assert of_kind(items, ObservationKind.EDIT) == {before[3]: ["earlier 3, edited in the gap"]}
    assert not observations(dynamodb, QUIET)
    gap = CatchUpStore(dynamodb, TABLE).gaps_waiting(10)
    assert gap == []  # planned once
    counters = CatchUpStore(dynamodb, TABLE).counters(Store.gaps_sk(gap_to, 0))
    assert counters["channels"] == 2 and counters["skipped"] == 1 and counters["pages"] == 3
    # The third page waited for the bucket's reset instead of earning a 429.
    assert fake_discord.rate_limited == []
    assert len(stack.waited) == 1 and stack.waited[0] > 0
    reads = fake_discord.requests_matching("GET", f"/channels/{GENERAL}/messages")
    assert len(reads) == 3

    # Every call it made is one its role allows, on the partitions the role names.
    made = {action for action, _ in stack.calls}
    assert {"dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"} <= made
    assert made <= granted(CATCH_UP), made - granted(CATCH_UP)
    for action, pk in stack.calls:
        if action.startswith("dynamodb:"):
            assert pk is not None and (
                pk in (keys.RELAY_PK, keys.OPT_OUT_PK, keys.PAUSE_PK, keys.LEDGER_PK)
                or pk.startswith((keys.GUILD_PREFIX, keys.CHANNEL_PREFIX))
            ), (action, pk)
        if action in ("dynamodb:UpdateItem",):
            assert pk == keys.RELAY_PK
        if action == "dynamodb:PutItem":
            assert pk is not None and pk.startswith(keys.CHANNEL_PREFIX)

    # A second run of the same pages stores nothing twice.
    stored = len(observations(dynamodb, GENERAL))
    Store(dynamodb, TABLE).record_gap(0, 1, gap_from, gap_to + 1, (gw.GUILD,))
    stack.catch_up()
    assert len(observations(dynamodb, GENERAL)) == stored


def gap_of_one_channel(
    stack: Stack, dynamodb: Any, channel: str = GENERAL, said: int = 3
) -> tuple[list[str], int]:
    """A channel active before a gap, `said` messages in the gap; the gap recorded."""
    history = stack.discord.history
    stack.local.invoke("IngestFunction", {"events": [guild_create([channel], [])]})
    now = int(time.time() * 1000)
    gap_from, gap_to = now - 40 * MINUTE_MS, now - 10 * MINUTE_MS
    stack.live(channel, history.say(channel, now - 3 * 60 * MINUTE_MS, gw.BOB, "before"))
    ids = [history.say(channel, gap_from + i * 1_000, gw.BOB, f"gap {i}") for i in range(said)]
    Store(dynamodb, TABLE).record_gap(0, 1, gap_from, gap_to, (gw.GUILD,))
    return ids, gap_to


def test_a_429_puts_the_page_back_after_its_retry_after_and_never_asks_at_once(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    ids, _ = gap_of_one_channel(stack, dynamodb)
    refusal = {"message": "You are being rate limited.", "retry_after": 12.5, "global": False}
    fake_discord.script(429, refusal, {"Retry-After": "13"}, method="GET")
    stack.catch_up()
    reads = fake_discord.requests_matching("GET", f"/channels/{GENERAL}/messages")
    assert len(reads) == 2  # the refused one, then one after the wait
    assert stack.waited == [13]
    assert set(ids) <= set(of_kind(observations(dynamodb, GENERAL), ObservationKind.MESSAGE))


def test_a_channel_gone_or_closed_to_the_bot_is_skipped_after_one_request_and_counted(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    _, gap_to = gap_of_one_channel(stack, dynamodb)
    fake_discord.history.forget_channel(GENERAL)
    stack.catch_up()
    assert len(fake_discord.requests_matching("GET", f"/channels/{GENERAL}/messages")) == 1
    counters = CatchUpStore(dynamodb, TABLE).counters(Store.gaps_sk(gap_to, 0))
    assert counters == {"channels": 1, "skipped": 1}


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        '{"kind": "page", "gap": "GAP#1#1", "guild_id": "1", "from_ms": 0, "to_ms": 1}',
        '{"kind": "page", "gap": "GAP#0000000000001#00001", "guild_id": "1", "from_ms": 0,'
        ' "to_ms": 1}',
        '{"kind": "guild", "gap": "GAP#0000000000001#00001", "guild_id": "../1",'
        ' "from_ms": 0, "to_ms": 1}',
        "x" * 2_000,
    ],
)
def test_a_message_that_is_not_a_task_is_skipped_not_retried(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest, body: str
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    answer = stack.local.invoke(CATCH_UP, local_event(body, "catchup", 1))
    assert answer == {"batchItemFailures": []}
    assert stack.queued == [] and fake_discord.requests == []


def test_a_member_who_erased_their_memory_since_does_not_come_back(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    bobs, gap_to = gap_of_one_channel(stack, dynamodb)
    alices = [
        fake_discord.history.say(GENERAL, gap_to - 60_000 + i, gw.ALICE, f"alice {i}")
        for i in range(3)
    ]
    # Alice runs /forgetme after the gap, before it is caught up (the erasure the command's
    # deferred work runs, with the deployment's person hash).
    services = build_services(Settings(table_name=TABLE, memory_model="rules"), dynamodb=dynamodb)
    Eraser(services.repository, hash_of=services.opt_outs.hash_of).erase(gw.ALICE)
    ledger = [i for i in scan_all(dynamodb) if i["pk"]["S"] == keys.LEDGER_PK]
    assert [i["sk"]["S"] for i in ledger] == [
        keys.ledger_person_sk(services.opt_outs.hash_of(gw.ALICE))
    ]
    assert gw.ALICE not in json.dumps(ledger)  # a keyed hash, no id
    stack.catch_up()
    held = of_kind(observations(dynamodb, GENERAL), ObservationKind.MESSAGE)
    assert set(bobs) <= set(held)
    assert not set(alices) & set(held)
