"""moto's DynamoDB, made fast enough for transactions on a table of thousands of items,
and for reads that return hundreds of them.

- moto backs a table up before a TransactWriteItems by deep-copying the whole table once
  per action (32 copies for a 30-action commit), so a consolidation commit on a busy local
  table takes seconds. The copies are identical; within one transaction the first is
  reused. Behaviour is unchanged: a failed transaction still restores that one backup.
- moto writes every response through a serializer that walks botocore's output shape value
  by value: most of a read's time (a BatchGetItem of 100 items: about 80 ms of 100). A
  read's result is already DynamoDB JSON, so GetItem, BatchGetItem, Query and Scan results
  are written with `json.dumps` instead; a result holding anything else (bytes, None) goes
  the generic way. tests/test_fastmoto.py checks that clients parse both the same.

Used in process by `make bench`, `make eval` and the tests (tests/conftest.py), and by
`make demo`/`make dev` (the moto server child: `python -m localrun.fastmoto -H 127.0.0.1
-p PORT`).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.core.common_types import TYPE_RESPONSE
from moto.core.responses import ActionContext, ActionResult
from moto.dynamodb import models as moto_dynamodb
from moto.dynamodb.models.table import Table as MotoTable
from moto.dynamodb.responses import DynamoResult


class _OneBackupPerTransaction:
    """Stands in for the `copy` module inside moto's DynamoDB backend."""

    def __init__(self) -> None:
        self.backups: dict[int, Any] | None = None

    def deepcopy(self, value: Any, *args: Any) -> Any:
        if self.backups is None or not isinstance(value, MotoTable):
            return copy.deepcopy(value, *args)
        if id(value) not in self.backups:
            self.backups[id(value)] = copy.deepcopy(value)
        return self.backups[id(value)]


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
    """Both speed-ups: one backup per transaction, plain JSON reads."""
    with one_backup_per_transaction(), plain_json_reads():
        yield


@contextmanager
def one_backup_per_transaction() -> Iterator[None]:
    shim = _OneBackupPerTransaction()
    backend = moto_dynamodb.DynamoDBBackend
    original = backend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        shim.backups = {}
        try:
            original(self, transact_items)
        finally:
            shim.backups = None

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
