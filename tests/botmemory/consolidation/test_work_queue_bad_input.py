"""Issue 28, bad input on the worker queue, through the handlers on moto's SQS FIFO queue.

A raid (thousands of messages in one channel within a minute) is consumed oldest first, each
message once, while another channel's work goes on beside it; a channel whose model calls
always time out backs off and is at worst quarantined, and blocks no other channel; a stream
batch whose work is refused by the queue for some channels fails only those channels'
records. The functions run on a fake clock (the deduplication windows, the back-off).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from botmemory import runtime
from botmemory.clock import ManualClock
from botmemory.storage import keys
from localrun import gateway as gw
from tests.botmemory.consolidation.test_work_queue import (
    OTHER,
    T0,
    Stack,
    queue_url,  # noqa: F401
)
from tests.support.fake_providers import CompletionServer, serving
from tests.support.lambda_local import TABLE

# The raid is 10,000 in a minute: `make bench` runs that (bench/raid.py, table 9d);
# on moto it takes minutes (a Query reads its whole partition). Here 400, in rounds of 25: a
# worker invocation takes 4 rounds, so the raid still spans several invocations and stream
# batches, in seconds.
RAID = 400
ROUND = 25  # MEMORY_MAX_BATCH
STREAM_BATCH = 100  # template.yaml: the stream's BatchSize


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    """Every function's clock (botmemory.runtime builds it): a fake one, shared."""
    shared = ManualClock(T0)
    monkeypatch.setattr(runtime, "SystemClock", lambda: shared)
    return shared


def say(stack: Stack, channel: str, lines: list[str], start_ms: int, step_ms: int) -> None:
    """IngestFunction records these messages, 100 to an invocation as the gateway batches."""
    for first in range(0, len(lines), 100):
        events = [
            gw.message(gw.ALICE, line, start_ms + (first + i) * step_ms, channel=channel)
            for i, line in enumerate(lines[first : first + 100])
        ]
        stack.local.invoke("IngestFunction", {"events": events})


def hand_out(stack: Stack) -> list[dict[str, Any]]:
    """ConsolidateFunction over the stream's new records, in the template's batches; each
    answer."""
    records = stack.records()
    return [
        stack.local.invoke("ConsolidateFunction", {"Records": records[i : i + STREAM_BATCH]})
        for i in range(0, len(records), STREAM_BATCH)
    ]


def pending_sks(stack: Stack, channel: str) -> list[str]:
    found: list[str] = []
    query: dict[str, Any] = {
        "TableName": TABLE,
        "IndexName": "pending",
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": keys.channel_pk(channel)}},
    }
    while True:
        answer = stack.dynamodb.query(**query)
        found += [item["sk"]["S"] for item in answer["Items"]]
        if "LastEvaluatedKey" not in answer:
            return sorted(found)
        query["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def metric_sum(printed: str, name: str) -> int:
    lines = [json.loads(line) for line in printed.splitlines() if '"_aws"' in line]
    return sum(int(sum(m.get(name, []))) for m in lines)


def receive(stack: Stack, count: int) -> list[dict[str, Any]]:
    """Messages the queue hands out now, left in flight (a worker is at them)."""
    answer = stack.sqs.receive_message(
        QueueUrl=stack.queue_url, MaxNumberOfMessages=count, AttributeNames=["All"]
    )
    return list(answer.get("Messages", []))


@dataclass
class Delivery:
    group: str
    answer: Any


def deliver_visible(stack: Stack, visit: Any = None) -> list[Delivery]:
    """One pass of the event source: every message the queue hands out now (moto's FIFO
    holds back a group while one of its messages is in flight), each to its own worker
    invocation, deleted once the worker succeeded; `visit(group)` after each."""
    delivered: list[Delivery] = []
    while True:
        batch = receive(stack, 10)
        if not batch:
            return delivered
        for message in batch:
            answer = stack.work(message)
            if answer == {"batchItemFailures": []}:
                stack.sqs.delete_message(
                    QueueUrl=stack.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
            group = message["Attributes"]["MessageGroupId"]
            delivered.append(Delivery(group, answer))
            if visit is not None:
                visit(group)


# A raid ----------------------------------------------------------------------------------


def test_a_raid_is_consumed_in_order_once_each_while_another_channel_goes_on(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    queue_url: str,  # noqa: F811
    clock: ManualClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack = Stack(monkeypatch, dynamodb, queue_url, MEMORY_MAX_BATCH=str(ROUND))
    say(stack, gw.CHANNEL, [f"raid line {n}" for n in range(RAID)], T0, 60_000 // RAID)
    say(stack, OTHER, ["I love hiking", "me too", "see you"], T0 + 1_000, 1_000)
    clock.set(T0 + 61_000)
    every = pending_sks(stack, gw.CHANNEL)
    assert len(every) == RAID

    answers = hand_out(stack)
    assert all(a == {"batchItemFailures": []} for a in answers)
    assert len(answers) == -(-(RAID + 3) // STREAM_BATCH)

    # After each raid invocation what is left is the newest part of the raid, in order.
    left_after: list[int] = []

    def visit(group: str) -> None:
        if group == gw.CHANNEL:
            left = pending_sks(stack, gw.CHANNEL)
            assert left == every[len(every) - len(left) :]  # oldest consumed first
            left_after.append(len(left))

    capsys.readouterr()
    # A worker takes the raid's message and is still at it (the message in flight) ...
    (first,) = receive(stack, 1)
    assert first["Attributes"]["MessageGroupId"] == gw.CHANNEL
    # ... while another worker takes the other channel's: the raid holds back only its group.
    (second,) = receive(stack, 1)
    assert second["Attributes"]["MessageGroupId"] == OTHER
    assert stack.work(second) == {"batchItemFailures": []}
    assert pending_sks(stack, OTHER) == []
    assert pending_sks(stack, gw.CHANNEL) == every  # consolidated before the raid's first round
    for message in (first, second):
        stack.sqs.delete_message(QueueUrl=stack.queue_url, ReceiptHandle=message["ReceiptHandle"])

    # The raid: one stream message for its window (deduplicated), then the worker's own
    # follow-ups, each invocation taking the oldest rounds.
    assert stack.work(first) == {"batchItemFailures": []}
    visit(gw.CHANNEL)
    delivered = deliver_visible(stack, visit)

    assert all(d.answer == {"batchItemFailures": []} for d in delivered)
    assert {d.group for d in delivered} == {gw.CHANNEL}
    assert left_after == sorted(left_after, reverse=True) and left_after[-1] == 0
    assert len(left_after) == -(-RAID // (ROUND * 4)) > 1  # 4 rounds to an invocation
    # Each observation consumed once: the rounds' counts add up to the raid and the 3 others.
    assert metric_sum(capsys.readouterr().out, "ObservationsConsumed") == RAID + 3


# A model that always times out -----------------------------------------------------------


class StallingModel(CompletionServer):
    """A memory model on 127.0.0.1 that never answers in time for a batch holding `stall`
    (the client gives up first), and answers the others with an episode and no facts."""

    def __init__(self) -> None:
        super().__init__()
        self.released = threading.Event()
        self.stalled = 0

    def answer(self, user_message: str) -> dict[str, Any]:
        if "stall" in user_message:
            self.stalled += 1
            self.released.wait(5)  # past the client's timeout; cut short at teardown
        return {
            "facts": [],
            "episode": {"summary": "Members talked.", "participants": []},
            "channel_summary": "",
        }

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the answer to a client that timed out cannot be written: the point of it


@pytest.fixture
def stalling() -> Iterator[StallingModel]:
    server = StallingModel()
    with serving(server):
        try:
            yield server
        finally:
            server.released.set()


FAILING = "200000000000000077"


def test_a_channel_whose_model_always_times_out_backs_off_is_quarantined_and_blocks_no_one(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    queue_url: str,  # noqa: F811
    clock: ManualClock,
    stalling: StallingModel,
) -> None:
    stack = Stack(
        monkeypatch,
        dynamodb,
        queue_url,
        MEMORY_MODEL="openai:memory-test",
        MEMORY_MODEL_BASE_URL=stalling.base_url,
        MEMORY_MODEL_API_KEY="sk-test-memory",
        MEMORY_MODEL_API_KEY_SECRET="",
        MEMORY_MODEL_TIMEOUT_SECONDS="0.2",
        MEMORY_MODEL_MAX_ATTEMPTS="1",
        MEMORY_IDLE_FLUSH_MINUTES="1",
    )
    say(stack, FAILING, ["stall one", "stall two"], T0, 1_000)
    say(stack, OTHER, ["I love hiking", "me too"], T0, 1_000)
    clock.set(T0 + 5_000)
    hand_out(stack)

    delivered = deliver_visible(stack)

    # Each channel its own invocation; the failing one is no error (nothing to retry now).
    assert sorted(d.group for d in delivered) == sorted([FAILING, OTHER])
    assert all(d.answer == {"batchItemFailures": []} for d in delivered)
    assert stalling.stalled == 1
    assert pending_sks(stack, OTHER) == []  # consolidated meanwhile
    assert len(pending_sks(stack, FAILING)) == 2  # kept, to retry after the back-off
    state = stack.state(FAILING)
    assert int(state["retry_at"]["N"]) == T0 + 5_000 + 15 * 60_000  # the back-off: 15 minutes

    # Before its back-off is over the sweep leaves it alone; another channel's new work
    # is consolidated all the same.
    clock.advance(ms=10 * 60_000)
    say(stack, OTHER, ["back again", "and again"], clock.now_ms(), 1_000)
    hand_out(stack)
    assert stack.local.invoke("SweepFunction", {})["enqueued"] == 0
    assert [d.group for d in deliver_visible(stack)] == [OTHER]
    assert pending_sks(stack, OTHER) == [] and stalling.stalled == 1

    # Sweep after sweep, each after the back-off: retried whole, split, at worst quarantined.
    for _ in range(12):
        if not pending_sks(stack, FAILING):
            break
        clock.advance(ms=3 * 60 * 60_000)  # past the longest back-off (120 minutes)
        stack.local.invoke("SweepFunction", {})
        assert all(d.answer == {"batchItemFailures": []} for d in deliver_visible(stack))
    assert pending_sks(stack, FAILING) == []
    quarantined = stack.dynamodb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :q)",
        ExpressionAttributeValues={
            ":pk": {"S": keys.channel_pk(FAILING)},
            ":q": {"S": keys.QUARANTINE_PREFIX},
        },
    )["Items"]
    assert sum(len(q["observation_sks"]["L"]) for q in quarantined) == 2
    # The first timeout says nothing of the batch (a timeout is no answer, and the model had
    # answered no other round since); once the other channel's answer shows the model works,
    # 3 attempts whole (MEMORY_BATCH_MAX_ATTEMPTS), the first half alone (quarantined), then
    # the second: a bounded number of model calls, each after its back-off.
    assert stalling.stalled == 1 + 3 + 1 + 3


# A queue that refuses some channels' work ------------------------------------------------


def refuse_entries_of(channels: set[str], request: pytest.FixtureRequest) -> None:
    """The queue refuses SendMessageBatch entries of these channels: they are taken out of
    the request (never queued) and listed as Failed in its answer, as SQS answers. Until the
    test ends: the session is the worker's (tests/conftest.py), so the hooks come off after."""

    def before(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        entries = params.get("Entries", [])
        params["Entries"] = [e for e in entries if e["MessageGroupId"] not in channels]
        context["refused"] = [e["Id"] for e in entries if e["MessageGroupId"] in channels]

    def after(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        parsed["Failed"] = parsed.get("Failed", []) + [
            {"Id": i, "SenderFault": False, "Code": "InternalError", "Message": "refused"}
            for i in context.get("refused", [])
        ]

    events = boto3.DEFAULT_SESSION.events  # the functions' clients are made from it
    hooks = [
        ("provide-client-params.sqs.SendMessageBatch", before),
        ("after-call.sqs.SendMessageBatch", after),
    ]
    for event, hook in hooks:
        events.register(event, hook)
        request.addfinalizer(lambda event=event, hook=hook: events.unregister(event, hook))


def test_a_stream_batch_fails_only_the_records_of_channels_the_queue_refused(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    queue_url: str,  # noqa: F811
    clock: ManualClock,
    request: pytest.FixtureRequest,
) -> None:
    refused, accepted = "200000000000000051", [OTHER, "200000000000000052"]
    stack = Stack(monkeypatch, dynamodb, queue_url)
    for channel in [refused, *accepted]:
        say(stack, channel, ["I love hiking", "me too"], T0, 1_000)
    clock.set(T0 + 5_000)
    records = stack.records()
    refused_ids = sorted(
        r["dynamodb"]["SequenceNumber"]
        for r in records
        if r["dynamodb"]["Keys"]["pk"]["S"] == keys.channel_pk(refused)
    )
    refuse_entries_of({refused}, request)

    answer = stack.local.invoke("ConsolidateFunction", {"Records": records})

    assert sorted(f["itemIdentifier"] for f in answer["batchItemFailures"]) == refused_ids
    queued = [m["Attributes"]["MessageGroupId"] for m in stack.received()]
    assert sorted(queued) == sorted(accepted)  # the others' work went out
    assert "pending_since" in stack.state(refused)  # and the sweep would find the refused
    assert len(pending_sks(stack, refused)) == 2  # nothing lost
