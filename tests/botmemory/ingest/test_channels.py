"""Channels know whether they are public: @everyone's view of each channel, kept from the
guild and channel events the relay forwards (trimmed), unknown counting as private."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from botmemory.discord.interactions import Permissions
from botmemory.services import MemoryServices
from localrun import gateway as gw
from relay.batch import encode_event
from tests.relay.helpers import Clock, RecordingSink, make_forwarder

VIEW = int(Permissions.VIEW_CHANNEL)
SEND = 1 << 11
PUBLIC = "200000000000000011"
HIDDEN = "200000000000000012"
OPENED = "200000000000000013"


def overwrite(target: str, *, allow: int = 0, deny: int = 0, kind: int = 0) -> dict[str, Any]:
    return {"id": target, "type": kind, "allow": str(allow), "deny": str(deny)}


def channel(
    channel_id: str, *overwrites: dict[str, Any], guild: str | None = None
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": channel_id,
        "type": 0,
        "name": "general",
        "topic": "t" * 500,
        "permission_overwrites": list(overwrites),
    }
    if guild:
        payload["guild_id"] = guild
    return payload


def guild_create(everyone: int, *channels: dict[str, Any]) -> dict[str, Any]:
    return {
        "t": "GUILD_CREATE",
        "d": {
            "id": gw.GUILD,
            "name": "a guild",
            "roles": [
                {"id": gw.GUILD, "name": "@everyone", "permissions": str(everyone)},
                {"id": "500000000000000001", "name": "mods", "permissions": str(VIEW | 1 << 3)},
            ],
            "channels": list(channels),
            "members": [{"user": gw.user(gw.ALICE)}],
            "presences": [],
            "emojis": [],
        },
    }


def channel_event(name: str, channel_id: str, *overwrites: dict[str, Any]) -> dict[str, Any]:
    return {"t": name, "d": channel(channel_id, *overwrites, guild=gw.GUILD)}


def a_guild(everyone: int = VIEW | SEND) -> dict[str, Any]:
    return guild_create(
        everyone,
        channel(PUBLIC),
        channel(
            HIDDEN, overwrite(gw.GUILD, deny=VIEW), overwrite("500000000000000001", allow=VIEW)
        ),
        channel(OPENED, overwrite(gw.GUILD, allow=VIEW)),
    )


def public(services: MemoryServices, channel_id: str) -> bool:
    return services.repository.channel_is_public(gw.GUILD, channel_id)


def test_a_channel_is_public_unless_an_everyone_overwrite_denies_view(
    services: MemoryServices,
) -> None:
    result = services.recorder.record([a_guild()])
    assert result.rejected == [] and result.ignored == []
    assert result.channels == 4 and result.stored == 0  # @everyone's permissions and 3 channels
    assert public(services, PUBLIC)
    assert not public(services, HIDDEN)  # a moderator role's allow does not open it to all
    assert public(services, OPENED)


def test_when_everyone_lacks_view_only_an_explicit_allow_makes_a_channel_public(
    services: MemoryServices,
) -> None:
    services.recorder.record([a_guild(everyone=SEND)])
    assert not public(services, PUBLIC)
    assert not public(services, HIDDEN)
    assert public(services, OPENED)


def test_channel_create_and_update_use_the_guilds_everyone_permissions(
    services: MemoryServices,
) -> None:
    services.recorder.record([a_guild()])
    new = "200000000000000014"
    services.recorder.record([channel_event("CHANNEL_CREATE", new)])
    assert public(services, new)
    services.recorder.record([channel_event("CHANNEL_UPDATE", new, overwrite(gw.GUILD, deny=VIEW))])
    assert not public(services, new)
    services.recorder.record([channel_event("CHANNEL_UPDATE", HIDDEN)])  # the deny is lifted
    assert public(services, HIDDEN)


def test_before_its_guild_is_seen_a_channel_is_public_only_by_an_explicit_allow(
    services: MemoryServices,
) -> None:
    services.recorder.record(
        [
            channel_event("CHANNEL_CREATE", PUBLIC),
            channel_event("CHANNEL_CREATE", OPENED, overwrite(gw.GUILD, allow=VIEW)),
        ]
    )
    assert not public(services, PUBLIC)
    assert public(services, OPENED)


def test_channel_delete_removes_its_item(services: MemoryServices) -> None:
    services.recorder.record([a_guild()])
    result = services.recorder.record([channel_event("CHANNEL_DELETE", PUBLIC)])
    assert result.channels == 1
    assert not public(services, PUBLIC)
    assert public(services, OPENED)


def test_an_unknown_channel_is_private(services: MemoryServices) -> None:
    assert not public(services, PUBLIC)
    services.recorder.record([a_guild()])
    assert not services.repository.channel_is_public(gw.OTHER_GUILD, PUBLIC)


def test_a_guild_with_more_channels_than_one_batch_write_is_written_whole(
    services: MemoryServices,
) -> None:
    many = [channel(str(300000000000000000 + i)) for i in range(60)]
    result = services.recorder.record([guild_create(VIEW, *many)])
    assert result.channels == 61
    assert all(public(services, c["id"]) for c in many)


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"t": "CHANNEL_UPDATE", "d": {"type": 0, "guild_id": gw.GUILD}}, "id"),
        ({"t": "CHANNEL_CREATE", "d": "not an object"}, "no payload object"),
        (
            channel_event("CHANNEL_UPDATE", PUBLIC, {"id": gw.GUILD, "type": 0, "deny": "lots"}),
            "permission_overwrites",
        ),
        ({"t": "GUILD_CREATE", "d": {"id": gw.GUILD, "channels": []}}, "@everyone"),
        ({"t": "GUILD_CREATE", "d": {"id": "x", "roles": []}}, "id"),
    ],
)
def test_a_malformed_channel_event_is_rejected_with_its_reason(
    services: MemoryServices, event: dict[str, Any], reason: str
) -> None:
    result = services.recorder.record([event, channel_event("CHANNEL_CREATE", OPENED)])
    assert [skip.index for skip in result.rejected] == [0]
    assert reason in result.rejected[0].reason
    assert result.channels == 1  # the next event still counts


def test_unavailable_guilds_and_channels_outside_a_guild_are_ignored(
    services: MemoryServices,
) -> None:
    result = services.recorder.record(
        [
            {"t": "GUILD_CREATE", "d": {"id": gw.GUILD, "unavailable": True}},
            {"t": "CHANNEL_CREATE", "d": channel("200000000000000099")},
        ]
    )
    assert [skip.reason for skip in result.ignored] == [
        "guild unavailable (outage)",
        "not a guild channel",
    ]
    assert result.channels == 0 and result.rejected == []


# The relay -------------------------------------------------------------------------------


def test_the_relay_forwards_guild_create_trimmed_to_what_visibility_needs(
    tmp_path: Path, services: MemoryServices
) -> None:
    event = a_guild()
    event["d"]["members"] = [{"user": gw.user(gw.ALICE), "nick": "n" * 100}] * 2_000
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock, max_bytes=20_000)
    assert len(encode_event(event["t"], event["d"])) > 20_000  # whole, it would not fit
    assert forwarder.submit(event["t"], event["d"])
    forwarder.pump(final=True)
    (sent,) = sink.events
    assert sent["t"] == "GUILD_CREATE"
    assert set(sent["d"]) == {"id", "roles", "channels"}
    # @everyone, and the staff role (Administrator); no other role.
    assert sent["d"]["roles"] == [
        {"id": gw.GUILD, "permissions": str(VIEW | SEND)},
        {"id": "500000000000000001", "permissions": str(VIEW | 1 << 3)},
    ]
    hidden = sent["d"]["channels"][1]
    assert hidden == {
        "id": HIDDEN,
        "type": 0,
        "permission_overwrites": [
            overwrite(gw.GUILD, deny=VIEW),
            overwrite("500000000000000001", allow=VIEW),
        ],
    }
    # What it forwards is what ingest needs: visibility, and who the staff are.
    assert services.recorder.record(sink.events).channels == 4
    assert not public(services, HIDDEN) and public(services, PUBLIC)
    staff = services.repository.guild_staff(gw.GUILD)
    assert staff.role_ids == ["500000000000000001"]
    assert staff.includes(gw.BOB, ["500000000000000001"]) and not staff.includes(gw.BOB, [])


@pytest.mark.parametrize("name", ["CHANNEL_CREATE", "CHANNEL_UPDATE", "CHANNEL_DELETE"])
def test_the_relay_forwards_channel_events_without_name_or_topic(tmp_path: Path, name: str) -> None:
    event = channel_event(name, PUBLIC, overwrite(gw.GUILD, deny=VIEW))
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock)
    assert forwarder.submit(event["t"], event["d"])
    forwarder.pump(final=True)
    (sent,) = sink.events
    assert sent == {
        "t": name,
        "d": {
            "id": PUBLIC,
            "type": 0,
            "guild_id": gw.GUILD,
            "permission_overwrites": [overwrite(gw.GUILD, deny=VIEW)],
        },
    }
