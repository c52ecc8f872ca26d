"""moto's DynamoDB, made fast enough for transactions on a table of thousands of items,
and for reads that return hundreds of them.

- moto backs a table up before a TransactWriteItems by deep-copying the whole table once
  per action (32 copies for a 30-action commit), so a consolidation commit on a busy local
  table takes seconds. The copies are identical; within one transaction the first is
  reused. A failed transaction still restores that one backup.
- A refused transaction keeps the table's stream. moto restores a copy of the table, whose
  copied stream shard is not the one open shard iterators read: every reader (make dev's
  event sources) would go on reading a dead shard, and it would hold the records of the
  refused writes. The backup shares the live shard instead (the stream's history is not
  copied either), the restored table writes to it, and the refused writes' records are
  dropped from its end: no reader has seen them, as the next point guarantees.
- That one backup copies the table's item maps and deep-copies only the items the
  transaction names by key (moto changes an item in place only through its key; a put
  replaces the item object): a commit on a table of 10,000 items copies a few dozen, not all.
- moto answers every Query by sorting the whole table (DynamoType comparisons, each casting
  both values) and then keeping the partition asked for. A Query of a partition (the table's,
  or an index whose hash key is the table's) reads that partition alone, in the same order,
  and every sort compares plain values; a Query of the table with a sort key condition
  passes moto only the items that meet it (moto sizes every item it walks past): a round's
  reads on a channel of 10,000 observations read neither the table's other items nor, for
  its episodes, the observations.
- A Query of an index keyed on another attribute (by_user: a person's id, then the sort key),
  page by page, had moto sort every item of the index and walk past the pages already read,
  per page: 1,000 pages of a person's 100,000 items took hours. Such a Query, in index order
  with string keys, passes moto the items of the hash value asked for, in moto's order (the
  index's keys, then the table's), after the ExclusiveStartKey (the ones moto would walk
  past); and, when nothing but the page's size decides which items it keeps (no sort key
  condition, no legacy filter), only the `Limit + 1` first of them: moto keeps the first
  `Limit` and names the last of them LastEvaluatedKey on meeting the next, as it does.
- moto builds an item attribute by attribute, and sizes the whole item again before each
  one (the 400 KB limit): quadratic in the attributes, most of a bulk write's time. The item
  is sized once, attribute by attribute as it grows, and refused at the same attribute.
- moto checks an update expression's clause counts and overlapping paths at every
  UpdateExpression node of its tree (one per clause, nested), each time walking the whole
  subtree below: quadratic in the clauses. The root's walk sees every clause, so the two
  checks run at the root alone and refuse what moto refuses.
- Each DynamoDB and DynamoDB Streams request runs alone, as DynamoDB isolates a
  transaction: moto's server answers in threads, and a restore would undo a write (and drop
  a stream record) that landed during the refused transaction.
- moto writes every response through a serializer that walks botocore's output shape value
  by value: most of a read's time (a BatchGetItem of 100 items: about 80 ms of 100). A
  read's result is already DynamoDB JSON, so GetItem, BatchGetItem, Query and Scan results
  are written with `json.dumps` instead; a result holding anything else (bytes, None) goes
  the generic way. So are DynamoDB Streams' GetRecords results (the records' images, most
  of a stream-driven test's serializing), once each record's creation time is written as
  the JSON protocol's epoch seconds. tests/localrun/test_fastmoto.py checks that clients
  parse both the same.

Used in process by `make bench`, `make eval` and the tests (tests/conftest.py), and by
`make demo`/`make dev` (the moto server child: `python -m localrun.fastmoto -H 127.0.0.1
-p PORT`).
"""

from __future__ import annotations

import bisect
import calendar
import copy
import json
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from moto.core.common_types import TYPE_RESPONSE
from moto.core.responses import ActionContext, ActionResult, BaseResponse
from moto.dynamodb import models as moto_dynamodb
from moto.dynamodb.exceptions import ItemSizeTooLarge
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.table import StreamShard
from moto.dynamodb.models.table import Table as MotoTable
from moto.dynamodb.models.utilities import bytesize
from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]  # untyped module
    DepthFirstTraverser,
    UpdateExpression,
)
from moto.dynamodb.parsing.validators import ActionCountValidator, OverlappingPathsValidator
from moto.dynamodb.responses import DynamoHandler, DynamoResult
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

# Held by every DynamoDB and DynamoDB Streams request, and by each transaction.
REQUESTS = threading.RLock()


class _OneBackupPerTransaction:
    """Stands in for the `copy` module inside moto's DynamoDB backend."""

    def __init__(self) -> None:
        self.backups: dict[int, Any] | None = None
        self.touched: dict[str, list[dict[str, Any]]] = {}  # table name -> keys named

    def deepcopy(self, value: Any, *args: Any) -> Any:
        if self.backups is None or not isinstance(value, MotoTable):
            return copy.deepcopy(value, *args)
        if id(value) not in self.backups:
            self.backups[id(value)] = _backup(value, self.touched.get(value.name, []))
        return self.backups[id(value)]


def _backup(table: MotoTable, touched: list[dict[str, Any]]) -> MotoTable:
    """The table as it is, for a transaction's rollback: its item maps copied, the items the
    transaction names deep-copied, the others (which it cannot change) shared. The backup
    shares the live stream shard (see keep_streams)."""
    backup = copy.copy(table)
    range_attr = table.range_key_attr
    ranged = range_attr is not None
    backup.items = defaultdict(dict, {h: dict(r) if ranged else r for h, r in table.items.items()})
    for named in touched:
        try:
            hash_value = DynamoType(named[table.hash_key_attr])
            range_value = DynamoType(named[range_attr]) if range_attr else None
        except (KeyError, TypeError, AttributeError):
            continue  # moto refuses the action itself; nothing of it is written
        if hash_value not in table.items:
            continue
        if range_value is None:
            backup.items[hash_value] = copy.deepcopy(table.items[hash_value])
        elif range_value in table.items[hash_value]:
            original = table.items[hash_value][range_value]
            backup.items[hash_value][range_value] = copy.deepcopy(original)
    return backup


def _named_keys(backend: Any, transact_items: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The keys a transaction's actions name, by table."""
    named: dict[str, list[Any]] = {}
    for action in transact_items:
        op = next(iter(action.values()), None)
        table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
        if table is None:
            continue
        assert isinstance(op, dict)  # nosec B101 # narrowed above
        key = op.get("Key") or {
            name: op.get("Item", {}).get(name)
            for name in (table.hash_key_attr, table.range_key_attr)
            if name and name in op.get("Item", {})
        }
        named.setdefault(table.name, []).append(key)
    return named


def _sort_key(item: Any) -> Any:
    """moto's order of a table's items (DynamoType compares its cast values), as plain values."""
    if item.range_key:
        return (item.hash_key.cast_value, item.range_key.cast_value)
    return item.hash_key.cast_value


def _every_item(table: MotoTable) -> list[Any]:
    items: Any = table.items  # hash key -> item, or -> range key -> item
    return [i for h in items.values() for i in (h.values() if table.range_key_attr else [h])]


def _all_items(self: MotoTable) -> list[Any]:
    index_page = self.__dict__.get("_fast_index_page")
    paged = _index_page_items(self, index_page) if index_page is not None else None
    if paged is not None:
        return paged
    partition = self.__dict__.get("_fast_partition")
    chosen: list[Any]
    if partition is None:
        chosen = _every_item(self)
    elif partition not in self.items:
        chosen = []
    else:
        found = self.items[partition]
        chosen = list(found.values()) if self.range_key_attr else [found]
    sought = self.__dict__.get("_fast_range")
    if sought is not None:  # moto's own comparison, before it sizes every item it passes
        chosen = [i for i in chosen if i.range_key is not None and i.range_key.compare(*sought)]
    return sorted(chosen, key=_sort_key)


@dataclass(frozen=True)
class _IndexPage:
    """A Query of an index with one hash and one range key, asked in its order."""

    hash_attr: str
    hash_value: str
    sort_attrs: tuple[str, ...]  # moto's order: the index's hash and range keys, the table's
    start: tuple[str, ...] | None  # the ExclusiveStartKey's values, in that order
    keep: int | None  # Limit + 1, when the page's size alone decides what it keeps


def _index_page_items(table: MotoTable, page: _IndexPage) -> list[Any] | None:
    """The items moto reads for this page, in its order; None when a key is not a string
    (moto's own way then)."""
    chosen: list[tuple[tuple[str, ...], Any]] = []
    for item in _every_item(table):
        value = item.attrs.get(page.hash_attr)
        if value is None or value.type != "S" or value.value != page.hash_value:
            continue
        values = [item.attrs.get(a) for a in page.sort_attrs]
        if any(v is None for v in values):
            continue  # not in the index (moto leaves it out too)
        if any(v.type != "S" for v in values):
            return None
        chosen.append((tuple(v.value for v in values), item))
    chosen.sort(key=lambda pair: pair[0])
    if page.start is not None:
        chosen = chosen[bisect.bisect_right(chosen, page.start, key=lambda pair: pair[0]) :]
    if page.keep is not None:
        chosen = chosen[: page.keep]
    return [item for _, item in chosen]


def _index_page(
    table: MotoTable, index_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _IndexPage | None:
    """The Query as an `_IndexPage`, when it is one: the index's hash key asked for alone, a
    string, in index order, from a start key of strings."""
    range_comparison, _, limit, start, forward = (list(args) + [None] * 5)[:5]
    conditions = kwargs.get("hash_key_conditions") or []
    index = next((i for i in table.all_indexes() if i.name == index_name), None)
    if index is None or forward is False or len(conditions) != 1:
        return None
    hashes = [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"]
    ranges = [k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"]
    name, value = conditions[0]
    if hashes != [name] or len(ranges) != 1 or value.type != "S":
        return None
    sort_attrs = tuple(
        table._generate_attr_to_sort_by(
            [name, table.hash_key_attr], [*ranges, table.range_key_attr]
        )
    )
    start_values = None
    if start:
        if not all(isinstance(start.get(a), dict) and "S" in start[a] for a in sort_attrs):
            return None
        start_values = tuple(str(start[a]["S"]) for a in sort_attrs)
    plain = not range_comparison and not kwargs.get("range_key_conditions")
    plain = plain and not _legacy_filters(kwargs)
    keep = limit + 1 if plain and isinstance(limit, int) else None
    return _IndexPage(name, value.value, sort_attrs, start_values, keep)


def _legacy_filters(kwargs: dict[str, Any]) -> bool:
    """Whether moto's Query was given QueryFilter conditions (its `filter_kwargs`)."""
    named = {"hash_key_conditions", "range_key_conditions", "consistent_read", "index_name"}
    named |= {"filter_expression", "projection_expressions", "exclusive_start_key"}
    return any(k not in named for k in kwargs)


MOTO_QUERY = MotoTable.query
MOTO_ALL_ITEMS = MotoTable.all_items
_INDEX_NAME_ARG = 6  # Table.query(hash_key, range_comparison, ..., index_name, ...)


def _query(self: MotoTable, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
    """moto's Query, reading only the partition asked for when its hash key is the table's,
    or only the page asked for of an index keyed on another attribute (`_IndexPage`)."""
    index_name = args[_INDEX_NAME_ARG] if len(args) > _INDEX_NAME_ARG else kwargs.get("index_name")
    conditions = kwargs.get("hash_key_conditions") or []
    partition = None
    if not index_name:
        partition = hash_key
    elif len(conditions) == 1 and conditions[0][0] == self.hash_key_attr:
        index = next((i for i in self.all_indexes() if i.name == index_name), None)
        hashes = (
            [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"] if index else []
        )
        if hashes == [self.hash_key_attr]:
            partition = conditions[0][1]
    else:
        self.__dict__["_fast_index_page"] = _index_page(self, index_name, args, kwargs)
    self.__dict__["_fast_partition"] = partition
    if partition is not None and not index_name and args and args[0]:
        self.__dict__["_fast_range"] = (args[0], args[1])  # range_comparison, range_objs
    try:
        return MOTO_QUERY(self, hash_key, *args, **kwargs)
    finally:
        self.__dict__.pop("_fast_partition", None)
        self.__dict__.pop("_fast_range", None)
        self.__dict__.pop("_fast_index_page", None)


@contextmanager
def partition_queries() -> Iterator[None]:
    """Queries that read their partition alone (see the module's docstring)."""
    MotoTable.query = _query  # type: ignore[method-assign]
    MotoTable.all_items = _all_items  # type: ignore[method-assign]
    try:
        yield
    finally:
        MotoTable.query = MOTO_QUERY  # type: ignore[method-assign]
        MotoTable.all_items = MOTO_ALL_ITEMS  # type: ignore[method-assign]


def stream_lengths(backend: Any) -> dict[str, tuple[MotoTable, StreamShard, int]]:
    """Each table with a stream, its shard, and how many records the shard holds now."""
    return {
        name: (table, table.stream_shard, len(table.stream_shard.items))
        for name, table in backend.tables.items()
        if table.stream_shard is not None
    }


def keep_streams(backend: Any, before: dict[str, tuple[MotoTable, StreamShard, int]]) -> None:
    """After a transaction: a table moto restored from its backup writes to the stream shard
    every iterator reads, which ends where it ended before the transaction (the refused
    writes never happened)."""
    for name, (table, shard, length) in before.items():
        restored = backend.tables.get(name)
        if restored is None or restored is table:
            continue  # committed (or the table is gone): its records stand
        restored.stream_shard = shard
        shard.table = restored
        del shard.items[length:]


# Reads whose results are plain DynamoDB JSON; writes and control-plane results (dates,
# nested descriptions) keep moto's serializer.
PLAIN_JSON_READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan"})
JSON_CONTENT_TYPE = "application/x-amz-json-1.0"  # DynamoDB and its Streams: jsonVersion 1.0


def _plain(value: Any) -> bool:
    """Whether json.dumps writes this exactly as the generic serializer would: dicts,
    lists, strings, numbers and booleans, with no None (which the serializer leaves out)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return isinstance(value, str | int | float | bool)


# moto's own: the fallback, and what tests compare the plain path with.
MOTO_EXECUTE_RESULT = DynamoResult.execute_result


def _plain_json_result(self: ActionResult, context: ActionContext) -> TYPE_RESPONSE:
    if context.operation_model.name in PLAIN_JSON_READS and _plain(self.result):
        return 200, {"Content-Type": JSON_CONTENT_TYPE}, json.dumps(self.result)
    return MOTO_EXECUTE_RESULT(self, context)


def _epoch_seconds(moment: datetime) -> float:
    """A naive UTC datetime as the JSON protocol writes a timestamp: epoch seconds, to the
    millisecond (what moto's serializer keeps of it)."""
    return calendar.timegm(moment.utctimetuple()) + (moment.microsecond // 1000) / 1000


def _with_epoch_time(record: dict[str, Any]) -> dict[str, Any]:
    change = record.get("dynamodb")
    created = change.get("ApproximateCreationDateTime") if isinstance(change, dict) else None
    if not isinstance(change, dict) or not isinstance(created, datetime):
        return record
    return record | {"dynamodb": change | {"ApproximateCreationDateTime": _epoch_seconds(created)}}


class _PlainStreamRecords(ActionResult):
    """GetRecords' result ({"NextShardIterator", "Records"}), written with json.dumps when
    its records are plain once their creation times are numbers; else moto's way."""

    def execute_result(self, context: ActionContext) -> TYPE_RESPONSE:
        result = self.result
        if isinstance(result, dict) and isinstance(result.get("Records"), list):
            records = [_with_epoch_time(r) if isinstance(r, dict) else r for r in result["Records"]]
            plain = result | {"Records": records}
            if _plain(plain):
                return 200, {"Content-Type": JSON_CONTENT_TYPE}, json.dumps(plain)
        return super().execute_result(context)


MOTO_GET_RECORDS = DynamoDBStreamsHandler.get_records


def _plain_get_records(self: DynamoDBStreamsHandler) -> ActionResult:
    return _PlainStreamRecords(MOTO_GET_RECORDS(self).result)


@contextmanager
def plain_json_reads() -> Iterator[None]:
    """Read results written with json.dumps (see the module's docstring)."""
    DynamoResult.execute_result = _plain_json_result  # type: ignore[method-assign]
    DynamoDBStreamsHandler.get_records = _plain_get_records  # type: ignore[method-assign]
    try:
        yield
    finally:
        DynamoResult.execute_result = MOTO_EXECUTE_RESULT  # type: ignore[method-assign]
        DynamoDBStreamsHandler.get_records = MOTO_GET_RECORDS  # type: ignore[method-assign]


# moto's own limit in LimitedSizeDict: between the service's 409 and 410 KB, as moto measured.
MOTO_ITEM_SIZE_LIMIT = 405_000
MOTO_ITEM_INIT = Item.__init__


def _item_init(self: Item, hash_key: DynamoType, range_key: DynamoType | None, attrs: Any) -> None:
    """moto's Item.__init__ with the running size: each attribute's size is added as it
    comes, not the whole item's summed again, so an item is refused at the same attribute."""
    self.hash_key = hash_key
    self.range_key = range_key
    self.attrs = LimitedSizeDict()
    size = 0
    for key, value in attrs.items():
        typed = DynamoType(value)
        size += bytesize(key) + typed.size()
        if size > MOTO_ITEM_SIZE_LIMIT:
            raise ItemSizeTooLarge
        dict.__setitem__(self.attrs, key, typed)


@contextmanager
def items_sized_once() -> Iterator[None]:
    """Items built with their size summed once (see the module's docstring)."""
    Item.__init__ = _item_init  # type: ignore[method-assign]
    try:
        yield
    finally:
        Item.__init__ = MOTO_ITEM_INIT  # type: ignore[method-assign]


# The two whole-expression checks (see the module's docstring), each moto's own traverse.
WHOLE_EXPRESSION_CHECKS = (ActionCountValidator, OverlappingPathsValidator)


def _at_the_root(self: Any, node: Any) -> Any:
    """A whole-expression check run once, on the expression's root."""
    if isinstance(node, UpdateExpression):
        return self.process(node)
    return DepthFirstTraverser.traverse(self, node)


@contextmanager
def update_expressions_checked_once() -> Iterator[None]:
    """The clause count and overlapping path checks at the expression's root alone."""
    with _replaced("traverse", dict.fromkeys(WHOLE_EXPRESSION_CHECKS, _at_the_root)):
        yield


@contextmanager
def _replaced(name: str, values: dict[type[Any], Any]) -> Iterator[None]:
    """Each class's attribute `name` set to its value, then restored: deleted where the class
    inherited it (moto's own again), so nested uses unwind in order."""
    originals = {owner: owner.__dict__.get(name) for owner in values}
    for owner, value in values.items():
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, original in originals.items():
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


@contextmanager
def fast_dynamodb() -> Iterator[None]:
    """The speed-ups (one backup per transaction, plain JSON reads, partition queries, items
    sized once, update expressions checked once), with the stream kept through a refused
    transaction and each request alone."""
    with (
        one_request_at_a_time(),
        one_backup_per_transaction(),
        plain_json_reads(),
        partition_queries(),
        items_sized_once(),
        update_expressions_checked_once(),
    ):
        yield


@contextmanager
def one_request_at_a_time() -> Iterator[None]:
    """Every DynamoDB and DynamoDB Streams request under REQUESTS."""

    def alone(call_action: Any) -> Any:
        def call_alone(self: Any) -> TYPE_RESPONSE:
            with REQUESTS:
                return call_action(self)  # type: ignore[no-any-return]

        return call_alone

    handlers: tuple[type[BaseResponse], ...] = (DynamoHandler, DynamoDBStreamsHandler)
    with _replaced("call_action", {h: alone(h.call_action) for h in handlers}):
        yield


@contextmanager
def one_backup_per_transaction() -> Iterator[None]:
    shim = _OneBackupPerTransaction()
    backend = moto_dynamodb.DynamoDBBackend
    original = backend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        with REQUESTS:
            before = stream_lengths(self)
            shim.backups, shim.touched = {}, _named_keys(self, transact_items)
            try:
                original(self, transact_items)
            finally:
                shim.backups = None
                keep_streams(self, before)

    moto_dynamodb.copy = shim  # type: ignore[attr-defined,assignment]
    backend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    try:
        yield
    finally:
        moto_dynamodb.copy = copy  # type: ignore[attr-defined]
        backend.transact_write_items = original  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    from moto.server import main as moto_server

    with fast_dynamodb():
        moto_server(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
