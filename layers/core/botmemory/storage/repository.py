"""All DynamoDB access, behind one class, so the logic elsewhere reads as what it does.

`MemoryRepository` is the one class callers use. Its methods live with their concern:
observations, channel state, facts, pins, episodes, the consolidation commit and legacy
memory here; people (opt-outs, erasure, names) in repository_people.py; channel visibility in
repository_channels.py; the client and the shared helpers in table.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from botmemory.records import (
    Attempts,
    ChannelSummary,
    Episode,
    Fact,
    FactHistory,
    FactStatus,
    Forgotten,
    Observation,
    ObservationKind,
    Pin,
    Quarantine,
    Record,
)
from botmemory.search.passages import source_keys
from botmemory.search.port import Passage, PassageKind
from botmemory.snowflake import snowflake_ms
from botmemory.storage import keys
from botmemory.storage.commit import (
    MAX_TRANSACTION_ACTIONS,
    CommitRejected,
    ConsolidationCommit,
    Lock,
    LockRefused,
)
from botmemory.storage.items import (
    attempts_of,
    attempts_update,
    attribute,
    episode_key,
    episode_values,
    fact_key,
    fact_values,
    forgotten_values,
    from_item,
    history_puts,
    key,
    observation_values,
    pin_key,
    pin_values,
    state_key,
    to_item,
)
from botmemory.storage.schema import (
    ACTIVE_FACTS_INDEX,
    PENDING_INDEX,
    SWEEP_INDEX,
)

if TYPE_CHECKING:
    pass

from botmemory.storage.candidates import CandidateRepository
from botmemory.storage.channels import ChannelRepository
from botmemory.storage.people import PeopleRepository
from botmemory.storage.personas import PersonaRepository
from botmemory.storage.short_term import ShortTermRepository
from botmemory.storage.summaries import SummaryRepository
from botmemory.storage.table import error_code

log = logging.getLogger(__name__)


class MemoryRepository(
    PeopleRepository,
    ChannelRepository,
    ShortTermRepository,
    PersonaRepository,
    SummaryRepository,
    CandidateRepository,
):
    # Observations -----------------------------------------------------------------

    def put_observation(self, observation: Observation) -> bool:
        """Store a new observation; False when this exact event was stored before."""
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item=to_item(observation_values(observation)),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def count_pending(self, channel_id: str, up_to: int) -> int:
        """How many observations wait in the channel, counting no further than `up_to`."""
        response = self._client.query(
            TableName=self.table_name,
            IndexName=PENDING_INDEX,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.channel_pk(channel_id)}},
            Select="COUNT",
            Limit=up_to,
        )
        return int(response["Count"])

    def pending_observations(self, channel_id: str, limit: int) -> tuple[list[Observation], bool]:
        """The oldest pending observations, and whether more wait behind them."""
        response = self._client.query(
            TableName=self.table_name,
            IndexName=PENDING_INDEX,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.channel_pk(channel_id)}},
            Limit=limit + 1,
        )
        items = [Observation.model_validate(from_item(i)) for i in response["Items"]]
        return items[:limit], len(items) > limit

    def still_pending(self, channel_id: str, sks: Iterable[str]) -> set[str]:
        """Of these observations, the ones not yet consumed, read strongly consistent.

        The pending index is eventually consistent; this keeps a model call from being
        spent on observations another run has just consumed.
        """
        found = self._channel_items_at(channel_id, sks, "sk, pending_sk")
        return {sk for sk, item in found.items() if "pending_sk" in item}

    # Deleted messages: a message's observation and its delete carry the message's own
    # snowflake time, so both are found by key from the message id alone.

    def deleted_messages(self, channel_id: str, message_ids: Iterable[str]) -> set[str]:
        """Of these messages, the ones whose delete was observed, consumed or not."""
        wanted = {_delete_sk(m): m for m in message_ids}
        return {wanted[sk] for sk in self._channel_items_at(channel_id, wanted, "sk")}

    def message_observations(
        self, channel_id: str, message_ids: Iterable[str]
    ) -> list[Observation]:
        """The stored observations of these messages (their creation, not edits)."""
        sks = (
            keys.observation_sk(snowflake_ms(m), ObservationKind.MESSAGE, m) for m in message_ids
        )
        found = self._channel_items_at(channel_id, sks)
        return [Observation.model_validate(from_item(item)) for item in found.values()]

    def mark_deleted(self, bulk: Observation) -> None:
        """One delete mark per message of a bulk delete, so that a message arriving after
        the bulk delete was consolidated is still found deleted by key."""
        for message_id in bulk.message_ids:
            mark = bulk.model_copy(
                update={
                    "sk": _delete_sk(message_id),
                    "kind": ObservationKind.DELETE,
                    "at_ms": snowflake_ms(message_id),
                    "message_id": message_id,
                    "message_ids": [],
                }
            )
            try:
                self._client.put_item(
                    TableName=self.table_name,
                    Item=to_item(observation_values(mark, pending=False)),
                    ConditionExpression="attribute_not_exists(pk)",  # a delete of its own stays
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise

    def retire_evidence(
        self, fact: Fact, provenance: list[str], history: FactHistory | None = None
    ) -> None:
        """Keep only this evidence of a fact; a fact left with none is deleted, and its
        deletion recorded in the same transaction (`history`)."""
        if not provenance:
            actions: list[dict[str, Any]] = [
                {"Delete": {"Key": fact_key(fact), "ConditionExpression": "attribute_exists(pk)"}}
            ]
            if history is not None:
                actions += history_puts(history)
            # Refused when already gone (forgotten, erased): nothing to delete or record.
            self._transact_unless_refused(actions)
            return
        self._client.update_item(
            TableName=self.table_name,
            Key=fact_key(fact),
            UpdateExpression="SET provenance = :provenance",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":provenance": attribute(provenance)},
        )

    def recent_observations(self, channel_id: str, limit: int) -> list[Observation]:
        """The newest observations of a channel, newest first."""
        items = self._newest_under(keys.channel_pk(channel_id), keys.OBS_PREFIX, limit)
        return [Observation.model_validate(i) for i in items]

    # Channel state: lock, sweep marker, legacy memory --------------------------------

    def acquire_lock(
        self, channel_id: str, owner: str, now_ms: int, lease_ms: int
    ) -> Lock | LockRefused:
        """Take the channel's consolidation lock unless someone holds an unexpired lease or
        the channel backs off after a failure (its next try is still ahead).

        Each acquisition increments the fencing token, so a run whose lease expired and
        was taken over can no longer commit. The lock carries the channel's failure record.
        """
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=state_key(channel_id),
                UpdateExpression=(
                    "SET lock_owner = :owner, lease_until = :until, "
                    "fence = if_not_exists(fence, :zero) + :one"
                ),
                ConditionExpression=(
                    "(attribute_not_exists(lock_owner) OR lease_until < :now) "
                    "AND (attribute_not_exists(retry_at) OR retry_at <= :now)"
                ),
                ExpressionAttributeValues={
                    ":owner": {"S": owner},
                    ":until": {"N": str(now_ms + lease_ms)},
                    ":now": {"N": str(now_ms)},
                    ":zero": {"N": "0"},
                    ":one": {"N": "1"},
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                held = cast("dict[str, Any]", exc.response).get("Item") or {}
                attempts = attempts_of(from_item(held))
                retry_at = attempts.retry_at_ms if attempts else None
                return LockRefused(retry_at if retry_at and retry_at > now_ms else None)
            raise
        state = from_item(response["Attributes"])
        return Lock(
            channel_id,
            owner,
            int(state["fence"]),
            attempts_of(state),
            candidates=bool(state.get("candidates_waiting")),
        )

    def release_lock(self, lock: Lock) -> bool:
        """Give the lock back if still ours; False when it was already taken over."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=state_key(lock.channel_id),
                UpdateExpression="REMOVE lock_owner, lease_until",
                ConditionExpression="lock_owner = :owner AND fence = :fence",
                ExpressionAttributeValues={
                    ":owner": {"S": lock.owner},
                    ":fence": {"N": str(lock.fence)},
                },
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def record_failure(self, lock: Lock, attempts: Attempts, sweep_since_ms: int) -> bool:
        """Release the lock after a failed round, keeping the failure record and moving the
        channel's place on the sweep's list to `sweep_since_ms`. False when the lock was
        already taken over (then nothing is written)."""
        sets, removes, values = attempts_update(attempts)
        values.update(
            {
                ":owner": {"S": lock.owner},
                ":fence": {"N": str(lock.fence)},
                ":bucket": {"S": keys.SWEEP_BUCKET},
                ":since": {"N": str(sweep_since_ms)},
                ":channel": {"S": lock.channel_id},
            }
        )
        sets += ["sweep_bucket = :bucket", "pending_since = :since", "channel_id = :channel"]
        removes = ["lock_owner", "lease_until", *removes]
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=state_key(lock.channel_id),
                UpdateExpression=f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
                ConditionExpression="lock_owner = :owner AND fence = :fence",
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def reschedule_sweep(self, channel_id: str, since_ms: int) -> None:
        """Move a channel that is on the sweep's list to a later place (it backs off)."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=state_key(channel_id),
                UpdateExpression="SET pending_since = :since",
                ConditionExpression="attribute_exists(sweep_bucket)",
                ExpressionAttributeValues={":since": {"N": str(since_ms)}},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    def mark_pending_since(self, channel_id: str, since_ms: int) -> None:
        """Note that the channel has observations waiting, for the idle sweep."""
        self._client.update_item(
            TableName=self.table_name,
            Key=state_key(channel_id),
            UpdateExpression=(
                "SET sweep_bucket = :bucket, pending_since = if_not_exists(pending_since, :since), "
                "channel_id = :channel"
            ),
            ExpressionAttributeValues={
                ":bucket": {"S": keys.SWEEP_BUCKET},
                ":since": {"N": str(since_ms)},
                ":channel": {"S": channel_id},
            },
        )

    def channels_pending_before(self, before_ms: int, limit: int) -> list[str]:
        """Channels whose oldest waiting observation is older than `before_ms`."""
        return list(islice(self.channels_due(before_ms, limit), limit))

    def channels_due(self, before_ms: int, page_size: int) -> Iterator[str]:
        """Every channel on the sweep's list due before `before_ms`, longest waiting first,
        read page by page as the caller goes on."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": SWEEP_INDEX,
            "KeyConditionExpression": "sweep_bucket = :bucket AND pending_since < :before",
            "ExpressionAttributeValues": {
                ":bucket": {"S": keys.SWEEP_BUCKET},
                ":before": {"N": str(before_ms)},
            },
            "Limit": page_size,
        }
        for item in self._query_all(request):
            channel_id = keys.channel_id_of(item["pk"]["S"])
            if channel_id:
                yield channel_id

    def clear_pending_since(self, channel_id: str) -> None:
        self._client.update_item(
            TableName=self.table_name,
            Key=state_key(channel_id),
            UpdateExpression="REMOVE sweep_bucket, pending_since",
        )

    def legacy_memory(self, channel_id: str) -> str | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key=state_key(channel_id),
            ProjectionExpression="legacy_memory",
        )
        item = response.get("Item")
        return item["legacy_memory"]["S"] if item and "legacy_memory" in item else None

    # Facts --------------------------------------------------------------------------

    def active_facts(self, scope: str, user_id: str, limit: int) -> list[Fact]:
        """A person's most recently updated active facts, newest first."""
        if limit <= 0:
            return []
        response = self._client.query(
            TableName=self.table_name,
            IndexName=ACTIVE_FACTS_INDEX,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.user_pk(scope, user_id)}},
            ScanIndexForward=False,
            Limit=limit,
        )
        return [Fact.model_validate(from_item(i)) for i in response["Items"]]

    def all_facts(self, scope: str, user_id: str) -> list[Fact]:
        """Every fact of a person in a scope, superseded and demoted included (staff
        listings, `/memory show`, consolidation's purge and hot tier)."""
        items = self._query_all(
            {
                "TableName": self.table_name,
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :fact)",
                "ExpressionAttributeValues": {
                    ":pk": {"S": keys.user_pk(scope, user_id)},
                    ":fact": {"S": keys.FACT_PREFIX},
                },
            }
        )
        return [Fact.model_validate(from_item(i)) for i in items]

    def put_fact(self, fact: Fact, history: FactHistory | None = None) -> None:
        """Write a fact as is (manual and operator facts, seeding); with `history`, the
        change is recorded in the same transaction."""
        if history is None:
            self._client.put_item(TableName=self.table_name, Item=to_item(fact_values(fact)))
            return
        put = {"Put": {"Item": to_item(fact_values(fact))}}
        self._transact(self._in_table([put, *history_puts(history)]))

    def fact(self, scope: str, user_id: str, fact_id: str) -> Fact | None:
        """One fact by its address, read strongly consistent."""
        response = self._client.get_item(
            TableName=self.table_name,
            Key=key(keys.user_pk(scope, user_id), keys.fact_sk(fact_id)),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return Fact.model_validate(from_item(item)) if item else None

    def facts_at(
        self, addresses: Iterable[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Fact]:
        """Of these (scope, user id, fact id), the facts stored, read strongly consistent
        (one BatchGetItem per 100)."""
        wanted = [key(keys.user_pk(s, u), keys.fact_sk(f)) for s, u, f in dict.fromkeys(addresses)]
        found: dict[tuple[str, str, str], Fact] = {}
        for item in self._items_at(wanted):
            fact = Fact.model_validate(from_item(item))
            found[(fact.scope, fact.user_id, fact.fact_id)] = fact
        return found

    def put_history(self, entries: Iterable[FactHistory]) -> int:
        """History entries that did not fit a consolidation's transaction (idempotent)."""
        puts = [put for entry in entries for put in history_puts(entry)]
        self._batch_write([{"PutRequest": {"Item": p["Put"]["Item"]}} for p in puts])
        return len(puts)

    def history_of(self, scope: str, fact_id: str, limit: int = 100) -> list[FactHistory]:
        """A fact's history in a scope, oldest first (at most `limit` entries). TTL deletes
        lazily: filter with `ttl_alive`."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.scope_pk(scope)},
                ":prefix": {"S": keys.history_prefix(fact_id)},
            },
            ScanIndexForward=True,
            Limit=limit,
        )
        return [FactHistory.model_validate(from_item(i)) for i in response["Items"]]

    def correct_fact(
        self,
        stored: Fact,
        corrected: Fact | None,
        history: FactHistory,
        *,
        person_hash: str,
        now_ms: int,
        tombstone: Forgotten | None = None,
    ) -> bool:
        """Replace (or, with None, delete) a fact only while it is still exactly what was
        read (`stored`: active, same text), with its history entry, in one transaction that
        also checks that its subject is not being erased (and, for a replacement, has not
        opted out). False when any of that no longer holds: then nothing was written."""
        still_so = {
            "ConditionExpression": "attribute_exists(pk) AND #status = :active AND #text = :old",
            "ExpressionAttributeNames": {"#status": "status", "#text": "text"},
            "ExpressionAttributeValues": {
                ":active": {"S": FactStatus.ACTIVE.value},
                ":old": {"S": stored.text},
            },
        }
        actions: list[dict[str, Any]] = []
        if corrected is None:
            actions.append({"Delete": {"Key": fact_key(stored), **still_so}})
        else:
            actions.append({"Put": {"Item": to_item(fact_values(corrected)), **still_so}})
        actions += history_puts(history)
        if tombstone is not None:
            actions.append({"Put": {"Item": to_item(forgotten_values(tombstone))}})
        actions.append(
            {
                "ConditionCheck": {
                    "Key": key(keys.ERASED_PK, person_hash),
                    "ConditionExpression": "attribute_not_exists(pk) OR expires_at <= :now",
                    "ExpressionAttributeValues": {":now": {"N": str(now_ms // 1000)}},
                }
            }
        )
        if corrected is not None:
            actions.append(
                {
                    "ConditionCheck": {
                        "Key": key(keys.OPT_OUT_PK, person_hash),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        return self._transact_unless_refused(actions)

    def fact_by_id(self, fact_id: str) -> Fact | None:
        """A fact by the short id staff type, in whatever scope it is."""
        item = self._item_by_id(fact_id, keys.ItemKind.FACT)
        return Fact.model_validate(item) if item else None

    def delete_facts(
        self,
        facts: Iterable[Fact],
        history: Sequence[FactHistory] = (),
        tombstones: Sequence[Forgotten] = (),
    ) -> int:
        """Delete these facts; with `history` (and forget `tombstones`), each fact's
        deletion, its entries and its tombstone go in one transaction (a few facts per
        transaction): a forgotten fact is never gone without the tombstone that keeps
        consolidation from bringing it back."""
        facts = list(facts)
        if not history and not tombstones:
            return self._delete_keys([fact_key(f) for f in facts])
        entries: dict[tuple[str, str, str], list[FactHistory]] = {}
        for entry in history:
            entries.setdefault((entry.scope, entry.user_id, entry.fact_id), []).append(entry)
        forgotten = {(t.scope, t.user_id, t.fact_id): t for t in tombstones}
        actions: list[dict[str, Any]] = []
        for fact in facts:
            address = (fact.scope, fact.user_id, fact.fact_id)
            change: list[dict[str, Any]] = [{"Delete": {"Key": fact_key(fact)}}]
            for entry in entries.get(address, []):
                change += history_puts(entry)
            if address in forgotten:
                change.append({"Put": {"Item": to_item(forgotten_values(forgotten[address]))}})
            if len(actions) + len(change) > MAX_TRANSACTION_ACTIONS:
                self._transact(self._in_table(actions))
                actions = []
            actions += change
        if actions:
            self._transact(self._in_table(actions))
        return len(facts)

    # The hot tier (botmemory.memory.hot_tier) -----------------------------------------------

    def record_recall_hits(self, addresses: Iterable[tuple[str, str, str]], now_ms: int) -> int:
        """One more recall hit, at `now_ms`, for each of these (scope, user id, fact id)
        still stored; how many were counted.

        One TransactWriteItems for up to 100 facts rather than an UpdateItem each: the
        answer path pays one round trip whatever the number of facts its block showed (a
        transaction costs twice the write units, on a handful of small updates). Each update
        holds only while the fact exists, so a fact forgotten or erased meanwhile is never
        written back as a stub; a transaction refused for such a fact is sent once more
        without it."""
        changes = [
            [{"Update": _recall_hit(scope, user_id, fact_id, now_ms)}]
            for scope, user_id, fact_id in dict.fromkeys(addresses)
        ]
        return sum(self._apply_changes(changes))

    def retier_facts(
        self,
        demote: Sequence[tuple[Fact, FactHistory]],
        evict: Sequence[tuple[Fact, FactHistory]],
        *,
        person_hash: str,
        now_ms: int,
    ) -> tuple[list[Fact], list[Fact]]:
        """Demote facts out of the hot tier and delete (evict) others, each with its history
        entry, one person's at a time. Each change holds only while its fact is exactly as
        read (status, text, last update, recall hits): a forget, a correction, a
        restatement, a restore or a recall meanwhile wins, and that fact stays as it is.
        Every transaction also checks that the person is not being erased. Returns the
        facts demoted and the facts evicted."""
        changes = [[{"Update": _demote(fact)}, *history_puts(entry)] for fact, entry in demote]
        changes += [
            [{"Delete": {"Key": fact_key(fact), **_as_read(fact)}}, *history_puts(entry)]
            for fact, entry in evict
        ]
        applied = self._apply_changes(changes, guards=[_not_being_erased(person_hash, now_ms)])
        done = [fact for (fact, _), ok in zip([*demote, *evict], applied, strict=True) if ok]
        evicted = {fact.fact_id for fact, _ in evict}
        return (
            [f for f in done if f.fact_id not in evicted],
            [f for f in done if f.fact_id in evicted],
        )

    def restore_fact(
        self, fact: Fact, history: FactHistory, *, person_hash: str, now_ms: int
    ) -> bool:
        """A demoted fact active again, counting as just recalled (so the next round does not
        demote it at once), with its history entry; only while it is still as read and its
        subject is not being erased. False when that no longer holds: nothing was written."""
        read = _as_read(fact)
        restore = {
            "Key": fact_key(fact),
            "UpdateExpression": (
                "SET #status = :active, fact_rank = :rank, last_recall_ms = :now, "
                "recall_hits = :recalled"
            ),
            **read,
            "ExpressionAttributeValues": {
                **read["ExpressionAttributeValues"],
                ":active": {"S": FactStatus.ACTIVE.value},
                ":rank": {"S": keys.fact_rank(fact.updated_ms, fact.fact_id)},
                ":now": {"N": str(now_ms)},
                ":recalled": {"N": str(max(fact.recall_hits, 1))},
            },
        }
        actions = [
            {"Update": restore},
            *history_puts(history),
            _not_being_erased(person_hash, now_ms),
        ]
        return self._transact_unless_refused(actions)

    def _apply_changes(
        self, changes: Sequence[list[dict[str, Any]]], guards: Sequence[dict[str, Any]] = ()
    ) -> list[bool]:
        """Independent changes (each a few actions, conditioned on what was read) in as few
        transactions as hold them, each with `guards` (condition checks). Which changes were
        applied, in order. A transaction refused for some of its changes is sent once more
        without them; a refused guard applies nothing more. Raises when a transaction fails
        otherwise (a conflict with another transaction, twice)."""
        applied = [False] * len(changes)
        room = MAX_TRANSACTION_ACTIONS - len(guards)
        groups: list[list[int]] = [[]]
        for index, change in enumerate(changes):
            if groups[-1] and sum(len(changes[i]) for i in groups[-1]) + len(change) > room:
                groups.append([])
            groups[-1].append(index)
        for group in groups:
            if group and not self._apply_group(changes, group, guards, applied):
                break
        return applied

    def _apply_group(
        self,
        changes: Sequence[list[dict[str, Any]]],
        group: list[int],
        guards: Sequence[dict[str, Any]],
        applied: list[bool],
    ) -> bool:
        """One transaction of `_apply_changes`; False when a guard refused it."""
        for attempt in range(2):
            try:
                self._transact(self._in_table([*guards, *(a for i in group for a in changes[i])]))
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                codes = [
                    str(reason.get("Code"))
                    for reason in cast("dict[str, Any]", exc.response).get("CancellationReasons")
                    or []
                ]
                if "ConditionalCheckFailed" in codes[: len(guards)]:
                    return False
                refused: set[int] = set()
                at = len(guards)
                for index in group:
                    if "ConditionalCheckFailed" in codes[at : at + len(changes[index])]:
                        refused.add(index)
                    at += len(changes[index])
                if not refused and attempt:
                    raise
                group = [i for i in group if i not in refused]
                if not group:
                    return True
                continue
            for index in group:
                applied[index] = True
            return True
        return True

    def _transact_unless_refused(self, actions: list[dict[str, Any]]) -> bool:
        """One transaction of actions conditioned on what was read; False when DynamoDB
        refused it (a condition failed: something changed meanwhile), and nothing was
        written. Any other error raises."""
        try:
            self._transact(self._in_table(actions))
        except ClientError as exc:
            if error_code(exc) == "TransactionCanceledException":
                return False
            raise
        return True

    def _in_table(self, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Transaction actions built without a table name, given this table's."""
        for action in actions:
            for request in action.values():
                request["TableName"] = self.table_name
        return actions

    # Pins and episodes --------------------------------------------------------------

    def put_pin(self, pin: Pin) -> None:
        self._client.put_item(TableName=self.table_name, Item=to_item(pin_values(pin)))

    def pin_by_id(self, pin_id: str) -> Pin | None:
        """A pin by the short id staff type, in whatever scope it is."""
        item = self._item_by_id(pin_id, keys.ItemKind.PIN)
        return Pin.model_validate(item) if item else None

    def delete_pin(self, pin: Pin) -> None:
        self._client.delete_item(TableName=self.table_name, Key=pin_key(pin))

    def pins(self, scope: str, target: str, limit: int) -> list[Pin]:
        """Pins of one target (`global` or a channel id), oldest first."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.scope_pk(scope)},
                ":prefix": {"S": keys.pin_target_prefix(target)},
            },
            Limit=limit,
        )
        return [Pin.model_validate(from_item(i)) for i in response["Items"]]

    def recent_episodes(self, channel_id: str, limit: int) -> list[Episode]:
        """The channel's newest episodes, newest first."""
        items = self._newest_under(keys.channel_pk(channel_id), keys.EPISODE_PREFIX, limit)
        return [Episode.model_validate(i) for i in items]

    # The rolling channel summary (botmemory.consolidation.summary) ---------------------------

    def channel_summary(
        self, channel_id: str, *, consistent: bool = False
    ) -> ChannelSummary | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key=key(keys.channel_pk(channel_id), keys.SUMMARY_SK),
            ConsistentRead=consistent,
        )
        item = response.get("Item")
        return ChannelSummary.model_validate(from_item(item)) if item else None

    def summary_archives(self, channel_id: str, limit: int) -> list[ChannelSummary]:
        """The summaries the channel's rolling summary replaced, newest first."""
        pk = keys.channel_pk(channel_id)
        items = self._newest_under(pk, keys.SUMMARY_ARCHIVE_PREFIX, limit)
        return [ChannelSummary.model_validate(i) for i in items]

    def clear_channel_summary(self, channel_id: str) -> bool:
        """Delete the channel's rolling summary (its archives stay until they expire); the
        next round starts a new one. True when there was one."""
        response = self._client.delete_item(
            TableName=self.table_name,
            Key=key(keys.channel_pk(channel_id), keys.SUMMARY_SK),
            ReturnValues="ALL_OLD",
        )
        return bool(response.get("Attributes"))

    def messages_still_held(self, wanted: dict[str, list[str]]) -> dict[str, list[Observation]]:
        """Per channel, its observations at these sort keys that the table still holds and
        whose message was not deleted, as stored now (redactions included), in the keys'
        order: strongly consistent, one BatchGetItem per 100 keys, as for search passages."""
        as_passages = [
            Passage(
                id=channel_id,
                kind=PassageKind.MESSAGE,
                scope="",
                channel_id=channel_id,
                text="",
                time_ms=0,
                sources=list(dict.fromkeys(sks)),
            )
            for channel_id, sks in wanted.items()
        ]
        held = self.passage_sources(as_passages) if as_passages else {}
        return {
            channel_id: [r for r in records if isinstance(r, Observation)]
            for channel_id, records in held.items()
        }

    # Search sources ---------------------------------------------------------------

    def passage_sources(self, passages: Iterable[Passage]) -> dict[str, list[Record]]:
        """Each passage's source items that the table still holds, in its sources' order,
        read strongly consistent in one BatchGetItem per 100 keys. A message whose delete
        was observed counts as gone, whether or not that delete was consolidated yet."""
        ordered = list(passages)
        wanted: set[tuple[str, str]] = set()
        for passage in ordered:
            wanted.update(source_keys(passage))
            wanted.update(_deletion_keys(passage))
        found: dict[tuple[str, str], Record] = {}
        for item in self._items_at([key(pk, sk) for pk, sk in sorted(wanted)]):
            plain = from_item(item)
            record = _source_record(plain)
            if record is not None:
                found[(plain["pk"], plain["sk"])] = record
        return {
            p.id: [found[k] for k in source_keys(p) if k in found and not _deleted(k, found)]
            for p in ordered
        }

    def quarantined(self, channel_id: str, limit: int = 25) -> list[Quarantine]:
        """The channel's quarantined batches (consumed without facts after failing even
        alone), newest first, for staff. TTL deletes them lazily: filter with `ttl_alive`."""
        items = self._newest_under(keys.channel_pk(channel_id), keys.QUARANTINE_PREFIX, limit)
        return [Quarantine.model_validate(i) for i in items]

    def scope_pins(self, scope: str, limit: int) -> list[Pin]:
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.scope_pk(scope)},
                ":prefix": {"S": keys.PIN_PREFIX},
            },
            Limit=limit,
        )
        return [Pin.model_validate(from_item(i)) for i in response["Items"]]

    # Consolidation commit ------------------------------------------------------------

    def commit_consolidation(self, commit: ConsolidationCommit) -> None:
        """Write facts and the episode, consume the observations and release the lock, atomically.

        Raises CommitRejected when the lock is no longer ours or an observation was
        already consumed: then nothing at all was written.
        """
        try:
            self._transact(commit.actions(self.table_name))
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = [
                r.get("Code", "")
                for r in exc.response.get("CancellationReasons", [])
                if r.get("Code") not in (None, "", "None")
            ]
            raise CommitRejected(reasons) from exc

    # Legacy memory (migration) ------------------------------------------------------
    # The earlier bot's one memory string per channel lives on as the STATE item's
    # `legacy_memory` (recall with memory off) and as one episode marked `legacy`
    # (recall with memory on). See botmemory.ops.migrate.

    def legacy_episodes(self, channel_id: str) -> list[Episode]:
        """The channel's episodes migrated from the earlier bot, oldest first.

        Read strongly consistent, so a migration re-run right after a write sees it.
        """
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :ep)",
            "FilterExpression": "legacy = :yes",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":ep": {"S": keys.EPISODE_PREFIX},
                ":yes": {"BOOL": True},
            },
            "ConsistentRead": True,
        }
        return [Episode.model_validate(from_item(i)) for i in self._query_all(request)]

    def save_legacy_memory(
        self,
        channel_id: str,
        *,
        text: str | None = None,
        episode: Episode | None = None,
        replaced: Sequence[Episode] = (),
        scope: str | None = None,
    ) -> None:
        """Set the legacy memory string, write the legacy episode and delete the legacy
        episodes it replaces, in one transaction, so a failed run leaves the channel as it was.

        Only `legacy_memory` is SET on the STATE item: the lock and the sweep marker
        stay untouched. `scope` is stored on the episode only when known.
        """
        table = self.table_name
        actions: list[dict[str, Any]] = []
        if text is not None:
            actions.append(
                {
                    "Update": {
                        "TableName": table,
                        "Key": state_key(channel_id),
                        "UpdateExpression": "SET legacy_memory = :text",
                        "ExpressionAttributeValues": {":text": {"S": text}},
                    }
                }
            )
        if episode is not None:
            values = episode_values(episode, scope or "")
            if scope is None:
                del values["scope"]
            values["legacy"] = True
            actions.append(
                {
                    "Put": {
                        "TableName": table,
                        "Item": to_item(values),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        stale = [episode_key(old) for old in replaced]
        room = MAX_TRANSACTION_ACTIONS - len(actions)
        actions += [{"Delete": {"TableName": table, "Key": key}} for key in stale[:room]]
        if actions:
            self._transact(actions)
        if stale[room:]:  # only after a pathological pile-up of legacy episodes
            self._delete_keys(stale[room:])


def _recall_hit(scope: str, user_id: str, fact_id: str, now_ms: int) -> dict[str, Any]:
    """One more recall hit of a fact, only while it exists."""
    return {
        "Key": key(keys.user_pk(scope, user_id), keys.fact_sk(fact_id)),
        "UpdateExpression": "SET last_recall_ms = :now ADD recall_hits :one",
        "ConditionExpression": "attribute_exists(pk)",
        "ExpressionAttributeValues": {":now": {"N": str(now_ms)}, ":one": {"N": "1"}},
    }


def _as_read(fact: Fact) -> dict[str, Any]:
    """The condition that a fact is still exactly as read: its status, text, last update
    and recall hits (an item written before recall hits existed has none: zero)."""
    hits = "recall_hits = :hits"
    if fact.recall_hits == 0:
        hits = f"(attribute_not_exists(recall_hits) OR {hits})"
    return {
        "ConditionExpression": (
            "attribute_exists(pk) AND #status = :status AND #text = :text "
            f"AND updated_ms = :updated AND {hits}"
        ),
        "ExpressionAttributeNames": {"#status": "status", "#text": "text"},
        "ExpressionAttributeValues": {
            ":status": {"S": fact.status.value},
            ":text": {"S": fact.text},
            ":updated": {"N": str(fact.updated_ms)},
            ":hits": {"N": str(fact.recall_hits)},
        },
    }


def _demote(fact: Fact) -> dict[str, Any]:
    """Out of the active index (recall never reads it), kept for the person and staff."""
    read = _as_read(fact)
    return {
        "Key": fact_key(fact),
        "UpdateExpression": "SET #status = :demoted REMOVE fact_rank",
        **read,
        "ExpressionAttributeValues": {
            **read["ExpressionAttributeValues"],
            ":demoted": {"S": FactStatus.DEMOTED.value},
        },
    }


def _not_being_erased(person_hash: str, now_ms: int) -> dict[str, Any]:
    """The check that no erasure of the person runs (a marker past its TTL bars no one)."""
    return {
        "ConditionCheck": {
            "Key": key(keys.ERASED_PK, person_hash),
            "ConditionExpression": "attribute_not_exists(pk) OR expires_at <= :now",
            "ExpressionAttributeValues": {":now": {"N": str(now_ms // 1000)}},
        }
    }


def _delete_sk(message_id: str) -> str:
    return keys.observation_sk(snowflake_ms(message_id), ObservationKind.DELETE, message_id)


def _deletion_keys(passage: Passage) -> list[tuple[str, str]]:
    """Where the deletes of a message passage's messages would be recorded."""
    if passage.kind != PassageKind.MESSAGE:
        return []
    pk = keys.channel_pk(passage.channel_id)
    messages = (keys.message_of(sk) for sk in passage.sources)
    return [(pk, _delete_sk(m)) for m in messages if m]


def _deleted(source: tuple[str, str], found: dict[tuple[str, str], Record]) -> bool:
    message = keys.message_of(source[1])
    return bool(message) and (source[0], _delete_sk(message or "")) in found


def _source_record(plain: dict[str, Any]) -> Record | None:
    """A search source item as its record: an observation, a fact, an episode or an
    archived channel summary."""
    kind = keys.kind_of(plain["sk"])
    if kind == keys.ItemKind.OBSERVATION:
        return Observation.model_validate(plain)
    if kind == keys.ItemKind.FACT:
        return Fact.model_validate(plain)
    if kind == keys.ItemKind.EPISODE:
        return Episode.model_validate(plain)
    if kind == keys.ItemKind.SUMMARY_ARCHIVE:
        return ChannelSummary.model_validate(plain)
    return None
