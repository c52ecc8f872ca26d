"""What a consolidation round writes of each person outside its transaction.

A round's transaction holds what must be atomic with consuming the batch (facts, episode,
summary, consumption, the erasure checks, the lock release). The per-person items it used to
hold there (four actions a speaker with the checks: a crowded channel's round took ~18
messages) are written around it instead, each write idempotent, so that a round of 30
speakers still takes a full batch:

- before the model call, one `SPOKE#{channel}` item per speaker new to the channel (one
  BatchGetItem, one BatchWriteItem of the new ones): erasure reads the episodes of the
  channels these list. Written before the commit, every episode a person took part in has
  its item by the time it exists. A failure fails the round; a round whose commit is refused
  takes back the new items of people barred by then (an opt-out while the model thought).
- after the commit, the profiles (display name, first and last seen: one UpdateItem each)
  and the name registry's new entries (one UpdateItem each, ADD to a capped set), for people
  not barred by then. The commit leaves them on the channel's state (`people_due`, in its
  lock release: no extra action); once written they are cleared from there, and a round
  whose commit's writes failed is followed by one that writes them before anything else.

Part of `MemoryRepository` (see repository.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from botocore.exceptions import ClientError

from botmemory.storage import keys
from botmemory.storage.commit import NameSeen
from botmemory.storage.items import from_item, key, name_key, profile_key, state_key, to_item
from botmemory.storage.table import Table, error_code

log = logging.getLogger(__name__)

# A name's registry entry stops learning members here: two are enough to make a name name
# nobody (people.names.is_distinctive), and erasure taking a few out leaves it shared. An
# entry of a name thousands use ("alex") would otherwise grow towards the 400 KB item limit.
MAX_NAME_MEMBERS = 100


@dataclass(frozen=True)
class RoundPeople:
    """The profiles and registry entries a committed round still owes."""

    people: tuple[tuple[str, str, str], ...] = ()  # (scope, user id, display name)
    names: tuple[NameSeen, ...] = ()
    now_ms: int = 0

    def __bool__(self) -> bool:
        return bool(self.people or self.names)

    def pairs(self) -> set[tuple[str, str]]:
        """(scope, person) of everyone these writes are of."""
        return {(s, u) for s, u, _ in self.people} | {
            (n.scope, u) for n in self.names for u in n.user_ids
        }

    def user_ids(self) -> set[str]:
        return {u for _, u, _ in self.people} | {u for n in self.names for u in n.user_ids}

    def without(self, barred: set[str]) -> RoundPeople:
        """The same writes, minus everything of these people."""
        names = []
        for name in self.names:
            users = tuple(u for u in name.user_ids if u not in barred)
            if users:
                names.append(NameSeen(name.scope, name.normalized, name.name, users))
        people = tuple(p for p in self.people if p[1] not in barred)
        return RoundPeople(people, tuple(names), self.now_ms)

    def to_json(self) -> str:
        return json.dumps(
            {
                "people": [list(p) for p in self.people],
                "names": [[n.scope, n.normalized, n.name, list(n.user_ids)] for n in self.names],
                "now_ms": self.now_ms,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> RoundPeople:
        """What a channel's state kept; an unreadable record owes nothing (logged)."""
        try:
            data = json.loads(text)
            people = tuple((str(s), str(u), str(n)) for s, u, n in data["people"])
            names = tuple(
                NameSeen(str(s), str(k), str(n), tuple(str(u) for u in users))
                for s, k, n, users in data["names"]
            )
            return cls(people, names, int(data["now_ms"]))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable people_due record skipped", extra={"error": repr(exc)})
            return cls()


class RoundPeopleStore(Table):
    def record_spoken(
        self, channel_id: str, speakers: Iterable[tuple[str, str]], now_ms: int
    ) -> list[tuple[str, str]]:
        """A `SPOKE#` item per (scope, person) who spoke in this channel, for those without
        one yet (one BatchGetItem, then one BatchWriteItem of the new ones): the new ones."""
        wanted = list(dict.fromkeys(speakers))
        keys_ = [
            key(keys.user_pk(scope, user), keys.spoke_sk(channel_id)) for scope, user in wanted
        ]
        found = {
            (str(plain["pk"]), str(plain["sk"]))
            for item in self._items_at(keys_, "pk, sk", consistent=False)
            if (plain := from_item(item))
        }
        new = [
            (scope, user)
            for scope, user in wanted
            if (keys.user_pk(scope, user), keys.spoke_sk(channel_id)) not in found
        ]
        items = [
            to_item(
                {
                    "pk": keys.user_pk(scope, user_id),
                    "sk": keys.spoke_sk(channel_id),
                    "user_id": user_id,
                    "scope": scope,
                    "channel_id": channel_id,
                    "first_ms": now_ms,
                }
            )
            for scope, user_id in new
        ]
        self._batch_write([{"PutRequest": {"Item": item}} for item in items])
        return new

    def spoken_in(self, channel_id: str, people: Iterable[tuple[str, str]]) -> set[str]:
        """Of these (scope, person), the ids of those whose `SPOKE#` item for this channel
        exists (strongly consistent, one BatchGetItem per 100)."""
        wanted = [
            key(keys.user_pk(s, u), keys.spoke_sk(channel_id)) for s, u in dict.fromkeys(people)
        ]
        return {str(from_item(i)["user_id"]) for i in self._items_at(wanted, "user_id")}

    def forget_spoken(self, channel_id: str, speakers: Iterable[tuple[str, str]]) -> None:
        """Take back `SPOKE#` items a round wrote and never committed anything for."""
        self._delete_keys(
            [key(keys.user_pk(s, u), keys.spoke_sk(channel_id)) for s, u in dict.fromkeys(speakers)]
        )

    def write_round_people(self, owed: RoundPeople) -> None:
        """The profiles and registry entries a round owes; safe to repeat."""
        for scope, user_id, name in owed.people:
            self._client.update_item(
                TableName=self.table_name,
                Key=profile_key(scope, user_id),
                UpdateExpression=(
                    "SET user_id = :user, #scope = :scope, display_name = :name, "
                    "first_seen_ms = if_not_exists(first_seen_ms, :now), "
                    "last_seen_ms = :now"
                ),
                ExpressionAttributeNames={"#scope": "scope"},
                ExpressionAttributeValues={
                    ":user": {"S": user_id},
                    ":scope": {"S": scope},
                    ":name": {"S": name},
                    ":now": {"N": str(owed.now_ms)},
                },
            )
        for seen in owed.names:
            self._name_seen(seen)

    def _name_seen(self, seen: NameSeen) -> None:
        """A display name learns the members seen using it, while it has room for them."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=name_key(seen.scope, seen.normalized),
                UpdateExpression="SET #name = :name, #scope = :scope ADD user_ids :users",
                ConditionExpression="attribute_not_exists(user_ids) OR size(user_ids) < :cap",
                ExpressionAttributeNames={"#name": "name", "#scope": "scope"},
                ExpressionAttributeValues={
                    ":name": {"S": seen.name},
                    ":scope": {"S": seen.scope},
                    ":users": {"SS": sorted(seen.user_ids)},
                    ":cap": {"N": str(MAX_NAME_MEMBERS)},
                },
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            # Full: the name is shared by many already, and names nobody.

    def clear_people_due(self, channel_id: str, owed: str) -> None:
        """Forget what a round owed once written, unless a later round replaced it."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=state_key(channel_id),
                UpdateExpression="REMOVE people_due",
                ConditionExpression="people_due = :owed",
                ExpressionAttributeValues={":owed": {"S": owed}},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    def names_at(self, scope: str, normalized_names: Iterable[str]) -> dict[str, list[str]]:
        """These names' registry entries, looked up by key (one BatchGetItem per 100,
        eventually consistent): normalized name -> the members seen using it."""
        wanted = [name_key(scope, n) for n in dict.fromkeys(normalized_names) if n]
        registry: dict[str, list[str]] = {}
        for item in self._items_at(wanted, "sk, user_ids", consistent=False):
            plain = from_item(item)
            name = str(plain["sk"]).removeprefix(keys.NAME_PREFIX)
            registry[name] = [str(u) for u in plain.get("user_ids", [])]
        return registry


def spoke_of(pk: str, sk: str, user_id: str) -> tuple[str, str] | None:
    """(scope, channel) a person's `SPOKE#` item names, read back from its key."""
    scope = keys.scope_of_user_pk(pk, user_id)
    channel_id = sk.removeprefix(keys.SPOKE_PREFIX)
    if scope is None or channel_id == sk or not channel_id:
        return None
    return scope, channel_id
