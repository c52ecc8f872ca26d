"""Issue 28, items 1 and 4: the stream and the sweep only hand work out; the worker consolidates.

The production path: IngestFunction records the messages, ConsolidateFunction (from the
table's stream, through its template filter) and SweepFunction enqueue on an SQS FIFO queue in
moto, and ConsolidateWorkerFunction consumes what moto's queue delivers.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from botmemory.storage import keys
from localrun import gateway as gw
from localrun.samtemplate import passes_filters
from tests.stack.test_sam_local import stream_records
from tests.support.lambda_local import TABLE, LocalLambda, sample_env
from tests.support.simulated_deployment import sqs_record

T0 = 1_767_225_600_000
OTHER = "200000000000000042"  # a second channel of the guild


class Stack:
    """The functions on one moto FIFO work queue."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, dynamodb: Any, queue_url: str, **settings: str
    ) -> None:
        env = sample_env()
        shared = {"CONSOLIDATE_QUEUE_URL": queue_url, "MEMORY_CONSOLIDATE_EVERY": "2", **settings}
        for function in ("ConsolidateFunction", "ConsolidateWorkerFunction", "SweepFunction"):
            env.setdefault(function, {}).update(shared)
        self.local = LocalLambda(monkeypatch, env)
        self.local.follow_queue = False  # moto's queue, not the in-process one
        self.dynamodb = dynamodb
        self.sqs = boto3.client("sqs", region_name="us-east-1")
        self.queue_url = queue_url
        self.stream_arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        self.seen: set[str] = set()

    def talk(self, channel: str, count: int, at_ms: int = T0) -> None:
        events = [
            gw.message(gw.ALICE, f"I love hiking, part {i}", at_ms + i * 1000, channel=channel)
            for i in range(count)
        ]
        self.local.invoke("IngestFunction", {"events": events})

    def records(self) -> list[dict[str, Any]]:
        filters = self.local.template.stream_filters("ConsolidateFunction")
        fresh = stream_records(self.dynamodb, self.stream_arn, self.seen)
        self.seen |= {r["dynamodb"]["SequenceNumber"] for r in fresh}
        return [r for r in fresh if passes_filters(filters, r)]

    def received(self) -> list[dict[str, Any]]:
        """Every message the queue delivers now (moto's FIFO: one group after another)."""
        found: list[dict[str, Any]] = []
        while True:
            answer = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                AttributeNames=["All"],
                VisibilityTimeout=0,
            )
            batch = answer.get("Messages", [])
            if not batch:
                return found
            for message in batch:
                self.sqs.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
            found += batch

    def work(self, message: dict[str, Any]) -> Any:
        """ConsolidateWorkerFunction on one message, as the queue's event source delivers it."""
        return self.local.invoke("ConsolidateWorkerFunction", {"Records": [sqs_record(message)]})

    def pending(self, channel: str) -> int:
        answer = self.dynamodb.query(
            TableName=TABLE,
            IndexName="pending",
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.channel_pk(channel)}},
            Select="COUNT",
        )
        return int(answer["Count"])

    def state(self, channel: str) -> dict[str, Any]:
        item = self.dynamodb.get_item(
            TableName=TABLE,
            Key={"pk": {"S": keys.channel_pk(channel)}, "sk": {"S": keys.STATE_SK}},
        )
        return dict(item.get("Item") or {})


@pytest.fixture
def queue_url(dynamodb: Any) -> str:
    sqs = boto3.client("sqs", region_name="us-east-1")
    url: str = sqs.create_queue(
        QueueName="work.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "1800"}
    )["QueueUrl"]
    return url


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch, dynamodb: Any, queue_url: str) -> Stack:
    return Stack(monkeypatch, dynamodb, queue_url)


def test_a_stream_batch_is_one_message_per_channel_and_the_worker_consolidates_each(
    stack: Stack,
) -> None:
    stack.talk(gw.CHANNEL, 4)
    stack.talk(OTHER, 3, at_ms=T0 + 10_000)
    records = stack.records()
    assert len(records) == 7

    assert stack.local.invoke("ConsolidateFunction", {"Records": records}) == {
        "batchItemFailures": []
    }
    # The stream retries a batch: the same window's messages are dropped as duplicates.
    assert stack.local.invoke("ConsolidateFunction", {"Records": records}) == {
        "batchItemFailures": []
    }

    messages = stack.received()
    groups = sorted(m["Attributes"]["MessageGroupId"] for m in messages)
    assert groups == sorted([gw.CHANNEL, OTHER])
    assert all(m["Attributes"]["MessageDeduplicationId"].startswith("stream.") for m in messages)
    # Nothing is consolidated by the stream consumer itself; each channel is on the sweep's list.
    assert stack.pending(gw.CHANNEL) == 4 and stack.pending(OTHER) == 3
    assert "pending_since" in stack.state(gw.CHANNEL)

    for message in messages:
        assert stack.work(message) == {"batchItemFailures": []}
    assert stack.pending(gw.CHANNEL) == 0 and stack.pending(OTHER) == 0
    assert int(stack.state(gw.CHANNEL)["consolidations"]["N"]) == 1


def test_a_record_whose_work_cannot_be_enqueued_fails_and_nothing_is_lost(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, queue_url: str
) -> None:
    missing = queue_url.replace("work.fifo", "missing.fifo")
    stack = Stack(monkeypatch, dynamodb, missing)
    stack.talk(gw.CHANNEL, 3)
    records = stack.records()

    # Every record failed: Powertools fails the invocation, and the stream retries the batch.
    with pytest.raises(BatchProcessingError) as failed:
        stack.local.invoke("ConsolidateFunction", {"Records": records})

    assert len(failed.value.child_exceptions) == len(records)
    assert stack.pending(gw.CHANNEL) == 3  # still pending: the stream retries them
    assert "pending_since" in stack.state(gw.CHANNEL)  # and the sweep would find them


def test_the_worker_skips_a_malformed_message_and_an_unknown_channel_counting_both(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    for body in ("not json", json.dumps({"channel_id": "x" * 200}), '{"channel_id": "1", "x": 1}'):
        stack.sqs.send_message(
            QueueUrl=stack.queue_url,
            MessageBody=body,
            MessageGroupId="g",
            MessageDeduplicationId=body[:80].replace(" ", "_"),
        )
    stack.sqs.send_message(
        QueueUrl=stack.queue_url,
        MessageBody=json.dumps({"channel_id": "300000000000000999"}),
        MessageGroupId="300000000000000999",
        MessageDeduplicationId="unknown",
    )
    capsys.readouterr()
    messages = stack.received()
    assert len(messages) == 4

    for message in messages:
        assert stack.work(message) == {"batchItemFailures": []}

    printed = capsys.readouterr().out
    metrics = [json.loads(line) for line in printed.splitlines() if '"_aws"' in line]
    assert sum(sum(m.get("WorkMalformed", [])) for m in metrics) == 3
    assert sum(sum(m.get("WorkSkipped", [])) for m in metrics) == 1
    assert stack.state("300000000000000999") == {}  # nothing written for it


def test_the_sweep_enqueues_due_channels_and_consolidates_nothing_itself(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, queue_url: str
) -> None:
    stack = Stack(monkeypatch, dynamodb, queue_url, MEMORY_IDLE_FLUSH_MINUTES="0")
    stack.talk(gw.CHANNEL, 1)
    stack.talk(OTHER, 1, at_ms=T0 + 5_000)
    stack.local.invoke("ConsolidateFunction", {"Records": stack.records()})
    stack.received()  # the stream's messages

    swept = stack.local.invoke("SweepFunction", {"detail-type": "Scheduled Event"})

    assert swept == {"enqueued": 2, "failed": 0, "complete": True}
    messages = stack.received()
    bodies = [json.loads(m["Body"]) for m in messages]
    assert sorted(b["channel_id"] for b in bodies) == sorted([gw.CHANNEL, OTHER])
    assert all(b["source"] == "sweep" and b["force"] and b["since_ms"] for b in bodies)
    assert all(m["Attributes"]["MessageDeduplicationId"].startswith("sweep.") for m in messages)
    assert stack.pending(gw.CHANNEL) == 1  # the sweep itself consumed nothing
