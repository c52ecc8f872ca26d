"""What the table keeps of facts: the facts themselves, their history, their evidence, the
recall hits and tiers of the hot tier (botmemory.memory.hot_tier), staff corrections, and the
pins staff set. Part of `MemoryRepository` (see repository.py), which callers use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from botocore.exceptions import ClientError

from botmemory.records import Fact, FactHistory, FactStatus, Forgotten, Pin
from botmemory.storage import keys
from botmemory.storage.commit import MAX_TRANSACTION_ACTIONS
from botmemory.storage.items import (
    attribute,
    fact_key,
    fact_values,
    forgotten_values,
    from_item,
    history_puts,
    key,
    pin_key,
    pin_values,
    to_item,
)
from botmemory.storage.schema import ACTIVE_FACTS_INDEX
from botmemory.storage.table import Table, error_code


class FactStore(Table):
    # Facts --------------------------------------------------------------------------

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
        actions.append(_not_being_erased(person_hash, now_ms))
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

    # Pins ---------------------------------------------------------------------------

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
