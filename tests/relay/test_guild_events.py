"""What the relay keeps of the guild, role and thread events, and how a guild too large for
one batch is split so that every part fits Lambda's async payload limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botmemory.services import MemoryServices
from localrun import gateway as gw
from relay.events import GUILD_EVENTS, trimmed
from tests.relay import guild_events as ge
from tests.relay.helpers import Clock, RecordingSink, make_forwarder

# Lambda's async Invoke limit until late 2025, which every body must stay under.
ASYNC_LIMIT = 256 * 1024


def forwarded(tmp_path: Path, *events: dict[str, Any], max_bytes: int = 200_000) -> RecordingSink:
    sink = RecordingSink()
    forwarder = make_forwarder(sink, tmp_path, Clock(), max_bytes=max_bytes)
    for event in events:
        assert forwarder.submit(event["t"], event["d"])
    forwarder.pump(final=True)
    return sink


def test_role_thread_and_guild_update_events_keep_only_what_ingest_reads(tmp_path: Path) -> None:
    events = [
        ge.role_event("GUILD_ROLE_UPDATE", ge.MODS, ge.MANAGE_GUILD),
        ge.role_event("GUILD_ROLE_DELETE", ge.MODS, 0),
        ge.thread_event("THREAD_CREATE", ge.THREAD, ge.GENERAL),
        ge.thread_list_sync(ge.thread(ge.THREAD, ge.GENERAL)),
        ge.guild_update(owner=gw.ALICE),
    ]
    sent = [e["d"] for e in forwarded(tmp_path, *events).events]
    assert sent[0] == {
        "guild_id": gw.GUILD,
        "role": {"id": ge.MODS, "permissions": str(ge.MANAGE_GUILD)},
    }
    assert sent[1] == {"guild_id": gw.GUILD, "role_id": ge.MODS}
    thread = {"id": ge.THREAD, "type": 11, "guild_id": gw.GUILD, "parent_id": ge.GENERAL}
    assert sent[2] == thread
    assert sent[3] == {"guild_id": gw.GUILD, "channel_ids": [ge.GENERAL], "threads": [thread]}
    # @everyone and the staff role; not the helpers' role, no name, no emojis.
    assert sent[4] == {
        "id": gw.GUILD,
        "owner_id": gw.ALICE,
        "roles": [
            {"id": gw.GUILD, "permissions": str(ge.VIEW | ge.SEND)},
            {"id": ge.MODS, "permissions": str(ge.VIEW | ge.MANAGE_GUILD)},
        ],
    }


def test_a_guild_create_keeps_when_the_bot_joined_and_an_update_has_none(tmp_path: Path) -> None:
    # Ingest tells the bot's joining a server from a reconnect's replay by it
    # (botmemory.catchup.on_join).
    sent = [e["d"] for e in forwarded(tmp_path, ge.guild(), ge.guild_update()).events]
    assert sent[0]["joined_at"] == gw.iso(ge.T0)
    assert "joined_at" not in sent[1]
    assert "joined_at" not in trimmed("GUILD_UPDATE", {"id": "1", "joined_at": gw.iso(ge.T0)})


def test_every_guild_event_has_its_own_trimming() -> None:
    noise = {"name": "n", "members": [1], "presences": [1], "topic": "t"}
    for name in GUILD_EVENTS:
        assert not set(trimmed(name, {"id": "1", "guild_id": "2", **noise})) & set(noise), name


def huge_guild() -> dict[str, Any]:
    """A GUILD_CREATE of a 250,000-member server with 500 channels of 40 overwrites each
    and 2,000 active threads: trimmed, still well over one batch."""
    crowd = ge.member(gw.BOB)
    overwrites = [ge.overwrite(str(600000000000000000 + i), allow=ge.VIEW) for i in range(40)]
    channels = [
        ge.channel(str(210000000000000000 + i), ge.overwrite(gw.GUILD, deny=ge.VIEW), *overwrites)
        if i % 2
        else ge.channel(str(210000000000000000 + i), *overwrites)
        for i in range(500)
    ]
    threads = [
        ge.thread(str(220000000000000000 + i), str(210000000000000000 + i % 500))
        for i in range(2_000)
    ]
    event = ge.guild(channels=channels, threads=threads, members=[crowd] * 250_000)
    event["d"]["member_count"] = 250_000
    event["d"]["large"] = True
    return event


def test_a_250000_member_guild_is_sent_without_members_split_under_the_async_limit(
    tmp_path: Path, services: MemoryServices
) -> None:
    event = huge_guild()
    sink = forwarded(tmp_path, event)

    assert len(sink.bodies) > 1  # split: one body could not hold it
    assert all(len(body) < ASYNC_LIMIT for body in sink.bodies)
    assert all(len(body) <= 200_000 for body in sink.bodies)  # RELAY_BATCH_MAX_BYTES
    parts = [e["d"] for e in sink.events]
    assert {e["t"] for e in sink.events} == {"GUILD_CREATE"}
    assert not any("members" in part or "presences" in part for part in parts)
    # Every part carries the guild, its owner and its roles; the lists are shared out whole.
    assert all(part["id"] == gw.GUILD and part["owner_id"] == gw.CAROL for part in parts)
    assert all(part["joined_at"] == event["d"]["joined_at"] for part in parts)
    assert all(len(part["roles"]) == 2 for part in parts)
    channel_ids = [c["id"] for part in parts for c in part.get("channels", [])]
    thread_ids = [t["id"] for part in parts for t in part.get("threads", [])]
    assert channel_ids == [c["id"] for c in event["d"]["channels"]]
    assert thread_ids == [t["id"] for t in event["d"]["threads"]]

    # Ingest takes every part as a GUILD_CREATE of its own: every channel and thread is known.
    result = services.recorder.record(sink.events)
    assert result.rejected == [] and result.channels == len(parts) + 500 + 2_000
    public = services.repository.channels_public(gw.GUILD, channel_ids + thread_ids[:100])
    assert public == {c for i, c in enumerate(channel_ids) if i % 2 == 0} | {
        t for i, t in enumerate(thread_ids[:100]) if i % 2 == 0
    }


def test_a_split_guild_counts_each_part_as_an_event_in(tmp_path: Path) -> None:
    sink = RecordingSink()
    forwarder = make_forwarder(sink, tmp_path, Clock(), max_bytes=200_000)
    assert forwarder.submit("GUILD_CREATE", huge_guild()["d"])
    forwarder.pump(final=True)
    stats = forwarder.stats
    assert stats.received == stats.forwarded == len(sink.events) > 1
    assert stats.dropped == 0


def test_a_message_event_is_never_split_or_trimmed(tmp_path: Path) -> None:
    event = gw.message(gw.ALICE, "x" * 3_000, 1_767_225_600_000)
    event["d"]["channels"] = [{"id": str(i)} for i in range(3_000)]  # not a guild's list
    sink = forwarded(tmp_path, event, max_bytes=900_000)
    assert sink.events == [event]
    assert json.loads(sink.bodies[0])["events"][0]["d"]["channels"][0] == {"id": "0"}
