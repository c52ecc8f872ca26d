"""What the one-off migration of facts stored before facts kept their channels reads and writes
(botmemory.ops.fact_channels): the facts without `learned_in`, the channel of an observation
they cite, and the channels given to a fact. Part of `MemoryRepository` (see repository.py),
which callers use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from botmemory.storage import keys
from botmemory.storage.items import attribute, from_item, key
from botmemory.storage.schema import BY_USER_INDEX
from botmemory.storage.table import Table


class FactChannelStore(Table):
    def facts_without_channels(self) -> Iterator[dict[str, Any]]:
        """Every fact with no `learned_in`, as plain values (key, scope, the person, the
        observations it cites and whose they are): a scan of the table, page by page."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "FilterExpression": "begins_with(sk, :fact) AND attribute_not_exists(learned_in)",
            "ExpressionAttributeValues": {":fact": {"S": keys.FACT_PREFIX}},
            "ProjectionExpression": "pk, sk, #scope, user_id, provenance, evidence_user_ids",
            "ExpressionAttributeNames": {"#scope": "scope"},
        }
        while True:
            page = self._client.scan(**request)
            yield from (from_item(item) for item in page["Items"])
            if "LastEvaluatedKey" not in page:
                return
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def channel_of_observation(self, observation_sk: str, people: Iterable[str]) -> str | None:
        """The channel an observation was said in, its item found under one of `people` (the
        by_user index); None once it has expired."""
        for person in people:
            found = self._client.query(
                TableName=self.table_name,
                IndexName=BY_USER_INDEX,
                KeyConditionExpression="user_id = :user AND sk = :sk",
                ExpressionAttributeValues={":user": {"S": person}, ":sk": {"S": observation_sk}},
            )["Items"]
            for item in found:
                channel = keys.channel_id_of(item["pk"]["S"])
                if channel:
                    return channel
        return None

    def add_fact_channels(
        self, pk: str, sk: str, channels: Iterable[str], public: Iterable[str]
    ) -> None:
        """Add these channels (and those of them that are public) to a fact that still exists;
        adding to a set twice changes nothing."""
        values: dict[str, set[str]] = {":learned_in": set(channels)}
        added = ["learned_in :learned_in"]
        public_channels = set(public)
        if public_channels:
            values[":learned_in_public"] = public_channels
            added.append("learned_in_public :learned_in_public")
        self._client.update_item(
            TableName=self.table_name,
            Key=key(pk, sk),
            UpdateExpression="ADD " + ", ".join(added),
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={k: attribute(v) for k, v in values.items()},
        )
