"""The one table's key schema and its sparse secondary indexes.

An item appears in an index only while it carries that index's key attributes, so
every index holds just the items a flow needs:

- `pending`:      observations not yet consolidated (pk, pending_sk). Consolidation
                  removes `pending_sk` in the same transaction that writes the facts, so
                  an observation is consumed exactly once whatever order it arrived in.
- `active_facts`: a person's active facts, most recently updated last (pk, fact_rank).
                  Superseded facts drop out; recall reads the newest few, never all.
- `sweep`:        channel states with observations waiting (sweep_bucket, pending_since).
- `by_user`:      every item that holds a person's id, for erasure (user_id, sk).
- `by_item_id`:   facts and pins by the short id staff type (item_id).
"""

from __future__ import annotations

from typing import Any

PENDING_INDEX = "pending"
ACTIVE_FACTS_INDEX = "active_facts"
SWEEP_INDEX = "sweep"
BY_USER_INDEX = "by_user"
BY_ITEM_ID_INDEX = "by_item_id"
TTL_ATTRIBUTE = "expires_at"


def _index(name: str, hash_key: str, range_key: str | None, projection: str) -> dict[str, Any]:
    schema = [{"AttributeName": hash_key, "KeyType": "HASH"}]
    if range_key:
        schema.append({"AttributeName": range_key, "KeyType": "RANGE"})
    return {"IndexName": name, "KeySchema": schema, "Projection": {"ProjectionType": projection}}


def table_definition(table_name: str) -> dict[str, Any]:
    """CreateTable arguments; template.yaml declares the same table."""
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "pending_sk", "AttributeType": "S"},
            {"AttributeName": "fact_rank", "AttributeType": "S"},
            {"AttributeName": "sweep_bucket", "AttributeType": "S"},
            {"AttributeName": "pending_since", "AttributeType": "N"},
            {"AttributeName": "user_id", "AttributeType": "S"},
            {"AttributeName": "item_id", "AttributeType": "S"},
        ],
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "GlobalSecondaryIndexes": [
            _index(PENDING_INDEX, "pk", "pending_sk", "ALL"),
            _index(ACTIVE_FACTS_INDEX, "pk", "fact_rank", "ALL"),
            _index(SWEEP_INDEX, "sweep_bucket", "pending_since", "KEYS_ONLY"),
            _index(BY_USER_INDEX, "user_id", "sk", "KEYS_ONLY"),
            _index(BY_ITEM_ID_INDEX, "item_id", None, "KEYS_ONLY"),
        ],
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    }


def create_table(client: Any, table_name: str) -> None:
    """Create the table and turn on TTL (used by tests, the demo and the bench)."""
    client.create_table(**table_definition(table_name))
    client.get_waiter("table_exists").wait(TableName=table_name)
    client.update_time_to_live(
        TableName=table_name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    )
