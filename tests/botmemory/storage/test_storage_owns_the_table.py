"""One owner for the table: every DynamoDB call of the core is in botmemory/storage/, behind
`MemoryRepository`. A module elsewhere that calls a DynamoDB operation on a client, asks a
paginator or waiter of one, or creates a DynamoDB client or resource fails this test (the
relay is its own package, with its own small store, and is not scanned)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import botocore.session
from botocore import xform_name

from tests.support.layer import services_created

ROOT = Path(__file__).resolve().parents[3]
CORE = ROOT / "layers" / "core" / "botmemory"
STORAGE = CORE / "storage"


@cache
def _operations(service: str) -> frozenset[str]:
    model = botocore.session.get_session().get_service_model(service)
    return frozenset(xform_name(name) for name in model.operation_names)


@cache
def dynamodb_operations() -> frozenset[str]:
    """The DynamoDB client's methods that no other client the code creates has (so
    `s3vectors.tag_resource(...)` is not taken for a table call, `table.put_item` is)."""
    others = services_created() - {"dynamodb"}
    shared: set[str] = set().union(*(_operations(service) for service in others))
    return _operations("dynamodb") - shared


def table_calls(source: str) -> list[str]:
    """Each call in `source` that reaches DynamoDB, as `line: code`."""
    found = []
    operations = dynamodb_operations()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        first = node.args[0] if node.args else None
        literal = first.value if isinstance(first, ast.Constant) else None
        if (
            name in operations
            or (name in {"get_paginator", "get_waiter"} and literal in _waits_and_pages())
            or (name in {"client", "resource"} and literal == "dynamodb")
            or name == "Table"
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


@cache
def _waits_and_pages() -> frozenset[str]:
    session = botocore.session.get_session()
    client = session.create_client("dynamodb", region_name="us-east-1")
    waiters = client.waiter_names
    pages = [op for op in _operations("dynamodb") if client.can_paginate(op)]
    return frozenset([*waiters, *pages])


def outside_storage() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py") if STORAGE not in p.parents)


def test_no_module_outside_storage_calls_the_table() -> None:
    callers = {
        str(path.relative_to(CORE)): calls
        for path in outside_storage()
        if (calls := table_calls(path.read_text(encoding="utf-8")))
    }

    assert callers == {}, f"DynamoDB calls outside botmemory/storage/: {callers}"


def test_storage_is_where_the_table_is_called() -> None:
    """The scan sees the calls where they are: storage/ has them (else it would see nothing)."""
    inside = [
        call for path in STORAGE.rglob("*.py") for call in table_calls(path.read_text("utf-8"))
    ]
    assert len(inside) > 50


# What the rule catches and what it leaves: the rate counters and the fact-channels migration
# as they were before storage/ took their calls, beside calls of other clients.
CAUGHT = {
    "a counter's UpdateItem": "response = self._client.update_item(TableName=t, Key=k)",
    "a migration's Scan": "page = repository.client.scan(**request)",
    "a Query through the repository's client": "repository.client.query(TableName=t)",
    "a transaction": "self.client.transact_write_items(TransactItems=[])",
    "a paginator": "client.get_paginator('query').paginate(TableName=t)",
    "a new client": "dynamodb = boto3.client('dynamodb')",
    "a resource's table": "boto3.resource('dynamodb').Table('memory')",
}
LEFT = {
    "S3 Vectors": "self._client.query_vectors(vectorBucketName=b, indexName=i)",
    "S3": "self._client.put_object(Bucket=b, Key=k, Body=b'')",
    "SQS": "self._sqs().send_message_batch(QueueUrl=u, Entries=[])",
    "the repository's own methods": "repository.put_fact(fact); repository.user_items_page(u, 10)",
    "another client": "boto3.client('s3vectors')",
}


def test_the_rule_catches_each_kind_of_table_call() -> None:
    for what, source in CAUGHT.items():
        assert table_calls(source), what


def test_the_rule_leaves_other_clients_and_the_repository_alone() -> None:
    for what, source in LEFT.items():
        assert table_calls(source) == [], what
