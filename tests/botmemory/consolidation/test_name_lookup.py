"""Name matching in a large server (issue 28 item 6): a round reads the registry entries of the
names its texts could hold, by key, never a fixed first 2,000 of the registry, so a member
far down a registry of 20,000 is still found, and what a round reads does not grow with the
member count."""

from __future__ import annotations

from typing import Any

import boto3

from botmemory.clock import ManualClock
from botmemory.people.names import MAX_NAME_LOOKUPS, name_candidates
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.round_people import MAX_NAME_MEMBERS, RoundPeopleStore
from localrun import gateway as gw
from localrun.storage import put_in_moto
from tests.conftest import TABLE


def member(n: int) -> str:
    return f"4{n:017d}"


OTHER_GUILD = "100000000000000009"
OTHER_CHANNEL = "200000000000000009"


def seed_registry(services: MemoryServices, guild: str, count: int) -> None:
    """`count` members, each under a name of their own (straight into moto's table)."""
    put_in_moto(
        services.repository,
        (
            {
                "pk": keys.scope_pk(guild),
                "sk": keys.name_sk(f"zephyrine{n:05d}"),
                "name": f"Zephyrine{n:05d}",
                "scope": guild,
                "user_ids": {member(n)},
            }
            for n in range(count)
        ),
    )


class RegistryReads:
    """The name registry entries a client's requests ask for (keys, or a Query of them)."""

    def __init__(self, client: Any) -> None:
        self.keys = 0
        self.names: list[str] = []
        self.queries = 0
        client.meta.events.register("before-parameter-build.dynamodb.*", self._seen)

    def _seen(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name == "BatchGetItem":
            for request in params["RequestItems"].values():
                found = [k["sk"]["S"] for k in request["Keys"]]
                self.names += [k for k in found if k.startswith(keys.NAME_PREFIX)]
                self.keys += sum(k.startswith(keys.NAME_PREFIX) for k in found)
        if model.name == "Query" and keys.NAME_PREFIX in str(params):
            self.queries += 1


def round_naming(
    services: MemoryServices, guild: str, channel: str, named: int
) -> tuple[RegistryReads, list[dict[str, Any]]]:
    """A round in which Alice names one member; the registry reads it made, and the
    pointers it wrote under that member."""
    at = services.clock.now_ms() - 60_000
    services.recorder.record(
        [
            gw.message(
                gw.ALICE,
                f"I met Zephyrine{named:05d} at the market today",
                at,
                channel=channel,
                guild=guild,
            )
        ]
    )
    reads = RegistryReads(services.repository.client)
    services.consolidator.consolidate(channel, force=True)
    # The member's own partition (a Query, not a scan of the 20,000 names around it), read
    # by a client of its own: the registry reads counted are the round's alone.
    pointers = boto3.client("dynamodb", region_name="us-east-1").query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :named)",
        ExpressionAttributeValues={
            ":pk": {"S": keys.user_pk(guild, member(named))},
            ":named": {"S": keys.NAMED_PREFIX},
        },
        ConsistentRead=True,
    )["Items"]
    return reads, pointers


def test_a_member_far_down_twenty_thousand_is_found_reading_what_fifty_cost(
    dynamodb: Any, clock: ManualClock
) -> None:
    settings = Settings(table_name=TABLE, memory_model="rules", bot_user_id=gw.BOT)
    services = build_services(settings, dynamodb=dynamodb, clock=clock)
    seed_registry(services, gw.GUILD, 50)
    seed_registry(services, OTHER_GUILD, 20_000)

    small, _ = round_naming(services, gw.GUILD, gw.CHANNEL, named=7)
    small_keys, small_queries = small.keys, small.queries
    large, pointers = round_naming(services, OTHER_GUILD, OTHER_CHANNEL, named=19_999)

    assert len(pointers) == 1  # the first 2,000 names read before never reached them
    assert large.queries == small_queries == 0  # no listing of the registry
    # By key, as the words need: the same in a server of 50 names and of 20,000.
    assert large.keys == small_keys <= MAX_NAME_LOOKUPS


def test_the_words_looked_up_are_bounded_and_shortest_first() -> None:
    words = " ".join(f"word{n}" for n in range(2_000))

    found = name_candidates([words])

    assert len(found) == MAX_NAME_LOOKUPS and found[0] == "word0"
    assert all(" " not in name for name in found)  # single words before any pair
    assert name_candidates(["the and you", "ok"]) == []  # common words name nobody
    assert "mary jane" in name_candidates(["I saw Mary-Jane!"])


def test_a_name_thousands_use_stops_learning_members(dynamodb: Any, clock: ManualClock) -> None:
    services = build_services(
        Settings(table_name=TABLE, memory_model="rules"), dynamodb=dynamodb, clock=clock
    )
    store: RoundPeopleStore = services.repository
    from botmemory.storage.commit import NameSeen
    from botmemory.storage.round_people import RoundPeople

    for n in range(MAX_NAME_MEMBERS + 20):
        store.write_round_people(
            RoundPeople(names=(NameSeen(gw.GUILD, "alex", "Alex", (member(n),)),))
        )

    assert len(services.repository.users_with_name(gw.GUILD, "Alex")) == MAX_NAME_MEMBERS
