"""Catching up on a gap (botmemory.catchup) through CatchUpFunction as template.yaml wires
it: the relay's store records an unresumable session's 30-minute gap with its guilds, the
schedule plans it, and the queue's tasks read the fake Discord's history (which enforces its
per-channel buckets) into the ingest path. Every message of the gap is stored once, a
message deleted in the gap is deleted, one edited in the gap has its current text, a
channel the bot can no longer read is skipped and counted, and no request is refused with
a 429: the next page waits for the wait the headers announced.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from botocore.client import BaseClient

from botmemory.catchup.tasks import register_local_catchup_queue
from botmemory.consolidation.work import local_event
from botmemory.records import ObservationKind
from botmemory.storage import keys
from botmemory.storage.catchup import CatchUpStore
from localrun import gateway as gw
from relay.store import Store
from tests.conftest import TABLE
from tests.support.deployment import guild_create
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest
from tests.support.lambda_local import LocalLambda, sample_env
from tests.support.sam_tools import translated_template

GENERAL = "200000000000000101"
QUIET = "200000000000000102"
LOCKED = "200000000000000103"
MINUTE_MS = 60_000
CATCH_UP = "CatchUpFunction"
QUEUE = "CatchUpQueue"  # CATCHUP_QUEUE_URL as the template resolves locally


class Stack:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, discord: FakeDiscordRest) -> None:
        env = sample_env()
        env[CATCH_UP] = {
            **env.get(CATCH_UP, {}),
            "DISCORD_API_BASE": discord.url,
            "DISCORD_BOT_TOKEN": BOT_TOKEN,
            "DISCORD_BOT_TOKEN_SECRET": "",
        }
        self.local = LocalLambda(monkeypatch, env)
        self.discord = discord
        # Every AWS call CatchUpFunction makes: (action, partition key or None).
        self.calls: list[tuple[str, str | None]] = []
        self._running = False
        make_api_call = BaseClient._make_api_call
        stack = self

        def recording(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
            if stack._running:
                model = client.meta.service_model
                key = params.get("Key") or {}
                pk = key.get("pk", {}).get("S") or params.get("Item", {}).get("pk", {}).get("S")
                values = params.get("ExpressionAttributeValues", {})
                pk = pk or values.get(":pk", {}).get("S")
                stack.calls.append((f"{model.signing_name}:{operation}", pk))
            return make_api_call(client, operation, params)

        monkeypatch.setattr(BaseClient, "_make_api_call", recording)
        self.queued: list[tuple[str, int]] = []
        self.waited: list[int] = []
        # The fake Discord's bucket clock: a delayed message moves it, nothing sleeps.
        self.seconds = 0.0
        register_local_catchup_queue(QUEUE, lambda body, delay: self.queued.append((body, delay)))

    def live(self, channel: str, *message_ids: str) -> None:
        """Messages the relay received as they were said."""
        history = self.discord.history.channels[channel]
        events = [
            {"t": "MESSAGE_CREATE", "d": {**history[m], "guild_id": gw.GUILD}} for m in message_ids
        ]
        self.local.invoke("IngestFunction", {"events": events})

    def catch_up(self) -> None:
        """The schedule, then every task the queue holds, each after its delay (SQS's)."""
        self._running = True
        try:
            self._catch_up()
        finally:
            self._running = False

    def _catch_up(self) -> None:
        self.local.invoke(CATCH_UP, {"source": "aws.events", "detail-type": "Scheduled Event"})
        sequence = 0
        while self.queued:
            body, delay = self.queued.pop(0)
            if delay:
                self.waited.append(delay)
                self.seconds += delay
            sequence += 1
            answer = self.local.invoke(CATCH_UP, local_event(body, "catchup", sequence))
            assert answer == {"batchItemFailures": []}


def granted(function: str) -> set[str]:
    """The actions the function's role allows, in the translated template."""
    template = translated_template()
    role = template["Resources"][function]["Properties"]["Role"]["Fn::GetAtt"][0]
    actions: set[str] = set()
    for policy in template["Resources"][role]["Properties"].get("Policies", []):
        for statement in policy["PolicyDocument"]["Statement"]:
            listed = statement["Action"]
            actions |= {listed} if isinstance(listed, str) else set(listed)
    return actions


def observations(dynamodb: Any, channel: str) -> list[dict[str, Any]]:
    answer = dynamodb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :obs)",
        ExpressionAttributeValues={
            ":pk": {"S": keys.channel_pk(channel)},
            ":obs": {"S": keys.OBS_PREFIX},
        },
    )
    items: list[dict[str, Any]] = answer["Items"]
    return items


def of_kind(items: list[dict[str, Any]], kind: ObservationKind) -> dict[str, list[str]]:
    """Message id -> the contents of its observations of this kind."""
    found: dict[str, list[str]] = {}
    for item in items:
        parts = keys.observation_parts(item["sk"]["S"])
        if parts and parts[1] == kind.value:
            found.setdefault(parts[2][0], []).append(item.get("content", {}).get("S", ""))
    return found


def test_a_thirty_minute_gap_is_read_back_once_with_its_edits_and_deletes(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    history = fake_discord.history
    stack.local.invoke("IngestFunction", {"events": [guild_create([GENERAL, QUIET, LOCKED], [])]})
    now = int(time.time() * 1000)
    gap_from, gap_to = now - 40 * MINUTE_MS, now - 10 * MINUTE_MS

    # The day before the gap, received live: one message is deleted in the gap, one edited.
    before = [
        history.say(GENERAL, now - 5 * 60 * MINUTE_MS + i * MINUTE_MS, gw.ALICE, f"earlier {i}")
        for i in range(5)
    ]
    stack.live(GENERAL, *before)
    locked = history.say(LOCKED, now - 3 * 60 * MINUTE_MS, gw.BOB, "in a room the bot leaves")
    stack.live(LOCKED, locked)
    # The gap: 250 messages (three pages), one of them edited since, one said and deleted.
    said = [
        history.say(GENERAL, gap_from + 1_000 + i * 6_000, gw.BOB, f"in the gap {i}")
        for i in range(250)
    ]
    history.edit(GENERAL, said[7], "in the gap 7, corrected", gap_from + 20 * MINUTE_MS)
    fleeting = history.say(GENERAL, gap_from + 2 * MINUTE_MS + 500, gw.ALICE, "oops, wrong room")
    history.delete(GENERAL, fleeting)
    history.delete(GENERAL, before[1])
    history.edit(GENERAL, before[3], "earlier 3, edited in the gap", gap_from + 5 * MINUTE_MS)
    # After the new READY: received live again.
    after = history.say(GENERAL, now - 5 * MINUTE_MS, gw.ALICE, "back online")
    stack.live(GENERAL, after)
    # The quiet channel was not active in the day before the gap: not read.
    history.say(QUIET, gap_from + MINUTE_MS, gw.BOB, "nobody here")
    history.lose_access(LOCKED)

    Store(dynamodb, TABLE).record_gap(0, 1, gap_from, gap_to, (gw.GUILD,))
    fake_discord.enforce_buckets(limit=2, window=30.0, clock=lambda: stack.seconds)
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
    assert stack.waited == [30]
    reads = fake_discord.requests_matching("GET", f"/channels/{GENERAL}/messages")
    assert len(reads) == 3

    # Every call it made is one its role allows, on the partitions the role names.
    made = {action for action, _ in stack.calls}
    assert {"dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"} <= made
    assert made <= granted(CATCH_UP), made - granted(CATCH_UP)
    for action, pk in stack.calls:
        if action.startswith("dynamodb:"):
            assert pk is not None and (
                pk in (keys.RELAY_PK, keys.OPT_OUT_PK, keys.PAUSE_PK)
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
    stack.live(channel, history.say(channel, now - 3 * 60 * MINUTE_MS, gw.ALICE, "before"))
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
