"""CatchUpFunction as template.yaml wires it, on the test's in-process AWS and the fake
Discord's history (tests/support/fake_history.py): what tests/botmemory/catchup and
`make bench` (table 10c) run. `Stack.catch_up` runs the schedule, then every task its queue
holds, each after its delay; a delay moves the fake Discord's bucket clock
(`bucket_clock`: real time plus the delays), so nothing sleeps. `thirty_minute_gap` writes the scenario of issue 52's test: a channel
active the day before an unresumable 30-minute gap, messages said in it (one edited since,
one said and deleted), an older message deleted in it and one edited in it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.client import BaseClient

from botmemory.catchup.tasks import register_local_catchup_queue
from botmemory.consolidation.work import local_event
from botmemory.discord.interactions import InteractionResponseType, InteractionType, OptionType
from botmemory.records import ObservationKind
from botmemory.storage import keys
from localrun import gateway as gw
from relay.store import Store
from tests.invariants.test_09_bad_input import signed_at
from tests.support.deployment import guild_create
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest
from tests.support.lambda_local import TABLE, LocalLambda, sample_env
from tests.support.sam_tools import translated_template

GENERAL = "200000000000000101"
QUIET = "200000000000000102"
LOCKED = "200000000000000103"
MINUTE_MS = 60_000
STAFF_MEMBER = "300000000000000009"  # has Manage Server
CATCH_UP = "CatchUpFunction"
QUEUE = "CatchUpQueue"  # CATCHUP_QUEUE_URL as the template resolves locally


class Stack:
    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        discord: FakeDiscordRest,
        environment: dict[str, dict[str, str]] | None = None,
    ) -> None:
        env = sample_env()
        for function, variables in (environment or {}).items():
            env.setdefault(function, {}).update(variables)
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
                action = f"{client.meta.service_model.signing_name}:{operation}"
                for pk in _partitions(params):
                    stack.calls.append((action, pk))
            return make_api_call(client, operation, params)

        monkeypatch.setattr(BaseClient, "_make_api_call", recording)
        self._interactions = 0
        self.queued: list[tuple[str, int]] = []
        self.waited: list[int] = []
        # The fake Discord's bucket clock (`bucket_clock`): real time, plus every delay the
        # queue gave a message (SQS's delay, which nothing here sleeps).
        self.seconds = 0.0
        self._started = time.monotonic()
        register_local_catchup_queue(QUEUE, lambda body, delay: self.queued.append((body, delay)))

    def bucket_clock(self) -> float:
        return time.monotonic() - self._started + self.seconds

    def staff(
        self, sub: str, options: dict[str, Any] | None = None, *, permissions: str = "32"
    ) -> str:
        """`/memory-staff backfill <sub>` from a member with Manage Server (`permissions`),
        signed as Discord signs it, through InteractionsFunction; the ephemeral reply's text."""
        given = [
            {
                "name": name,
                "type": OptionType.CHANNEL if name == "channel" else OptionType.INTEGER,
                "value": value,
            }
            for name, value in (options or {}).items()
        ]
        self._interactions += 1
        interaction_id = str(1_650_000_000_000_000_000 + self._interactions)
        interaction = {
            "id": interaction_id,
            "application_id": gw.BOT,
            "token": f"token-{interaction_id}",
            "version": 1,
            "guild_id": gw.GUILD,
            "channel_id": GENERAL,
            "member": {"user": gw.user(STAFF_MEMBER), "roles": [], "permissions": permissions},
            "type": InteractionType.APPLICATION_COMMAND,
            "data": {
                "id": "1400000000000000001",
                "name": "memory-staff",
                "type": 1,
                "options": [
                    {
                        "name": "backfill",
                        "type": OptionType.SUB_COMMAND_GROUP,
                        "options": [
                            {"name": sub, "type": OptionType.SUB_COMMAND, "options": given}
                        ],
                    }
                ],
            },
        }
        body = json.dumps(interaction, separators=(",", ":"))
        event = signed_at(body, str(int(time.time())), f"r{interaction_id}")
        response = self.local.invoke("InteractionsFunction", event)
        assert response["statusCode"] == 200, response
        answer = json.loads(response["body"])
        assert answer["type"] == InteractionResponseType.CHANNEL_MESSAGE_WITH_SOURCE, answer
        return str(answer["data"]["content"])

    def live(self, channel: str, *message_ids: str) -> None:
        """Messages the relay received as they were said."""
        history = self.discord.history.channels[channel]
        events = [
            {"t": "MESSAGE_CREATE", "d": {**history[m], "guild_id": gw.GUILD}} for m in message_ids
        ]
        self.local.invoke("IngestFunction", {"events": events})

    def catch_up(self) -> None:
        """The schedule, then every task the queue holds, each after its delay (SQS's)."""
        with self.recording():
            self._catch_up()

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Every AWS call made meanwhile goes to `calls`."""
        self._running = True
        try:
            yield
        finally:
            self._running = False

    def _catch_up(self, limit: int | None = None) -> None:
        self.local.invoke(CATCH_UP, {"source": "aws.events", "detail-type": "Scheduled Event"})
        self.drain(limit)

    def drain(
        self, limit: int | None = None, meanwhile: Callable[[int], None] | None = None
    ) -> None:
        """Deliver the queue's tasks (at most `limit` of them), each after its delay;
        `meanwhile` is given each delay (seconds, 0 too) first: what else runs until then."""
        sequence = 0
        while self.queued and (limit is None or sequence < limit):
            body, delay = self.queued.pop(0)
            if meanwhile is not None:
                meanwhile(delay)
            if delay:
                self.waited.append(delay)
                self.seconds += delay
            sequence += 1
            answer = self.local.invoke(CATCH_UP, local_event(body, "catchup", sequence))
            assert answer == {"batchItemFailures": []}


def _partitions(params: dict[str, Any]) -> list[str | None]:
    """The partition keys a call names (one None when it names none)."""
    keys_: list[dict[str, Any]] = []
    for request in params.get("RequestItems", {}).values():
        keys_ += request.get("Keys", []) if isinstance(request, dict) else []
    keys_ += [params[k] for k in ("Key", "Item") if k in params]
    found: list[str | None] = [k["pk"]["S"] for k in keys_ if "pk" in k]
    pk = params.get("ExpressionAttributeValues", {}).get(":pk", {}).get("S")
    if pk is not None:
        found.append(pk)
    return found or [None]


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


@dataclass(frozen=True)
class Gap:
    said: list[str]  # the messages said in the gap (one of them edited since)
    before: list[str]  # said the day before, received live (before[1] deleted in the gap)
    fleeting: str  # said and deleted within the gap
    gap_from: int
    gap_to: int


def thirty_minute_gap(stack: Stack, dynamodb: Any, said_in_gap: int = 250) -> Gap:
    """The scenario, with the gap recorded as the relay records it."""
    history = stack.discord.history
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
    # The gap: its messages, one of them edited since, one said and deleted.
    step = (gap_to - gap_from - 2 * MINUTE_MS) // said_in_gap
    said = [
        history.say(GENERAL, gap_from + 1_000 + i * step, gw.BOB, f"in the gap {i}")
        for i in range(said_in_gap)
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
    return Gap(said, before, fleeting, gap_from, gap_to)
