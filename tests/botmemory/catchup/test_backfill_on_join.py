"""The bot added to a server imports its past when chosen (botmemory.catchup.on_join): off
by default; the deployment's MEMORY_BACKFILL_ON_JOIN_DAYS, or a server's own
`/memory-staff backfill on-join`. The relay's GUILD_CREATE goes through IngestFunction's
handler, staff's commands through InteractionsFunction (signed), and CatchUpFunction reads
the history from the fake Discord. A join is told from a reconnect's replay by `joined_at`.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from botmemory.catchup import on_join
from botmemory.catchup.tasks import register_local_catchup_queue
from botmemory.clock import DAY_MS
from botmemory.records import ObservationKind
from botmemory.runtime import build_services
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.catchup import CatchUpStore
from localrun import gateway as gw
from tests.botmemory.search.test_search_on_the_handlers import metrics_emitted
from tests.conftest import TABLE
from tests.stack.test_iam import function_statements, listed
from tests.support.catch_up import QUEUE, Stack, observations, of_kind
from tests.support.deployment import guild_create
from tests.support.fake_discord import FakeDiscordRest
from tests.support.sam_tools import translated_template

CHANNELS = [f"20000000000000030{i}" for i in range(1, 4)]
PRIVATE = CHANNELS[2]
INGEST = "IngestFunction"
ON = {INGEST: {"MEMORY_BACKFILL_ON_JOIN_DAYS": "7"}}
MISSING = object()
ON_JOIN_CHOICES = "Only members with the Manage Server permission"


def now_ms() -> int:
    return int(time.time() * 1000)


def history(stack: Stack) -> dict[str, set[str]]:
    """Each channel's past: a message a day over the last ten days (ids by channel)."""
    now = now_ms()
    said: dict[str, set[str]] = {}
    for c, channel in enumerate(CHANNELS):
        said[channel] = {
            stack.discord.history.say(
                channel, now - day * DAY_MS - 60_000 - c, gw.ALICE, f"{channel[-1]}: day {day}"
            )
            for day in range(10)
        }
    return said


def within(said: dict[str, set[str]], days: int) -> dict[str, set[str]]:
    since = now_ms() - days * DAY_MS
    return {
        channel: {m for m in ids if (int(m) >> 22) + 1_420_070_400_000 >= since}
        for channel, ids in said.items()
    }


def guild_created(stack: Stack, joined_at: Any = None, **fields: Any) -> dict[str, Any]:
    """The relay's GUILD_CREATE (trimmed: `joined_at` forwarded), through IngestFunction."""
    event = guild_create(CHANNELS[:2], [PRIVATE])
    if joined_at is not None:
        event["d"]["joined_at"] = gw.iso(joined_at) if isinstance(joined_at, int) else joined_at
    event["d"].update(fields)
    answer: dict[str, Any] = stack.local.invoke(INGEST, {"events": [event]})
    return answer


def held(dynamodb: Any) -> dict[str, set[str]]:
    return {
        channel: set(of_kind(observations(dynamodb, channel), ObservationKind.MESSAGE))
        for channel in CHANNELS
    }


def test_the_bot_joining_with_the_deployments_default_on_imports_that_many_days(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    fake_discord: FakeDiscordRest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack = Stack(monkeypatch, fake_discord, environment=ON)
    said = history(stack)

    with stack.recording():
        answer = guild_created(stack, joined_at=now_ms() - 2_000)
    assert answer["rejected"] == [] and answer["ignored"] == []
    # Within IngestFunction's role: the table's rights it had, GetItem of SERVERS (when the
    # bot joined) besides guild partitions; the tasks go to the in-process queue here (the
    # role's sqs:SendMessage on CatchUpQueue: tests/stack/test_iam.py).
    statements = function_statements(translated_template(), INGEST)
    assert {action for action, _ in stack.calls} <= {
        a for s in statements for a in listed(s["Action"])
    }
    read = {pk for action, pk in stack.calls if action == "dynamodb:GetItem"}
    assert keys.SERVERS_PK in read and read <= {keys.SERVERS_PK, keys.guild_pk(gw.GUILD)}
    assert any(
        listed(s["Action"]) == ["dynamodb:GetItem"]
        and s["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"] == ["SERVERS"]
        for s in statements
        if "Condition" in s and "ForAllValues:StringEquals" in s["Condition"]
    )
    assert metrics_emitted(capsys.readouterr().out).get("BackfillsStartedOnJoin") == 1
    assert len(stack.queued) == len(CHANNELS)  # every channel it knows, the private one too
    run = CatchUpStore(dynamodb, TABLE).backfill_run(gw.GUILD)
    assert run is not None and run.days == 7 and run.started_by == "on join"
    assert "started when the bot joined" in stack.staff("status")
    stack.drain()

    assert held(dynamodb) == within(said, 7)
    assert all(within(said, 7).values()) and within(said, 7) != said
    status = stack.staff("status")
    assert "done" in status and "Channels: 3 of 3 read" in status
    assert "started when the bot joined" in status
    # Read, never answered.
    assert fake_discord.requests_matching("POST") == []


def test_a_reconnects_guild_create_starts_nothing(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    fake_discord: FakeDiscordRest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack = Stack(monkeypatch, fake_discord, environment=ON)
    history(stack)
    joined = now_ms() - 2_000
    guild_created(stack, joined_at=joined)
    stack.drain()
    first = CatchUpStore(dynamodb, TABLE).backfill_run(gw.GUILD)
    assert first is not None and first.status == "done"

    capsys.readouterr()
    # Every connection replays it; a redelivered batch is the same event again.
    for _ in range(2):
        assert guild_created(stack, joined_at=joined)["ignored"] == []
    assert stack.queued == []
    assert "BackfillsStartedOnJoin" not in metrics_emitted(capsys.readouterr().out)
    assert CatchUpStore(dynamodb, TABLE).backfill_run(gw.GUILD) == first


def test_an_upgrade_never_backfills_a_server_the_bot_was_already_in(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord, environment=ON)
    history(stack)
    memory = build_services(Settings(table_name=TABLE, memory_model="rules"), dynamodb=dynamodb)
    # Known before `joined_at` was recorded; the bot joined it months ago.
    memory.repository.know_server(gw.GUILD, now_ms() - DAY_MS)
    joined = now_ms() - 200 * DAY_MS
    guild_created(stack, joined_at=joined)
    assert stack.queued == []
    assert CatchUpStore(dynamodb, TABLE).backfill_run(gw.GUILD) is None
    # Recorded now: the next connection's replay compares with it.
    assert memory.repository.server_joined_at(gw.GUILD) == joined


def test_a_server_never_known_joined_long_ago_is_not_backfilled(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord, environment=ON)
    history(stack)
    guild_created(stack, joined_at=now_ms() - on_join.JOIN_RECENT_MS - 60_000)
    assert stack.queued == []


def test_with_the_setting_off_by_default_a_join_starts_nothing(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    history(stack)
    guild_created(stack, joined_at=now_ms() - 2_000)
    assert stack.queued == []
    status = stack.staff("status")
    assert "No backfill has run" in status
    assert "reads no history (the deployment's default)" in status


def test_a_return_after_removal_follows_the_servers_own_choice(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord)  # the deployment's default: off
    said = history(stack)
    guild_created(stack, joined_at=now_ms() - 30 * DAY_MS)
    answer = stack.staff("on-join", {"days": 5})
    assert answer.startswith("When the bot joins this server again, it imports the last 5 days")
    assert "this server's choice" in stack.staff("status")

    # Removed, then added back within the purge's grace period.
    stack.local.invoke(INGEST, {"events": [{"t": "GUILD_DELETE", "d": {"id": gw.GUILD}}]})
    memory = build_services(Settings(table_name=TABLE, memory_model="rules"), dynamodb=dynamodb)
    assert memory.repository.server_purge_state(gw.GUILD)[0] is not None
    guild_created(stack, joined_at=now_ms() - 1_000)
    assert memory.repository.server_purge_state(gw.GUILD)[0] is None
    assert len(stack.queued) == len(CHANNELS)
    stack.drain()
    assert held(dynamodb) == within(said, 5)
    assert "started when the bot joined" in stack.staff("status")


def test_a_servers_own_zero_overrides_the_deployments_default(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord, environment=ON)
    history(stack)
    guild_created(stack, joined_at=now_ms() - 30 * DAY_MS)
    assert "reads no history (this server's choice)" in stack.staff("on-join", {"days": 0})
    stack.local.invoke(INGEST, {"events": [{"t": "GUILD_DELETE", "d": {"id": gw.GUILD}}]})
    guild_created(stack, joined_at=now_ms() - 1_000)
    assert stack.queued == []


@pytest.mark.parametrize(
    ("options", "permissions", "answer"),
    [
        ({"days": 5}, "0", ON_JOIN_CHOICES),  # no Manage Server
        ({"days": -1}, "32", "Days go from 0 (never) to 30."),
        ({"days": 31}, "32", "Days go from 0 (never) to 30."),
        ({}, "32", "Days go from 0 (never) to 30."),
    ],
)
def test_only_staff_choose_on_join_and_only_within_bounds(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    fake_discord: FakeDiscordRest,
    options: dict[str, Any],
    permissions: str,
    answer: str,
) -> None:
    stack = Stack(monkeypatch, fake_discord)
    guild_created(stack, joined_at=now_ms() - 30 * DAY_MS)
    assert answer in stack.staff("on-join", options, permissions=permissions)
    memory = build_services(Settings(table_name=TABLE, memory_model="rules"), dynamodb=dynamodb)
    assert memory.repository.guild_controls(gw.GUILD).backfill_on_join_days is None


@pytest.mark.parametrize(
    "joined_at",
    [MISSING, None, "not a time", 1_767_225_600, "9999-12-31T00:00:00+00:00", "x" * 100],
)
def test_a_guild_create_without_a_valid_joined_at_is_no_join_and_still_applies(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    fake_discord: FakeDiscordRest,
    capsys: pytest.CaptureFixture[str],
    joined_at: Any,
) -> None:
    stack = Stack(monkeypatch, fake_discord, environment=ON)
    event = guild_create(CHANNELS[:2], [PRIVATE])
    if joined_at is not MISSING:
        event["d"]["joined_at"] = joined_at
    answer = stack.local.invoke(INGEST, {"events": [event]})
    assert answer["rejected"] == []
    # Counted: a malformed one as the event's skip reason; a missing one (a relay from
    # before it forwarded it) by its own metric.
    metrics = metrics_emitted(capsys.readouterr().out)
    if joined_at is MISSING:
        assert answer["ignored"] == [] and metrics["GuildCreatesWithoutJoinedAt"] == 1
    else:
        assert [s["reason"] for s in answer["ignored"]] == [on_join.NO_JOINED_AT]
    assert stack.queued == []
    memory = build_services(Settings(table_name=TABLE, memory_model="rules"), dynamodb=dynamodb)
    # The rest of the event applied: its channels known, the server known.
    assert memory.repository.channels_public(gw.GUILD, CHANNELS) == set(CHANNELS[:2])
    assert gw.GUILD in memory.repository.known_servers()


def test_a_join_whose_tasks_could_not_be_sent_starts_again_when_redelivered(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord, environment=ON)
    history(stack)

    def refused(body: str, delay: int) -> None:
        raise RuntimeError("catch-up queue refused 1 tasks")

    register_local_catchup_queue(QUEUE, refused)
    joined = now_ms() - 2_000
    with pytest.raises(RuntimeError):  # the invoke fails: Lambda retries the batch
        guild_created(stack, joined_at=joined)
    run = CatchUpStore(dynamodb, TABLE).backfill_run(gw.GUILD)
    assert run is not None and run.status == "failed"

    register_local_catchup_queue(QUEUE, lambda body, delay: stack.queued.append((body, delay)))
    guild_created(stack, joined_at=joined)
    assert len(stack.queued) == len(CHANNELS)


def test_an_older_joined_at_never_moves_the_record_back(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord, environment=ON)
    history(stack)
    joined = now_ms() - 2_000
    guild_created(stack, joined_at=joined)
    stack.drain()
    # A late or forged GUILD_CREATE saying an older join, then the next reconnect's replay.
    guild_created(stack, joined_at=joined - 10 * DAY_MS)
    guild_created(stack, joined_at=joined)
    assert stack.queued == []


def test_an_unavailable_guild_is_no_join(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, fake_discord: FakeDiscordRest
) -> None:
    stack = Stack(monkeypatch, fake_discord, environment=ON)
    history(stack)
    guild_created(stack, joined_at=now_ms() - 30 * DAY_MS)  # known, its channels too
    event = {"t": "GUILD_CREATE", "d": {"id": gw.GUILD, "unavailable": True}}
    event["d"]["joined_at"] = gw.iso(now_ms() - 2_000)
    answer = stack.local.invoke(INGEST, {"events": [event]})
    assert [s["reason"] for s in answer["ignored"]] == ["guild unavailable (outage)"]
    assert stack.queued == []
    assert CatchUpStore(dynamodb, TABLE).backfill_run(gw.GUILD) is None
