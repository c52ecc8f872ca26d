"""Where facts stored before facts kept their channels were learned (botmemory.memory.visibility).

    python -m botmemory.ops.fact_channels [--dry-run]      (TABLE_NAME from the environment)

Run once after upgrading a deployment. Until then such a fact is shown nowhere but in its
person's `/memory show` and the staff listings: without channel information it counts as
said in a private channel. For each fact without `learned_in`, the channels of its evidence
are read from the observations it cites (`provenance`), found by the by_user index under the
people who said them, while those observations are still in the table; a channel counts as
public when @everyone can view it now. A fact whose evidence has expired keeps no channel
information and stays shown nowhere until it is said again (consolidation then adds the
channel it is said in). Running it twice changes nothing the second time. Exit codes: 0 done,
1 AWS or configuration error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from botmemory.settings.config import ConfigError, get_settings
from botmemory.storage import keys
from botmemory.storage.items import attribute, from_item
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.schema import BY_USER_INDEX


@dataclass
class Report:
    examined: int = 0  # facts without channel information
    resolved: int = 0  # given the channels of their evidence
    unresolved: int = 0  # evidence gone: still shown nowhere

    def lines(self) -> list[str]:
        return [
            f"facts without channels: {self.examined}",
            f"given the channels of their evidence: {self.resolved}",
            f"evidence gone (shown only in /memory show until said again): {self.unresolved}",
        ]


def _facts_without_channels(repository: MemoryRepository) -> Iterator[dict[str, Any]]:
    request: dict[str, Any] = {
        "TableName": repository.table_name,
        "FilterExpression": "begins_with(sk, :fact) AND attribute_not_exists(learned_in)",
        "ExpressionAttributeValues": {":fact": {"S": keys.FACT_PREFIX}},
        "ProjectionExpression": "pk, sk, #scope, user_id, provenance, evidence_user_ids",
        "ExpressionAttributeNames": {"#scope": "scope"},
    }
    while True:
        page = repository.client.scan(**request)
        yield from (from_item(item) for item in page["Items"])
        if "LastEvaluatedKey" not in page:
            return
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _channel_of(repository: MemoryRepository, observation_sk: str, people: list[str]) -> str | None:
    """The channel an observation was said in: its item found under one of `people`."""
    for person in people:
        found = repository.client.query(
            TableName=repository.table_name,
            IndexName=BY_USER_INDEX,
            KeyConditionExpression="user_id = :user AND sk = :sk",
            ExpressionAttributeValues={":user": {"S": person}, ":sk": {"S": observation_sk}},
        )["Items"]
        for item in found:
            channel = keys.channel_id_of(item["pk"]["S"])
            if channel:
                return channel
    return None


def backfill(repository: MemoryRepository, *, dry_run: bool = False) -> Report:
    report = Report()
    for fact in _facts_without_channels(repository):
        report.examined += 1
        people = [str(fact.get("user_id", "")), *fact.get("evidence_user_ids", [])]
        channels = [
            channel
            for sk in fact.get("provenance", [])
            if (channel := _channel_of(repository, str(sk), [p for p in people if p]))
        ]
        if not channels:
            report.unresolved += 1
            continue
        report.resolved += 1
        if dry_run:
            continue
        server = keys.server_scope_of(str(fact.get("scope", "")))
        public = [c for c in dict.fromkeys(channels) if repository.channel_is_public(server, c)]
        values: dict[str, set[str]] = {":learned_in": set(channels)}
        added = ["learned_in :learned_in"]
        if public:
            values[":learned_in_public"] = set(public)
            added.append("learned_in_public :learned_in_public")
        repository.client.update_item(
            TableName=repository.table_name,
            Key={"pk": {"S": fact["pk"]}, "sk": {"S": fact["sk"]}},
            UpdateExpression="ADD " + ", ".join(added),
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={k: attribute(v) for k, v in values.items()},
        )
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m botmemory.ops.fact_channels",
        description="Give facts stored before facts kept their channels the channels of "
        "their evidence.",
    )
    parser.add_argument("--dry-run", action="store_true", help="count, write nothing")
    args = parser.parse_args(argv)
    try:
        settings = get_settings()
        repository = MemoryRepository(boto3.client("dynamodb"), settings.table_name)
        report = backfill(repository, dry_run=args.dry_run)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError) as exc:
        print(f"error: AWS request failed: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
