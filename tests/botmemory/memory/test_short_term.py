"""Short-term cross-channel memory: what people did lately in the server's other public
channels, written at consolidation, never from a private channel, expiring after hours,
capped per person, shown by recall as the table holds the messages now."""

from __future__ import annotations

from typing import Any

from botmemory.clock import HOUR_MS, ManualClock
from botmemory.people.erasure import Eraser
from botmemory.recall.block import ELSEWHERE_HEADING
from botmemory.recall.contract import RecallResult, parse_request
from botmemory.records import ShortTermEntry
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.items import from_item, short_term_entries_of
from localrun import gateway as gw
from tests.conftest import CountingModel, RequestCounter, scan_all

T0 = 1_767_225_600_000
DEV = "200000000000000101"
GENERAL = "200000000000000102"
STAFF_ROOM = "200000000000000103"
UNSEEN = "200000000000000104"


def build(dynamodb: Any, clock: ManualClock, **overrides: Any) -> MemoryServices:
    settings = Settings(
        table_name="MemoryTable",
        memory_model="rules",
        consolidate_every=2,
        bot_user_id=gw.BOT,
        **overrides,
    )
    services = build_services(settings, dynamodb=dynamodb, clock=clock, model=CountingModel())
    for channel, public in ((DEV, True), (GENERAL, True), (STAFF_ROOM, False)):
        services.repository.put_channel_visibility(gw.GUILD, channel, public)
    return services


def talk(
    services: MemoryServices,
    channel: str,
    lines: list[tuple[str, str]],
    at_ms: int,
    guild: str | None = gw.GUILD,
) -> list[dict[str, Any]]:
    events = [
        gw.message(author, text, at_ms + i * 1000, channel=channel, guild=guild)
        for i, (author, text) in enumerate(lines)
    ]
    services.recorder.record(events)
    services.consolidator.consolidate(channel, force=True)
    return events


def recall(services: MemoryServices, channel: str, *people: str) -> RecallResult:
    request = {
        "guild_id": gw.GUILD,
        "channel_id": channel,
        "user_id": people[0],
        "participants": list(people),
    }
    return services.recaller.recall(parse_request(request))


def entries(dynamodb: Any) -> list[ShortTermEntry]:
    """Every short-term entry stored, whoever's (one item per person, one attribute each)."""
    return [
        entry
        for item in scan_all(dynamodb)
        if item["sk"]["S"] == keys.SHORT_TERM_SK
        for entry in short_term_entries_of(from_item(item))
    ]


DEV_TALK = [
    (gw.ALICE, "The login bug is in the token refresh, I'm rewriting auth.py"),
    (gw.BOB, "ok, ping me when the tests pass"),
]


def test_switching_channels_keeps_the_thread(dynamodb: Any, clock: ManualClock) -> None:
    services = build(dynamodb, clock)
    clock.set(T0 + 10_000)
    talk(services, DEV, DEV_TALK, T0)
    clock.advance(seconds=60)

    in_general = recall(services, GENERAL, gw.ALICE)
    in_dev = recall(services, DEV, gw.ALICE)

    section = next(s for s in in_general.memory.split("\n\n") if s.startswith(ELSEWHERE_HEADING))
    assert "token refresh" in section and f"<#{DEV}>" in section and '"Alice"' in section
    assert [(e.user_id, e.channel_id) for e in in_general.elsewhere] == [(gw.ALICE, DEV)]
    # The rules model's line: what she talked about, and her last words there.
    assert in_general.elsewhere[0].summary == ("talked about refresh and bug: " + DEV_TALK[0][1])
    # Bob is not in the conversation in #general: his entry is not shown there.
    assert "tests pass" not in in_general.memory
    # In #dev itself, the entry adds nothing: not shown.
    assert in_dev.elsewhere == [] and ELSEWHERE_HEADING not in in_dev.memory


def test_private_unknown_and_direct_channels_never_cross(dynamodb: Any, clock: ManualClock) -> None:
    services = build(dynamodb, clock)
    clock.set(T0 + 10_000)
    talk(services, STAFF_ROOM, [(gw.ALICE, "the raise for Bob is approved, keep it quiet")], T0)
    talk(services, UNSEEN, [(gw.ALICE, "my secret project codename is heron")], T0)
    talk(services, "200000000000000199", [(gw.ALICE, "dm words stay in the dm")], T0, guild=None)

    result = recall(services, GENERAL, gw.ALICE)

    assert entries(dynamodb) == []
    assert result.elsewhere == [] and ELSEWHERE_HEADING not in result.memory


def test_entries_expire_after_the_short_term_hours(dynamodb: Any, clock: ManualClock) -> None:
    services = build(dynamodb, clock, short_term_hours=2)
    clock.set(T0 + 10_000)
    talk(services, DEV, DEV_TALK, T0)

    clock.advance(ms=2 * HOUR_MS - 60_000)
    before = recall(services, GENERAL, gw.ALICE)
    clock.advance(ms=120_000)
    after = recall(services, GENERAL, gw.ALICE)

    assert len(before.elsewhere) == 1
    # The item is still stored (TTL deletes lazily; moto never does) but no longer shown.
    assert len(entries(dynamodb)) == 2 and after.elsewhere == []
    (alice,) = [e for e in entries(dynamodb) if e.user_id == gw.ALICE]
    assert alice.expires_at == (T0 + 10_000 + 2 * HOUR_MS) // 1000


def test_a_person_keeps_their_newest_entries_up_to_the_cap(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = build(dynamodb, clock, short_term_per_person=3)
    channels = [f"2000000000000002{n:02d}" for n in range(5)]
    for n, channel in enumerate(channels):
        services.repository.put_channel_visibility(gw.GUILD, channel, True)
        clock.set(T0 + n * 60_000 + 10_000)
        talk(
            services,
            channel,
            [(gw.ALICE, f"working on part {n} of the migration")],
            T0 + n * 60_000,
        )

    kept = services.repository.short_term_of(gw.GUILD, [gw.ALICE])[gw.ALICE]

    assert [e.channel_id for e in kept] == channels[:1:-1]  # the newest three, newest first
    assert len(entries(dynamodb)) == 3


def test_a_message_deleted_since_is_not_shown(dynamodb: Any, clock: ManualClock) -> None:
    services = build(dynamodb, clock)
    clock.set(T0 + 10_000)
    events = talk(services, DEV, DEV_TALK, T0)

    services.recorder.record([gw.delete(events[0])])
    result = recall(services, GENERAL, gw.ALICE)

    assert result.elsewhere == [] and "token refresh" not in result.memory


def test_an_opted_out_or_erased_person_has_no_entries(dynamodb: Any, clock: ManualClock) -> None:
    services = build(dynamodb, clock)
    clock.set(T0 + 10_000)
    talk(services, DEV, DEV_TALK, T0)
    assert {e.user_id for e in entries(dynamodb)} == {gw.ALICE, gw.BOB}

    Eraser(services.repository, services.clock, services.opt_outs.hash_of).erase(
        gw.ALICE, ["Alice"]
    )

    assert {e.user_id for e in entries(dynamodb)} == {gw.BOB}
    assert recall(services, GENERAL, gw.ALICE).elsewhere == []


def test_the_section_keeps_its_budget_and_reads_in_bounded_requests(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = build(dynamodb, clock, recall_short_term_chars=400)
    channels = [f"2000000000000003{n:02d}" for n in range(8)]
    for n, channel in enumerate(channels):
        services.repository.put_channel_visibility(gw.GUILD, channel, True)
        clock.set(T0 + n * 60_000 + 10_000)
        talk(
            services,
            channel,
            [(gw.ALICE, f"update {n}: " + "details " * 30), (gw.BOB, f"noted {n} " + "y" * 100)],
            T0 + n * 60_000,
        )
    counter = RequestCounter(dynamodb)

    result = recall(services, GENERAL, gw.ALICE, gw.BOB)

    section = next(s for s in result.memory.split("\n\n") if s.startswith(ELSEWHERE_HEADING))
    assert 0 < len(section) <= 400
    assert result.elsewhere[0].time_ms >= result.elsewhere[-1].time_ms  # newest first
    # One read of both people's entries, one of every message they point at, one of their
    # profiles (their names).
    assert counter.count("BatchGetItem") == 3
    # Pins x2, episodes, Alice's and Bob's facts, the server's public channels, its controls
    # (its retention, read once a minute).
    assert counter.count("Query") == 2 + 1 + 2 + 1 + 1


def test_another_servers_entries_are_never_shown(dynamodb: Any, clock: ManualClock) -> None:
    services = build(dynamodb, clock)
    services.repository.put_channel_visibility(gw.OTHER_GUILD, "200000000000000401", True)
    clock.set(T0 + 10_000)
    talk(
        services,
        "200000000000000401",
        [(gw.ALICE, "in the other server I moderate the art channel")],
        T0,
        guild=gw.OTHER_GUILD,
    )

    result = recall(services, GENERAL, gw.ALICE)

    assert len(entries(dynamodb)) == 1 and result.elsewhere == []
