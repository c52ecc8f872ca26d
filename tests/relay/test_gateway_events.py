"""Every event type the relay documents goes through discord.py against the fake gateway on
127.0.0.1, the frame path the relay runs, and what arrives is what ingest needs."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from botmemory.ingest.channels import GUILD_EVENTS as INGESTED_GUILD_EVENTS
from botmemory.services import MemoryServices
from localrun import gateway as gw
from relay.events import FORWARDED_EVENTS, GUILD_EVENTS
from tests.relay import guild_events as ge
from tests.relay.fake_discord import FakeGateway
from tests.relay.test_gateway import Session, run_against_fake, until

README = Path(__file__).resolve().parents[2] / "relay" / "README.md"


def documented_types() -> set[str]:
    """The dispatch types relay/README.md's "What it forwards" names before it says what is
    ignored."""
    text = README.read_text()
    section = text[text.index("## What it forwards") : text.index("Every frame is parsed")]
    names = re.findall(r"`([A-Z]+(?:_[A-Z]+)+|READY)`", section)
    return {name for name in names if not name.startswith("RELAY_")}  # settings, not events


def noise() -> list[dict[str, Any]]:
    """Dispatches the relay does not forward, one of them holding the text `MESSAGE_`."""
    return [
        {
            "t": "TYPING_START",
            "d": {"channel_id": ge.GENERAL, "user_id": gw.ALICE, "timestamp": 1_767_225_600},
        },
        {
            "t": "GUILD_EMOJIS_UPDATE",
            "d": {"guild_id": gw.GUILD, "emojis": [{"id": "1", "name": "MESSAGE_CREATE"}]},
        },
    ]


def through_the_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[dict[str, Any]]
) -> tuple[FakeGateway, Session]:
    fake = FakeGateway(script="events", events=events)
    session = Session(tmp_path, fake)

    async def scenario() -> int:
        task = asyncio.create_task(session.runner().run(session.stop))
        await asyncio.wait_for(fake.done.wait(), 10)

        def all_counted() -> bool:
            stats = session.forwarder.stats
            return stats.received + stats.ignored == len(fake.dispatched)

        await until(all_counted)
        session.stop.set()
        return await task

    assert run_against_fake(monkeypatch, fake, scenario) == 0
    session.forwarder.pump(final=True)
    return fake, session


def test_the_readme_lists_exactly_the_types_the_relay_forwards() -> None:
    assert documented_types() == FORWARDED_EVENTS
    assert len(FORWARDED_EVENTS) == 23
    # Every guild event forwarded is one IngestFunction keeps something of, and no other.
    assert GUILD_EVENTS == INGESTED_GUILD_EVENTS


def test_every_documented_type_goes_through_the_gateway_and_every_dispatch_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, services: MemoryServices
) -> None:
    documented = ge.every_documented_event()
    # A channel whose topic names a message event is still a channel event.
    documented[6]["d"]["topic"] = 'say "MESSAGE_CREATE" here'
    # The session's own READY (the fake gateway sends it first) is the one more type.
    assert {e["t"] for e in documented} | {"READY"} == documented_types()
    fake, session = through_the_gateway(tmp_path, monkeypatch, noise() + documented)

    # Every documented type arrived, in gateway order, on the one session (discord.py's own
    # parsing of these payloads did not break the connection).
    assert [e["t"] for e in session.sink.events] == ["READY"] + [e["t"] for e in documented]
    assert session.sink.events[0]["d"] == {"guilds": []}  # its guilds' ids alone
    assert fake.connections == ["/#1"]
    # Every dispatch is counted once: forwarded, or ignored by its name.
    stats = session.forwarder.stats
    assert stats.received == len(documented) + 1 == stats.forwarded
    assert stats.ignored == len(fake.dispatched) - len(documented) - 1
    assert session.forwarder.ignored_types == {
        "TYPING_START": 1,
        "GUILD_EMOJIS_UPDATE": 1,
    }
    # Message events raw; guild events trimmed: no members, names or topics.
    messages = [e for e in documented if e["t"].startswith("MESSAGE_")]
    assert session.sink.events[-len(messages) :] == messages
    sent = {e["t"]: e["d"] for e in session.sink.events}
    assert sent["GUILD_MEMBER_REMOVE"] == {"guild_id": gw.GUILD, "user": {"id": gw.CAROL}}
    assert "members" not in sent["GUILD_CREATE"] and "members" not in sent["THREAD_LIST_SYNC"]
    assert "topic" not in sent["CHANNEL_UPDATE"] and "name" not in sent["THREAD_CREATE"]

    # What arrived is what ingest needs: every event taken, none refused.
    result = services.recorder.record(session.sink.events)
    # A member's removal is read, and set aside: this deployment has no GUILD_MEMBERS intent.
    assert result.rejected == []
    assert [(s.event, s.reason) for s in result.ignored] == [
        ("GUILD_MEMBER_REMOVE", "member removals are off (MEMORY_GUILD_MEMBERS_INTENT)")
    ]
    repository = services.repository
    assert repository.channels_public(
        gw.GUILD, [ge.GENERAL, ge.DEV, ge.STAFF_ROOM, ge.THREAD, ge.HIDDEN_THREAD]
    ) == {ge.GENERAL, ge.DEV, ge.THREAD}
    staff = repository.guild_staff(gw.GUILD)
    assert staff.owner_id == gw.ALICE  # the GUILD_UPDATE's new owner
    assert staff.role_ids == [ge.MODS]  # the role made Administrator, then deleted, is gone


def test_role_and_thread_changes_through_the_gateway_move_visibility_and_staff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, services: MemoryServices
) -> None:
    events = [
        ge.guild(),
        # The helpers gain Manage Server; the moderators lose it.
        ge.role_event("GUILD_ROLE_UPDATE", ge.HELPERS, ge.VIEW | ge.MANAGE_GUILD),
        ge.role_event("GUILD_ROLE_UPDATE", ge.MODS, ge.VIEW),
        # A thread in the closed staff room, and one in #dev; then #dev is closed.
        ge.thread_event("THREAD_CREATE", ge.HIDDEN_THREAD, ge.STAFF_ROOM),
        ge.thread_event("THREAD_CREATE", "200000000000000203", ge.DEV),
        ge.channel_event("CHANNEL_UPDATE", ge.DEV, ge.overwrite(gw.GUILD, deny=ge.VIEW)),
        # @everyone loses View Channel: only channels opened to it explicitly stay public.
        ge.role_event("GUILD_ROLE_UPDATE", gw.GUILD, ge.SEND),
    ]
    _, session = through_the_gateway(tmp_path, monkeypatch, events)
    assert [e["t"] for e in session.sink.events] == ["READY"] + [e["t"] for e in events]

    repository = services.repository
    services.recorder.record(session.sink.events[:7])
    assert repository.guild_staff(gw.GUILD).role_ids == [ge.HELPERS]
    public = repository.channels_public(
        gw.GUILD, [ge.GENERAL, ge.DEV, ge.THREAD, ge.HIDDEN_THREAD, "200000000000000203"]
    )
    assert public == {ge.GENERAL, ge.THREAD}  # #dev's thread followed #dev
    services.recorder.record(session.sink.events[7:])
    assert not repository.channel_is_public(gw.GUILD, ge.GENERAL)
    assert not repository.channel_is_public(gw.GUILD, ge.THREAD)
