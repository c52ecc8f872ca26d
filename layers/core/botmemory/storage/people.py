"""What the table keeps about people, apart from their facts: opt-outs, erasure markers,
forget tombstones, the name registry and Named pointers, and the listings erasure reads.
Part of `MemoryRepository` (see repository.py), which callers use.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from botocore.exceptions import ClientError

from botmemory.clock import ttl_alive
from botmemory.records import (
    Episode,
    Fact,
    Forgotten,
    Named,
    Observation,
    Profile,
    scope_of,
)
from botmemory.storage import keys
from botmemory.storage.commit import MAX_TRANSACTION_ACTIONS
from botmemory.storage.items import (
    episode_key,
    fact_key,
    forgotten_values,
    from_item,
    key,
    named_values,
    observation_key,
    to_item,
)
from botmemory.storage.schema import BY_USER_INDEX
from botmemory.storage.table import ItemRef, Table, error_code
from botmemory.text import normalized

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayRecord:
    """A command's stored answer, kept by Powertools Idempotency against replays."""

    ref: ItemRef
    data: str


class PeopleRepository(Table):
    # Erasure wins every race: what consolidation reads and writes for it -------------

    def marks(
        self, opt_out_hashes: Iterable[str], erased_hashes: Iterable[str], now_ms: int
    ) -> tuple[set[str], set[str]]:
        """Of these person hashes, the ones with an OPTOUT item and the ones with a live ERASED
        marker, read strongly consistent (one BatchGetItem per 100 keys)."""
        wanted = [key(keys.OPT_OUT_PK, h) for h in dict.fromkeys(opt_out_hashes)]
        wanted += [key(keys.ERASED_PK, h) for h in dict.fromkeys(erased_hashes)]
        opted: set[str] = set()
        erased: set[str] = set()
        for item in self._items_at(wanted, "pk, sk, expires_at"):
            plain = from_item(item)
            if plain["pk"] == keys.OPT_OUT_PK:
                opted.add(plain["sk"])
            elif ttl_alive(plain.get("expires_at"), now_ms):
                erased.add(plain["sk"])
        return opted, erased

    def forgotten_times(
        self, facts: Iterable[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], int]:
        """Of these (scope, user id, fact id), the ones forgotten, and when; strongly
        consistent, one BatchGetItem per 100."""
        wanted = [key(keys.user_pk(s, u), keys.forgotten_sk(f)) for s, u, f in dict.fromkeys(facts)]
        found: dict[tuple[str, str, str], int] = {}
        for item in self._items_at(
            wanted, "#scope, user_id, fact_id, forgotten_ms", {"#scope": "scope"}
        ):
            plain = from_item(item)
            found[(plain["scope"], plain["user_id"], plain["fact_id"])] = int(plain["forgotten_ms"])
        return found

    def forget_facts(self, facts: Sequence[Fact], now_ms: int, expires_at: int) -> int:
        """Delete these facts and leave a tombstone for each, so that consolidation never
        brings one back from words said before now: both in one transaction (up to 50 facts
        per transaction). Returns how many facts were deleted."""
        unique = list({(f.scope, f.user_id, f.fact_id): f for f in facts}.values())
        per_transaction = MAX_TRANSACTION_ACTIONS // 2
        for start in range(0, len(unique), per_transaction):
            actions: list[dict[str, Any]] = []
            for fact in unique[start : start + per_transaction]:
                tombstone = Forgotten(
                    scope=fact.scope,
                    user_id=fact.user_id,
                    fact_id=fact.fact_id,
                    forgotten_ms=now_ms,
                    expires_at=expires_at,
                )
                actions.append({"Delete": {"TableName": self.table_name, "Key": fact_key(fact)}})
                actions.append(
                    {
                        "Put": {
                            "TableName": self.table_name,
                            "Item": to_item(forgotten_values(tombstone)),
                        }
                    }
                )
            self._transact(actions)
        return len(unique)

    def name_registry(self, scope: str, limit: int) -> dict[str, list[str]]:
        """The scope's name registry, at most `limit` names: normalized name -> the members
        seen using it. Eventually consistent, projected, page by page."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.scope_pk(scope)},
                ":prefix": {"S": keys.NAME_PREFIX},
            },
            "ProjectionExpression": "sk, user_ids",
        }
        registry: dict[str, list[str]] = {}
        for item in self._query_all(request):
            plain = from_item(item)
            registry[str(plain["sk"]).removeprefix(keys.NAME_PREFIX)] = list(
                plain.get("user_ids", [])
            )
            if len(registry) >= limit:
                break
        return registry

    def put_named(self, pointers: Iterable[Named]) -> int:
        """Named pointers that did not fit a consolidation's transaction (idempotent)."""
        items = [to_item(named_values(n)) for n in pointers]
        self._batch_write([{"PutRequest": {"Item": i}} for i in items])
        return len(items)

    # People: opt-outs, lookups and erasure ------------------------------------------
    # Opt-outs are kept as hashes of user ids under one partition: ingest checks them
    # from a cached list, and an erased person who stays opted out leaves no id behind.

    def add_opt_out(self, user_hash: str, now_ms: int) -> None:
        self._client.put_item(
            TableName=self.table_name,
            Item=to_item({"pk": keys.OPT_OUT_PK, "sk": user_hash, "since_ms": now_ms}),
        )

    def remove_opt_out(self, user_hash: str) -> None:
        self._client.delete_item(
            TableName=self.table_name,
            Key=key(keys.OPT_OUT_PK, user_hash),
        )

    def opted_out_hashes(self) -> set[str]:
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": keys.OPT_OUT_PK}},
            "ProjectionExpression": "sk",
        }
        return {item["sk"]["S"] for item in self._query_all(request)}

    def items_of_user(self, user_id: str) -> list[ItemRef]:
        """Every item that holds this person's id (the by_user index)."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": BY_USER_INDEX,
            "KeyConditionExpression": "user_id = :user",
            "ExpressionAttributeValues": {":user": {"S": user_id}},
        }
        return [ItemRef(i["pk"]["S"], i["sk"]["S"]) for i in self._query_all(request)]

    def servers_of(self, user_id: str, limit: int) -> list[str]:
        """The servers' scopes a person has a profile in (spoke in, consolidated), at most
        `limit`: one Query of the by_user index for their PROFILE items."""
        response = self._client.query(
            TableName=self.table_name,
            IndexName=BY_USER_INDEX,
            KeyConditionExpression="user_id = :user AND sk = :profile",
            ExpressionAttributeValues={
                ":user": {"S": user_id},
                ":profile": {"S": keys.PROFILE_SK},
            },
            Limit=limit * 2,
        )
        scopes = []
        for item in response["Items"]:
            scope = keys.scope_of_user_pk(item["pk"]["S"], user_id)
            if scope and scope != scope_of(None) and keys.lineage_of(scope) is None:
                scopes.append(scope)
        return scopes[:limit]

    def display_names(self, scope: str, user_ids: Iterable[str]) -> dict[str, str]:
        """The names these people go by in the scope, from their profiles (one BatchGetItem
        per 100; people never seen are left out)."""
        wanted = [key(keys.user_pk(scope, u), keys.PROFILE_SK) for u in dict.fromkeys(user_ids)]
        names: dict[str, str] = {}
        for item in self._items_at(wanted, "user_id, display_name"):
            plain = from_item(item)
            if plain.get("user_id") and plain.get("display_name"):
                names[str(plain["user_id"])] = str(plain["display_name"])
        return names

    def profile_at(self, ref: ItemRef) -> Profile | None:
        item = self._get(ref)
        return Profile.model_validate(item) if item else None

    def observation_at(self, ref: ItemRef) -> Observation | None:
        item = self._get(ref)
        return Observation.model_validate(item) if item else None

    def fact_at(self, ref: ItemRef) -> Fact | None:
        item = self._get(ref)
        return Fact.model_validate(item) if item else None

    def forget_persona_knowledge(self, persona_scope: str, user_id: str) -> int:
        """Delete a persona's knowledge learned from this person (their id among its
        evidence), with the facts' history entries; how many facts went."""
        facts = [
            Fact.model_validate(item)
            for item in self._items_under(
                keys.user_pk(persona_scope, keys.PERSONA_SUBJECT), keys.FACT_PREFIX
            )
        ]
        theirs = [f for f in facts if user_id in f.evidence_user_ids]
        history = [
            key(keys.scope_pk(persona_scope), item["sk"])
            for fact in theirs
            for item in self._items_under(
                keys.scope_pk(persona_scope), keys.history_prefix(fact.fact_id)
            )
        ]
        self._delete_keys([fact_key(f) for f in theirs] + history)
        return len(theirs)

    def delete_items(self, refs: Iterable[ItemRef]) -> int:
        return self._delete_keys([key(r.pk, r.sk) for r in refs])

    def replay_records(self) -> Iterator[ReplayRecord]:
        """Every stored command answer (Powertools Idempotency's records), page by page."""
        for item in self._items_under(keys.IDEMPOTENCY_PK):
            yield ReplayRecord(
                ItemRef(keys.IDEMPOTENCY_PK, str(item["sk"])), str(item.get("data", ""))
            )

    def channel_episodes(self, channel_id: str) -> Iterator[Episode]:
        """Every episode of a channel, oldest first, page by page."""
        for item in self._items_under(keys.channel_pk(channel_id), keys.EPISODE_PREFIX):
            yield Episode.model_validate(item)

    def delete_episodes(self, episodes: Iterable[Episode]) -> int:
        return self._delete_keys([episode_key(e) for e in episodes])

    def channel_observations(self, channel_id: str) -> Iterator[Observation]:
        """Every stored observation of a channel, oldest first, page by page."""
        for item in self._items_under(keys.channel_pk(channel_id), keys.OBS_PREFIX):
            yield Observation.model_validate(item)

    # Erasure: paged listings, pointers, the name registry, the in-progress marker --------

    def mark_erasing(self, user_hash: str, now_ms: int, expires_at: int) -> None:
        """Write or refresh the marker that makes consolidation refuse to commit anything of
        this person while an erasure runs (keys.ERASED_PK, TTL `expires_at`)."""
        self._client.update_item(
            TableName=self.table_name,
            Key=key(keys.ERASED_PK, user_hash),
            UpdateExpression="SET since_ms = if_not_exists(since_ms, :now), expires_at = :exp",
            ExpressionAttributeValues={
                ":now": {"N": str(now_ms)},
                ":exp": {"N": str(expires_at)},
            },
        )

    def user_items_page(
        self,
        user_id: str,
        limit: int,
        start: dict[str, Any] | None = None,
        kind: keys.ItemKind | None = None,
    ) -> tuple[list[ItemRef], dict[str, Any] | None]:
        """One page of the items that hold this person's id (the by_user index), and where
        the next page starts (None after the last). The start is plain JSON: a caller may
        keep it in a checkpoint."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": BY_USER_INDEX,
            "KeyConditionExpression": "user_id = :user",
            "ExpressionAttributeValues": {":user": {"S": user_id}},
            "Limit": limit,
        }
        if kind is not None:  # only items of one kind: their sort keys share a prefix
            request["KeyConditionExpression"] += " AND begins_with(sk, :prefix)"
            request["ExpressionAttributeValues"][":prefix"] = {"S": _USER_KIND_PREFIX[kind]}
        if start:
            request["ExclusiveStartKey"] = start
        response = self._client.query(**request)
        refs = [ItemRef(i["pk"]["S"], i["sk"]["S"]) for i in response["Items"]]
        return refs, cast("dict[str, Any] | None", response.get("LastEvaluatedKey"))

    @staticmethod
    def user_items_after(user_id: str, ref: ItemRef) -> dict[str, Any]:
        """Where a page of `user_items_page` starts to follow `ref`, one of this person's
        items: its key in the by_user index, as a page's end is given (plain JSON). A reader
        that stops inside a page goes on from the item it stopped at."""
        return {"user_id": {"S": user_id}, "sk": {"S": ref.sk}, "pk": {"S": ref.pk}}

    def observation_heads(self, refs: Iterable[ItemRef]) -> list[dict[str, Any]]:
        """Channel, scope and author names of these observations (plain values), batched."""
        wanted = [key(r.pk, r.sk) for r in dict.fromkeys(refs)]
        found = self._items_at(
            wanted, "channel_id, #scope, author_name, author_names", {"#scope": "scope"}
        )
        return [from_item(i) for i in found]

    def delete_if_present(self, ref: ItemRef) -> bool:
        """Delete one item; whether it was there."""
        response = self._client.delete_item(
            TableName=self.table_name, Key=key(ref.pk, ref.sk), ReturnValues="ALL_OLD"
        )
        return "Attributes" in response

    def named_at(self, ref: ItemRef) -> Named | None:
        item = self._get(ref)
        return Named.model_validate(item) if item else None

    def target_of(self, named: Named) -> ItemRef:
        """The channel item a Named pointer points at."""
        return ItemRef(keys.channel_pk(named.channel_id), named.target_sk)

    def users_with_name(self, scope: str, name: str) -> list[str]:
        """Every member of the scope seen using this display name (the name registry)."""
        response = self._client.get_item(
            TableName=self.table_name,
            Key=key(keys.scope_pk(scope), keys.name_sk(normalized(name))),
            ProjectionExpression="user_ids",
        )
        return list(from_item(response.get("Item", {})).get("user_ids", []))

    def drop_from_name(self, scope: str, name: str, user_id: str) -> None:
        """Take a person out of a name's registry entry; an entry left with nobody goes."""
        entry = key(keys.scope_pk(scope), keys.name_sk(normalized(name)))
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=entry,
                UpdateExpression="DELETE user_ids :user",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":user": {"SS": [user_id]}},
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return
            raise
        if "user_ids" not in response.get("Attributes", {}):
            try:
                self._client.delete_item(
                    TableName=self.table_name,
                    Key=entry,
                    ConditionExpression="attribute_not_exists(user_ids)",
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise

    def clear_actor(self, pointer: ItemRef, user_id: str) -> bool:
        """Take a person's id out of the history entry an ACTED# pointer of theirs points at
        (an entry of someone else's fact, which stays that person's); whether it held it."""
        target = keys.acted_target(pointer.sk)
        if target is None:
            return False
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(pointer.pk, target),
                UpdateExpression="REMOVE actor_id",
                ConditionExpression="attribute_exists(pk) AND actor_id = :user",
                ExpressionAttributeValues={":user": {"S": user_id}},
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def redact_observation(self, observation: Observation, content: str) -> None:
        """Replace a stored observation's text (erasure takes a name out of it)."""
        self._client.update_item(
            TableName=self.table_name,
            Key=observation_key(observation.channel_id, observation.sk),
            UpdateExpression="SET content = :content",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":content": {"S": content}},
        )


# The person's items of one kind, as the by_user index lists them (sort key prefixes).


_USER_KIND_PREFIX = {
    keys.ItemKind.PROFILE: keys.PROFILE_SK,
    keys.ItemKind.OBSERVATION: keys.OBS_PREFIX,
    keys.ItemKind.FACT: keys.FACT_PREFIX,
    keys.ItemKind.NAMED: keys.NAMED_PREFIX,
    keys.ItemKind.SPOKE: keys.SPOKE_PREFIX,
}
