"""moto's DynamoDB, made fast enough for transactions on a table of thousands of items.

moto backs a table up before a TransactWriteItems by deep-copying the whole table once
per action (32 copies for a 30-action commit), so a consolidation commit on a busy local
table takes seconds. The copies are identical; within one transaction the first is
reused. Behaviour is unchanged: a failed transaction still restores that one backup.

Used by `make bench` (in process) and by `make demo`/`make dev` (the moto server child:
`python -m localrun.fastmoto -H 127.0.0.1 -p PORT`).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.dynamodb import models as moto_dynamodb
from moto.dynamodb.models.table import Table as MotoTable


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

    with one_backup_per_transaction():
        moto_server(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
