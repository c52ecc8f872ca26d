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
- Each DynamoDB and DynamoDB Streams request runs alone, as DynamoDB isolates a
  transaction: moto's server answers in threads, and a restore would undo a write (and drop
  a stream record) that landed during the refused transaction.
- moto writes every response through a serializer that walks botocore's output shape value
  by value: most of a read's time (a BatchGetItem of 100 items: about 80 ms of 100). A
  read's result is already DynamoDB JSON, so GetItem, BatchGetItem, Query and Scan results
  are written with `json.dumps` instead; a result holding anything else (bytes, None) goes
  the generic way. tests/localrun/test_fastmoto.py checks that clients parse both the same.

Used in process by `make bench`, `make eval` and the tests (tests/conftest.py), and by
`make demo`/`make dev` (the moto server child: `python -m localrun.fastmoto -H 127.0.0.1
-p PORT`).
"""

from __future__ import annotations

import copy
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.core.common_types import TYPE_RESPONSE
from moto.core.responses import ActionContext, ActionResult, BaseResponse
from moto.dynamodb import models as moto_dynamodb
from moto.dynamodb.models.table import StreamShard
from moto.dynamodb.models.table import Table as MotoTable
from moto.dynamodb.responses import DynamoHandler, DynamoResult
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

# Held by every DynamoDB and DynamoDB Streams request, and by each transaction.
REQUESTS = threading.RLock()


class _OneBackupPerTransaction:
    """Stands in for the `copy` module inside moto's DynamoDB backend."""

    def __init__(self) -> None:
        self.backups: dict[int, Any] | None = None

    def deepcopy(self, value: Any, *args: Any) -> Any:
        if self.backups is None or not isinstance(value, MotoTable):
            return copy.deepcopy(value, *args)
        if id(value) not in self.backups:
            # The backup shares the live stream shard (see keep_streams).
            shard = value.stream_shard
            memo: dict[int, Any] = {} if shard is None else {id(shard): shard}
            self.backups[id(value)] = copy.deepcopy(value, memo)
        return self.backups[id(value)]


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
JSON_CONTENT_TYPE = "application/x-amz-json-1.0"  # DynamoDB's protocol, jsonVersion 1.0


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


@contextmanager
def plain_json_reads() -> Iterator[None]:
    """Read results written with json.dumps (see the module's docstring)."""
    DynamoResult.execute_result = _plain_json_result  # type: ignore[method-assign]
    try:
        yield
    finally:
        DynamoResult.execute_result = MOTO_EXECUTE_RESULT  # type: ignore[method-assign]


@contextmanager
def fast_dynamodb() -> Iterator[None]:
    """Both speed-ups (one backup per transaction, plain JSON reads), with the stream kept
    through a refused transaction and each request alone."""
    with one_request_at_a_time(), one_backup_per_transaction(), plain_json_reads():
        yield


@contextmanager
def one_request_at_a_time() -> Iterator[None]:
    """Every DynamoDB and DynamoDB Streams request under REQUESTS."""
    handlers: tuple[type[BaseResponse], ...] = (DynamoHandler, DynamoDBStreamsHandler)
    originals = [handler.__dict__.get("call_action") for handler in handlers]

    def alone(call_action: Any) -> Any:
        def call_alone(self: Any) -> TYPE_RESPONSE:
            with REQUESTS:
                return call_action(self)  # type: ignore[no-any-return]

        return call_alone

    for handler in handlers:
        handler.call_action = alone(handler.call_action)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for handler, original in zip(handlers, originals, strict=True):
            if original is None:
                del handler.call_action  # inherited: moto's own again
            else:
                handler.call_action = original  # type: ignore[method-assign]


@contextmanager
def one_backup_per_transaction() -> Iterator[None]:
    shim = _OneBackupPerTransaction()
    backend = moto_dynamodb.DynamoDBBackend
    original = backend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        with REQUESTS:
            before = stream_lengths(self)
            shim.backups = {}
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
