"""Visibility and staff follow role changes, new owners and threads (botmemory.ingest.channels), as
IngestFunction's recorder receives them from the relay; bad input is a reasoned skip."""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.services import MemoryServices
from localrun import gateway as gw
from tests.conftest import WRITE_OPERATIONS, RequestCounter, scan_all
from tests.relay import guild_events as ge

NEW_THREAD = "200000000000000203"
PRIVATE_THREAD = "200000000000000204"
ORPHAN = "200000000000000205"
OPENED = "200000000000000106"


def record(services: MemoryServices, *events: dict[str, Any]) -> Any:
    result = services.recorder.record(list(events))
    assert result.rejected == [], result.rejected
    return result


def public(services: MemoryServices, *channels: str) -> set[str]:
    """The public ones of `channels`, as each of the three readers says: one at a time, in a
    batch, and the server's whole list (what recall reads); they must agree."""
    repository = services.repository
    one_by_one = {c for c in channels if repository.channel_is_public(gw.GUILD, c)}
    assert repository.channels_public(gw.GUILD, channels) == one_by_one
    assert repository.public_channels(gw.GUILD) & set(channels) == one_by_one
    return one_by_one


def a_guild() -> dict[str, Any]:
    channels = [
        ge.channel(ge.GENERAL),
        ge.channel(ge.DEV),
        ge.channel(ge.STAFF_ROOM, ge.overwrite(gw.GUILD, deny=ge.VIEW)),
        ge.channel(OPENED, ge.overwrite(gw.GUILD, allow=ge.VIEW)),
    ]
    return ge.guild(channels=channels)


ALL = (ge.GENERAL, ge.DEV, ge.STAFF_ROOM, OPENED)


def test_everyone_losing_and_regaining_view_recomputes_every_channel(
    services: MemoryServices,
) -> None:
    record(services, a_guild())
    assert public(services, *ALL) == {ge.GENERAL, ge.DEV, OPENED}
    result = record(services, ge.role_event("GUILD_ROLE_UPDATE", gw.GUILD, ge.SEND))
    assert result.channels == 1 + 2  # the guild's item, and the two channels that changed
    assert public(services, *ALL) == {OPENED}  # only the explicit allow stays public
    record(services, ge.role_event("GUILD_ROLE_UPDATE", gw.GUILD, ge.VIEW | ge.SEND))
    assert public(services, *ALL) == {ge.GENERAL, ge.DEV, OPENED}
    # @everyone as Administrator sees everything, overwrites or not.
    record(services, ge.role_event("GUILD_ROLE_UPDATE", gw.GUILD, ge.ADMINISTRATOR))
    assert public(services, *ALL) == set(ALL)


def test_a_role_change_that_leaves_view_alone_rewrites_no_channel(
    services: MemoryServices, dynamodb: Any
) -> None:
    record(services, a_guild())
    counter = RequestCounter(dynamodb)
    result = record(services, ge.role_event("GUILD_ROLE_UPDATE", gw.GUILD, ge.VIEW))  # -SEND
    assert result.channels == 1 and counter.count(*WRITE_OPERATIONS) == 1
    assert counter.count("Query") == 0


def test_a_channel_created_after_everyone_lost_view_is_private_unless_opened(
    services: MemoryServices,
) -> None:
    record(services, a_guild(), ge.role_event("GUILD_ROLE_UPDATE", gw.GUILD, ge.SEND))
    fresh, opened = "200000000000000107", "200000000000000108"
    record(
        services,
        ge.channel_event("CHANNEL_CREATE", fresh),
        ge.channel_event("CHANNEL_CREATE", opened, ge.overwrite(gw.GUILD, allow=ge.VIEW)),
    )
    assert public(services, fresh, opened) == {opened}


def test_staff_roles_follow_role_create_update_and_delete(services: MemoryServices) -> None:
    record(services, a_guild())
    staff = services.repository.guild_staff
    assert staff(gw.GUILD).role_ids == [ge.MODS]
    admins = "500000000000000009"
    record(services, ge.role_event("GUILD_ROLE_CREATE", admins, ge.ADMINISTRATOR))
    record(services, ge.role_event("GUILD_ROLE_UPDATE", ge.HELPERS, ge.MANAGE_GUILD))
    assert staff(gw.GUILD).role_ids == sorted([ge.MODS, admins, ge.HELPERS])
    assert staff(gw.GUILD).includes(gw.BOB, [ge.HELPERS])
    record(services, ge.role_event("GUILD_ROLE_UPDATE", ge.MODS, ge.VIEW | ge.SEND))
    record(services, ge.role_event("GUILD_ROLE_DELETE", admins, 0))
    assert staff(gw.GUILD).role_ids == [ge.HELPERS]
    assert not staff(gw.GUILD).includes(gw.BOB, [ge.MODS, admins])
    # A role's change kept the guild's other facts.
    assert staff(gw.GUILD).owner_id == gw.CAROL
    assert services.repository.everyone_permissions(gw.GUILD) == ge.VIEW | ge.SEND


def test_a_new_owner_and_new_everyone_permissions_come_with_guild_update(
    services: MemoryServices,
) -> None:
    record(services, a_guild())
    record(services, ge.guild_update(everyone=ge.SEND, owner=gw.ALICE))
    staff = services.repository.guild_staff(gw.GUILD)
    assert staff.owner_id == gw.ALICE and staff.includes(gw.ALICE, [])
    assert not staff.includes(gw.CAROL, [])
    assert staff.role_ids == [ge.MODS]
    assert public(services, *ALL) == {OPENED}


def test_a_role_update_for_a_guild_never_seen_changes_nothing(
    services: MemoryServices, dynamodb: Any
) -> None:
    for event in (
        ge.role_event("GUILD_ROLE_UPDATE", ge.MODS, ge.ADMINISTRATOR),
        ge.role_event("GUILD_ROLE_UPDATE", gw.GUILD, ge.VIEW),
        ge.role_event("GUILD_ROLE_DELETE", ge.MODS, 0),
    ):
        result = services.recorder.record([event])
        assert [s.reason for s in result.ignored] == [
            "guild not seen yet (no GUILD_CREATE recorded)"
        ]
        assert result.rejected == [] and result.channels == 0
    assert scan_all(dynamodb) == []


def test_a_thread_takes_its_parents_visibility_and_follows_it(services: MemoryServices) -> None:
    record(
        services,
        a_guild(),
        ge.thread_event("THREAD_CREATE", NEW_THREAD, ge.DEV),
        ge.thread_event("THREAD_CREATE", ge.HIDDEN_THREAD, ge.STAFF_ROOM),
    )
    assert public(services, NEW_THREAD, ge.HIDDEN_THREAD, ge.THREAD) == {NEW_THREAD, ge.THREAD}
    # #dev closes: its thread follows, with no event about the thread.
    record(
        services, ge.channel_event("CHANNEL_UPDATE", ge.DEV, ge.overwrite(gw.GUILD, deny=ge.VIEW))
    )
    assert public(services, NEW_THREAD) == set()
    # @everyone opened to the staff room by an allow: its thread follows too.
    record(
        services,
        ge.channel_event("CHANNEL_UPDATE", ge.STAFF_ROOM, ge.overwrite(gw.GUILD, allow=ge.VIEW)),
    )
    assert public(services, ge.HIDDEN_THREAD) == {ge.HIDDEN_THREAD}
    record(services, ge.thread_event("THREAD_DELETE", ge.HIDDEN_THREAD, ge.STAFF_ROOM))
    assert public(services, ge.HIDDEN_THREAD) == set()


def test_private_threads_and_threads_of_unknown_parents_are_private(
    services: MemoryServices,
) -> None:
    record(
        services,
        a_guild(),
        ge.thread_event("THREAD_CREATE", PRIVATE_THREAD, ge.GENERAL, kind=12),
        ge.thread_event("THREAD_CREATE", ORPHAN, "200000000000000999"),
        ge.thread_event("THREAD_CREATE", NEW_THREAD, None),
    )
    assert public(services, PRIVATE_THREAD, ORPHAN, NEW_THREAD) == set()
    # The parent arrives later: the thread becomes public with it.
    record(services, ge.channel_event("CHANNEL_CREATE", "200000000000000999"))
    assert public(services, ORPHAN) == {ORPHAN}


def test_thread_list_sync_records_every_thread_without_its_members(
    services: MemoryServices, dynamodb: Any
) -> None:
    record(services, a_guild())
    result = record(
        services,
        ge.thread_list_sync(ge.thread(NEW_THREAD, ge.DEV), ge.thread(ORPHAN, ge.STAFF_ROOM)),
    )
    assert result.channels == 2
    assert public(services, NEW_THREAD, ORPHAN) == {NEW_THREAD}
    assert not [item for item in scan_all(dynamodb) if gw.ALICE in str(item)]


def test_channels_public_answers_many_in_one_batch_get_and_resolves_threads(
    services: MemoryServices, dynamodb: Any
) -> None:
    record(
        services,
        a_guild(),
        ge.thread_event("THREAD_CREATE", NEW_THREAD, ge.STAFF_ROOM),
        ge.thread_event("THREAD_CREATE", PRIVATE_THREAD, ge.GENERAL, kind=12),
        ge.thread_event("THREAD_CREATE", ORPHAN, "200000000000000999"),
    )
    asked = [*ALL, ge.THREAD, NEW_THREAD, PRIVATE_THREAD, ORPHAN, "200000000000000998"]
    counter = RequestCounter(dynamodb)
    found = services.repository.channels_public(gw.GUILD, asked)
    assert found == {ge.GENERAL, ge.DEV, OPENED, ge.THREAD}
    assert found == public(services, *asked)  # the one-channel question agrees
    # One BatchGetItem for the channels; one more for the parent nobody asked about.
    assert counter.calls[:2] == ["BatchGetItem", "BatchGetItem"]
    counter.reset()
    assert services.repository.channels_public(gw.GUILD, [*ALL, *ALL]) == {
        ge.GENERAL,
        ge.DEV,
        OPENED,
    }
    assert counter.calls == ["BatchGetItem"]
    counter.reset()
    assert services.repository.channels_public(gw.OTHER_GUILD, [ge.GENERAL]) == set()
    assert services.repository.channels_public(gw.GUILD, []) == set()


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"t": "GUILD_ROLE_UPDATE", "d": {"guild_id": gw.GUILD}}, "role"),
        (
            {"t": "GUILD_ROLE_UPDATE", "d": {"guild_id": gw.GUILD, "role": {"id": ge.MODS}}},
            "permissions",
        ),
        ({"t": "GUILD_ROLE_DELETE", "d": {"role_id": ge.MODS}}, "guild_id"),
        ({"t": "GUILD_UPDATE", "d": {"id": gw.GUILD, "owner_id": gw.ALICE}}, "roles"),
        ({"t": "GUILD_UPDATE", "d": {"id": gw.GUILD, "roles": []}}, "@everyone"),
        ({"t": "THREAD_CREATE", "d": {"guild_id": gw.GUILD, "parent_id": ge.DEV}}, "id"),
        ({"t": "THREAD_LIST_SYNC", "d": {"threads": []}}, "guild_id"),
    ],
)
def test_a_malformed_role_guild_or_thread_event_is_rejected_with_its_reason(
    services: MemoryServices, event: dict[str, Any], reason: str
) -> None:
    record(services, a_guild())
    result = services.recorder.record([event, ge.thread_event("THREAD_CREATE", NEW_THREAD, ge.DEV)])
    assert [skip.index for skip in result.rejected] == [0]
    assert reason in result.rejected[0].reason
    assert result.channels == 1  # the next event still counts
    assert services.repository.guild_staff(gw.GUILD).role_ids == [ge.MODS]


def test_thread_and_channel_events_without_a_guild_are_ignored(services: MemoryServices) -> None:
    thread = ge.thread_event("THREAD_CREATE", NEW_THREAD, ge.DEV)
    del thread["d"]["guild_id"]
    result = services.recorder.record([thread, {"t": "CHANNEL_UPDATE", "d": ge.channel(ge.DEV)}])
    assert [s.reason for s in result.ignored] == ["not a guild thread", "not a guild channel"]
    assert result.channels == 0


def test_a_role_change_to_a_guild_item_of_the_older_format_is_a_reasoned_skip(
    services: MemoryServices, dynamodb: Any
) -> None:
    # The guild's item as it was written before staff roles were a set: a list.
    dynamodb.put_item(
        TableName="MemoryTable",
        Item={
            "pk": {"S": f"GUILD#{gw.GUILD}"},
            "sk": {"S": "EVERYONE"},
            "permissions": {"N": str(ge.VIEW)},
            "role_ids": {"L": [{"S": ge.MODS}]},
        },
    )
    result = services.recorder.record(
        [
            ge.role_event("GUILD_ROLE_UPDATE", ge.MODS, ge.VIEW),
            ge.thread_event("THREAD_CREATE", NEW_THREAD, ge.DEV),
        ]
    )
    assert [(s.index, s.reason) for s in result.rejected] == [
        (0, "the guild's item is in an older format; its next GUILD_CREATE rewrites it")
    ]
    assert result.channels == 1
    record(services, a_guild(), ge.role_event("GUILD_ROLE_UPDATE", ge.MODS, ge.VIEW))
    assert services.repository.guild_staff(gw.GUILD).role_ids == []
