"""template.yaml's functions over simulated hours and days, on moto (invariant 17).

IngestFunction stores what members say; the table's stream, read from moto and held for the
template's batching window and batch size, goes through ConsolidateFunction's filter into it;
it and SweepFunction (every period the template's schedule gives) send to a FIFO queue in moto;
ConsolidateWorkerFunction takes that queue's messages one at a time, a channel's in order and
never two of one channel at once, a failed one visible again after the queue's
VisibilityTimeout. A mention starts AnswerFunction, whose answer is stored as an observation.
The memory model is an OpenAI-compatible server on 127.0.0.1 reached by the project's own
client; while it "thinks", the simulated clock moves by its latency and what members say
meanwhile is stored (by the recorder IngestFunction runs), so rounds race new messages.

Time is one ManualClock every function reads (SystemClock is patched to it), moved from event
to event: nothing sleeps. Each observation is followed from the stream's INSERT (its storage
time) until it leaves the pending index (its consumption, or its deletion).
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

from botmemory.answering.requests import register_local_target
from botmemory.clock import ManualClock, SystemClock
from botmemory.runtime import build_services
from botmemory.settings.config import Settings
from botmemory.storage import keys
from localrun import gateway as gw
from localrun.samtemplate import passes_filters
from tests.support.fake_discord import BOT_TOKEN
from tests.support.lambda_local import TABLE, LocalLambda, sample_env

ANSWER = "AnswerFunction"
CONSOLIDATE = "ConsolidateFunction"
WORKER = "ConsolidateWorkerFunction"
SWEEP = "SweepFunction"
QUEUED = (CONSOLIDATE, WORKER, SWEEP)


@dataclass
class Tracked:
    """One observation: where, when it was stored and when it left the pending index."""

    channel: str
    sk: str
    stored_ms: int
    consumed_ms: int | None = None

    @property
    def waited_ms(self) -> int | None:
        return None if self.consumed_ms is None else self.consumed_ms - self.stored_ms


Event = dict[str, Any]


@dataclass(order=True)
class _Arrival:
    at_ms: int
    order: int
    make: Callable[[int], Event] = field(compare=False)  # the gateway event, made at its time


@dataclass
class _Delivery:
    """A queue message as the worker's event source holds it."""

    message: dict[str, Any]
    visible_ms: int


class SimulatedDeployment:
    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        dynamodb: Any,
        *,
        start_ms: int,
        environment: dict[str, str],
        discord_url: str,
    ) -> None:
        self.clock = ManualClock(start_ms)
        clock = self.clock
        monkeypatch.setattr(SystemClock, "now_ms", lambda _self: clock.now_ms())
        # Each invocation starts as a new sandbox (its settings and services built again);
        # only the clients are shared, as building one is most of a simulated invocation's
        # time and what a client talks to (moto, in process) is the same for all.
        monkeypatch.setattr(boto3, "client", _shared_clients(boto3.client))
        self.dynamodb = dynamodb
        self.sqs = boto3.client("sqs", region_name="us-east-1")
        env = sample_env()
        self.local = LocalLambda(monkeypatch, env, clock=self.clock)
        template = self.local.template
        queue = template.resources["ConsolidateWorkQueue"]["Properties"]
        self.visibility_ms = int(queue["VisibilityTimeout"]) * 1000
        self.queue_url = self.sqs.create_queue(
            QueueName="work.fifo",
            Attributes={"FifoQueue": "true", "VisibilityTimeout": str(queue["VisibilityTimeout"])},
        )["QueueUrl"]
        for function, variables in env.items():
            if function != "Parameters":
                variables.update(environment, DISCORD_BOT_USER_ID=gw.BOT)
        for function in QUEUED:
            env[function]["CONSOLIDATE_QUEUE_URL"] = self.queue_url
        env[ANSWER].update(DISCORD_API_BASE=discord_url, DISCORD_BOT_TOKEN=BOT_TOKEN)
        self.local.follow_queue = False
        source = template.stream_source(CONSOLIDATE)
        self.window_ms = int(float(source.get("MaximumBatchingWindowInSeconds", 0)) * 1000)
        self.batch_size = int(source.get("BatchSize", 100))
        self.filters = template.stream_filters(CONSOLIDATE)
        self.sweep_period_ms = _schedule_ms(template.resources[SWEEP])
        self.next_sweep_ms = start_ms + self.sweep_period_ms
        self.stream_arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        self.tracked: dict[tuple[str, str], Tracked] = {}
        self.invocations: Counter[str] = Counter()
        self.worker_failures = 0  # queue messages the worker failed (seen again later)
        self.said_while_thinking = 0  # stored while a memory model call ran
        self._streams = boto3.client("dynamodbstreams", region_name="us-east-1")
        self._iterators: dict[str, str] = {}
        self._stream: list[dict[str, Any]] = []
        self._stream_since = 0
        self._deliveries: list[_Delivery] = []
        self._arrivals: list[_Arrival] = []
        self._order = itertools.count()
        self._answers: list[dict[str, Any]] = []
        register_local_target(ANSWER, self._answers.append)
        # What members say while a model call runs is stored by the recorder ingest runs.
        self._recorder = build_services(
            Settings(table_name=TABLE, memory_model="rules", bot_user_id=gw.BOT),
            dynamodb=dynamodb,
            clock=self.clock,
        ).recorder

    # What happens ----------------------------------------------------------------------

    def schedule(
        self, at_ms: int, channel: str, author: str, text: str, *, mention: bool = False
    ) -> None:
        """A member says `text` at `at_ms` (mentioning the bot: it answers)."""

        def said(now_ms: int) -> Event:
            words = f"<@{gw.BOT}> {text}" if mention else text
            event = gw.message(author, words, now_ms, channel=channel)
            if mention:
                event["d"]["mentions"] = [gw.user(gw.BOT, bot=True)]
            return event

        self.schedule_event(at_ms, said)

    def schedule_event(self, at_ms: int, make: Callable[[int], Event]) -> None:
        """Any gateway event at `at_ms`, made then (`make` is given the time)."""
        heapq.heappush(self._arrivals, _Arrival(at_ms, next(self._order), make))

    def model_thinks(self, latency_ms: int) -> Callable[[str], None]:
        """The memory model's `on_batch`: its latency passes on the clock, and what is said
        meanwhile is stored as it arrives."""

        def thinking(_batch: str) -> None:
            until = self.clock.now_ms() + latency_ms
            while self._arrivals and self._arrivals[0].at_ms <= until:
                arrival = heapq.heappop(self._arrivals)
                self.clock.set(max(self.clock.now_ms(), arrival.at_ms))
                self._recorder.record([arrival.make(self.clock.now_ms())])
                self.said_while_thinking += 1
            self.clock.set(until)

        return thinking

    def run_until(self, end_ms: int) -> None:
        """Everything the deployment does until `end_ms`, event by event."""
        self._follow(None)  # what was stored meanwhile (a function invoked outside it)
        self._work()  # what was sent meanwhile (send_work) is visible now
        while True:
            moment = min(self._next_times())
            if moment > end_ms:
                break
            self.clock.set(max(moment, self.clock.now_ms()))
            now = self.clock.now_ms()
            while self._arrivals and self._arrivals[0].at_ms <= now:
                self._say(heapq.heappop(self._arrivals))
            if self._stream_due(now):
                self._deliver_stream()
            if now >= self.next_sweep_ms:
                while self.next_sweep_ms <= now:  # a schedule never catches up missed runs
                    self.next_sweep_ms += self.sweep_period_ms
                self._invoke(SWEEP, {"detail-type": "Scheduled Event", "source": "aws.events"})
            self._work()
        self.clock.set(max(end_ms, self.clock.now_ms()))

    def send_work(self, body: str, group: str, dedup: str) -> None:
        """A message on the worker queue as anything may send it (a stray or repeated one)."""
        self.sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=body,
            MessageGroupId=group,
            MessageDeduplicationId=dedup,
        )

    # What is left ----------------------------------------------------------------------

    def pending(self) -> list[Tracked]:
        return [t for t in self.tracked.values() if t.consumed_ms is None]

    def of(self, channel: str) -> list[Tracked]:
        return sorted(
            (t for t in self.tracked.values() if t.channel == channel), key=lambda t: t.sk
        )

    # The parts ---------------------------------------------------------------------------

    def _next_times(self) -> list[int]:
        times = [self.next_sweep_ms]
        if self._arrivals:
            times.append(self._arrivals[0].at_ms)
        if self._stream:
            full = len(self._stream) >= self.batch_size
            times.append(self.clock.now_ms() if full else self._stream_since + self.window_ms)
        times += [d.visible_ms for d in self._deliveries]
        return times

    def _say(self, arrival: _Arrival) -> None:
        self._invoke("IngestFunction", {"events": [arrival.make(self.clock.now_ms())]})
        while self._answers:
            self._invoke(ANSWER, self._answers.pop(0))

    def _stream_due(self, now: int) -> bool:
        return bool(self._stream) and (
            len(self._stream) >= self.batch_size or now - self._stream_since >= self.window_ms
        )

    def _deliver_stream(self) -> None:
        batch, self._stream = self._stream[: self.batch_size], self._stream[self.batch_size :]
        answer = self._invoke(CONSOLIDATE, {"Records": batch})
        failed = {f["itemIdentifier"] for f in answer.get("batchItemFailures", [])}
        if failed:  # the stream retries from the first failed record
            first = next(
                i for i, r in enumerate(batch) if r["dynamodb"]["SequenceNumber"] in failed
            )
            self._stream = batch[first:] + self._stream
        self._stream_since = self.clock.now_ms()

    def _work(self) -> None:
        """The worker on every message visible now: a channel's messages in order, none of a
        channel while an earlier one of it failed and waits to be seen again."""
        while True:
            self._receive()
            now = self.clock.now_ms()
            blocked = {_group(d) for d in self._deliveries if d.visible_ms > now}
            ready = next(
                (d for d in self._deliveries if d.visible_ms <= now and _group(d) not in blocked),
                None,
            )
            if ready is None:
                return
            self._deliveries.remove(ready)
            try:
                record = sqs_record(ready.message)
                answer = self._invoke(WORKER, {"Records": [record]}, _group(ready))
                failed = bool(answer.get("batchItemFailures"))
            except Exception:  # a function error: the message is seen again
                failed = True
            self.worker_failures += failed
            if failed:
                ready.visible_ms = self.clock.now_ms() + self.visibility_ms
                self._deliveries.insert(0, ready)

    def _receive(self) -> None:
        while True:
            messages = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]
            ).get("Messages", [])
            if not messages:
                return
            for message in messages:
                self.sqs.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
                self._deliveries.append(_Delivery(message, self.clock.now_ms()))

    def _invoke(self, function: str, event: Any, channel: str | None = None) -> Any:
        self.invocations[function] += 1
        try:
            return self.local.invoke(function, event)
        finally:
            self._follow(channel)

    def _follow(self, worked_on: str | None) -> None:
        """New observations from the stream (stored now), and those of the channel a worker
        worked on that are no longer pending (only a worker consumes)."""
        fresh = self._read_stream()
        now = self.clock.now_ms()
        for record in fresh:
            image = record["dynamodb"].get("NewImage") or {}
            if record["eventName"] == "INSERT" and "pending_sk" in image:
                channel = keys.channel_id_of(image["pk"]["S"]) or ""
                sk = image["sk"]["S"]
                self.tracked.setdefault((channel, sk), Tracked(channel, sk, now))
            if passes_filters(self.filters, record):
                if not self._stream:
                    self._stream_since = now
                self._stream.append(record)
        if worked_on is None:
            return
        still = self._pending_sks(worked_on)
        for tracked in self.of(worked_on):
            if tracked.consumed_ms is None and tracked.sk not in still:
                tracked.consumed_ms = now

    def _read_stream(self) -> list[dict[str, Any]]:
        """The stream's records since the last read, as Lambda's poller reads them (each
        shard from where it stopped)."""
        if not self._iterators:
            streams = self._streams
            for shard in streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"][
                "Shards"
            ]:
                self._iterators[shard["ShardId"]] = streams.get_shard_iterator(
                    StreamArn=self.stream_arn,
                    ShardId=shard["ShardId"],
                    ShardIteratorType="TRIM_HORIZON",
                )["ShardIterator"]
        records: list[dict[str, Any]] = []
        for shard, iterator in self._iterators.items():
            while True:
                page = self._streams.get_records(ShardIterator=iterator, Limit=1000)
                iterator = page.get("NextShardIterator") or iterator
                records += page["Records"]
                if not page["Records"]:
                    break
            self._iterators[shard] = iterator
        for record in records:
            record["eventSourceARN"] = self.stream_arn
            record["dynamodb"]["ApproximateCreationDateTime"] = self.clock.now_ms() // 1000
        return records

    def _pending_sks(self, channel: str) -> set[str]:
        found: set[str] = set()
        request: dict[str, Any] = {
            "TableName": TABLE,
            "IndexName": "pending",
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": keys.channel_pk(channel)}},
        }
        while True:
            page = self.dynamodb.query(**request)
            found |= {item["sk"]["S"] for item in page["Items"]}
            if "LastEvaluatedKey" not in page:
                return found
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _shared_clients(make: Callable[..., Any]) -> Callable[..., Any]:
    made: dict[tuple[Any, ...], Any] = {}

    def client(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())), os.environ.get("AWS_DEFAULT_REGION"))
        if key not in made:
            made[key] = make(*args, **kwargs)
        return made[key]

    return client


def _group(delivery: _Delivery) -> str:
    return str(delivery.message["Attributes"]["MessageGroupId"])


def sqs_record(message: dict[str, Any]) -> dict[str, Any]:
    """A received SQS message as Lambda's event source hands it to the worker."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message["Attributes"],
        "messageAttributes": {},
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:work.fifo",
        "awsRegion": "us-east-1",
    }


def _schedule_ms(resource: dict[str, Any]) -> int:
    """A schedule's rate(N minutes) in milliseconds."""
    for event in resource["Properties"].get("Events", {}).values():
        expression = str(event.get("Properties", {}).get("Schedule", ""))
        if expression.startswith("rate(") and expression.endswith(")"):
            amount, unit = expression[5:-1].split()
            return int(amount) * {"minute": 60_000, "minutes": 60_000}[unit]
    raise ValueError("no rate schedule")
