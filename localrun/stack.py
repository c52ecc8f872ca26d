"""The SAM application wired on this machine the way template.yaml declares it.

The table is created from the template's own MemoryTable definition on a local DynamoDB;
each function's handler is loaded from its CodeUri with the layer on the path and the
template's environment; the table's stream feeds ConsolidateFunction and
SearchIndexFunction, each through its FilterCriteria, batch size, batching window and retry
count; the schedule invokes SweepFunction; the work both hand out goes through an in-process
queue to ConsolidateWorkerFunction. Given the caller's shell (make dev), a setting the
template declares takes the shell's value, except what the stack wires itself (STACK_WIRED).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from localrun.discord_sink import DiscordSink
from localrun.samtemplate import Template, load_handler, passes_filters

TABLE_ID = "MemoryTable"
CONSOLIDATE_ID = "ConsolidateFunction"
SWEEP_ID = "SweepFunction"
WORKER_ID = "ConsolidateWorkerFunction"
# Settings the template declares that the local stack wires itself, whatever the shell
# says: the table it created, on its own DynamoDB, and the two secrets whose values it
# gives directly (MEMORY_HASH_KEY and DISCORD_BOT_TOKEN, which the shell may set).
STACK_WIRED = frozenset(
    {
        "TABLE_NAME",
        "AWS_ENDPOINT_URL_DYNAMODB",
        "MEMORY_HASH_KEY_SECRET",
        "DISCORD_BOT_TOKEN_SECRET",
    }
)


@dataclass
class _Queue:
    """Stream records waiting for one function's next batch."""

    records: list[dict[str, Any]] = field(default_factory=list)
    since: float = 0.0


@dataclass
class LambdaContext:
    """The parts of Lambda's context object the handlers and Powertools read."""

    function_name: str
    memory_limit_in_mb: int = 512
    timeout_ms: int = 300_000
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self.timeout_ms - int((time.monotonic() - self._started) * 1000))


def table_arguments(template: Template, table_name: str) -> dict[str, Any]:
    """CreateTable arguments from the template's MemoryTable resource."""
    properties = template.resources[TABLE_ID]["Properties"]
    arguments: dict[str, Any] = {
        "TableName": table_name,
        "AttributeDefinitions": properties["AttributeDefinitions"],
        "KeySchema": properties["KeySchema"],
        "BillingMode": properties.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if properties.get("GlobalSecondaryIndexes"):
        arguments["GlobalSecondaryIndexes"] = properties["GlobalSecondaryIndexes"]
    if properties.get("StreamSpecification"):
        arguments["StreamSpecification"] = {
            "StreamEnabled": True,
            **properties["StreamSpecification"],
        }
    return arguments


def parse_emf(text: str) -> Counter[str]:
    """Sum the metrics of the CloudWatch embedded-metric-format lines in a function's output."""
    totals: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        try:
            record = json.loads(line)
            definitions = record["_aws"]["CloudWatchMetrics"]
        except (ValueError, KeyError):
            continue
        for definition in definitions:
            for metric in definition.get("Metrics", []):
                value = record.get(metric["Name"], 0)
                totals[metric["Name"]] += sum(value) if isinstance(value, list) else value
    return totals


# The public half of the documented test key (events/README.md): local runs check
# interactions against it unless given the application's real key.
TEST_PUBLIC_KEY = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"


class LocalStack:
    def __init__(
        self,
        dynamodb_url: str,
        *,
        table_name: str = "MemoryTable",
        parameters: Mapping[str, str] | None = None,
        environment: Mapping[str, str] | None = None,
        shell: Mapping[str, str] | None = None,
        echo: bool = False,
        batching_window: float | None = None,
    ) -> None:
        self.template = Template.load({TABLE_ID: table_name})
        self.table_name = table_name
        self._dynamodb_url = dynamodb_url
        # A local stack always has an application key to check signatures against.
        self._parameters = {"DiscordPublicKey": TEST_PUBLIC_KEY, **(parameters or {})}
        self._extra_environment = dict(environment or {})
        # make dev: the caller's shell, whose values win for the settings the template
        # declares. None (make demo): the template's and the run's own values, the same
        # on every machine.
        self._shell = dict(shell) if shell is not None else None
        self._echo = echo  # also show what functions print (make dev), not only collect it
        # make dev's --batch-window: the stream's batching window for every function it
        # feeds, instead of each event source's MaximumBatchingWindowInSeconds (None).
        self._batching_window = batching_window
        self._handlers: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.metrics: Counter[str] = Counter()
        self.output = io.StringIO()  # what the functions printed (JSON logs, metrics)
        self._shard_iterators: dict[str, str] = {}
        self._waiting: dict[str, _Queue] = {}  # per stream-fed function
        # Asynchronous invokes (ingest starting an answer): run once their caller returns.
        self._async: list[tuple[str, Any]] = []
        self._work_sequence = 0
        self.discord: DiscordSink | None = None
        self.dead_lettered = 0

    # Set-up -----------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """One environment for all functions: the template gives them the same shared set."""
        merged: dict[str, str] = {}
        for logical_id in self.template.function_ids():
            for name, value in self.template.function(
                logical_id, self._parameters
            ).environment.items():
                if merged.get(name, value) != value:
                    raise ValueError(
                        f"{name} differs between functions; run them in separate processes"
                    )
                merged[name] = value
        if merged.get("MEMORY_HASH_KEY_SECRET"):
            # The template's HashKeySecret is a Secrets Manager secret; locally the key is
            # given directly (yours, or one made for this run: the local table is new too).
            merged["MEMORY_HASH_KEY_SECRET"] = ""  # nosec B105 # blank: the local run gives the key directly
            merged["MEMORY_HASH_KEY"] = os.environ.get("MEMORY_HASH_KEY") or secrets.token_hex(32)
        if merged.get("DISCORD_BOT_TOKEN_SECRET"):
            # Answers are posted to a local stand-in for Discord (localrun/discord_sink.py).
            merged["DISCORD_BOT_TOKEN_SECRET"] = ""  # nosec B105 # blank: the local run gives the token directly
            merged["DISCORD_BOT_TOKEN"] = "local-bot-token"  # nosec B105 # the fake Discord's token, local only
        merged.update(
            TABLE_NAME=self.table_name,
            AWS_ENDPOINT_URL_DYNAMODB=self._dynamodb_url,
            AWS_ENDPOINT_URL_DYNAMODB_STREAMS=self._dynamodb_url,
            POWERTOOLS_TRACE_DISABLED="true",
        )
        merged.update(self._extra_environment)
        merged.update(self.shell_settings())
        return merged

    def declared_settings(self) -> set[str]:
        """Every variable the template gives any function (Globals included)."""
        return {
            name
            for logical_id in self.template.function_ids()
            for name in self.template.function(logical_id, self._parameters).environment
        }

    def shell_settings(self) -> dict[str, str]:
        """The declared settings the shell gives (not blank: as deployed, blank is unset),
        except those the stack wires itself (STACK_WIRED)."""
        if self._shell is None:
            return {}
        return {
            name: self._shell[name]
            for name in sorted(self.declared_settings() - STACK_WIRED)
            if self._shell.get(name, "").strip()
        }

    def shell_ignored(self) -> list[str]:
        """Declared settings the shell gives that the stack wires itself."""
        if self._shell is None:
            return []
        return sorted(n for n in STACK_WIRED if self._shell.get(n, "").strip())

    def start(self) -> LocalStack:
        environment = self.environment()
        if environment.get("ANSWER_FUNCTION"):
            self.discord = DiscordSink(
                environment.get("DISCORD_BOT_USER_ID") or "0", say=self._say
            ).start()
            if not environment.get("DISCORD_API_BASE"):
                environment["DISCORD_API_BASE"] = self.discord.url
            from botmemory.answering.requests import register_local_target

            register_local_target(
                environment["ANSWER_FUNCTION"],
                lambda payload: self._async.append(("AnswerFunction", payload)),
            )
        os.environ.update(environment)
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        if not os.environ.get("AWS_ACCESS_KEY_ID") and not os.environ.get("AWS_PROFILE"):
            # The local DynamoDB accepts any credentials; a real model provider needs real ones.
            os.environ.update(AWS_ACCESS_KEY_ID="local", AWS_SECRET_ACCESS_KEY="local")  # nosec B106 # dummy credentials for the local moto server
        from botmemory.runtime import forget_environment

        forget_environment()
        import boto3

        self.dynamodb = boto3.client("dynamodb")
        self.streams = boto3.client("dynamodbstreams")
        self.dynamodb.create_table(**table_arguments(self.template, self.table_name))
        ttl = self.template.resources[TABLE_ID]["Properties"].get("TimeToLiveSpecification")
        if ttl:
            self.dynamodb.update_time_to_live(
                TableName=self.table_name, TimeToLiveSpecification=ttl
            )
        self.stream_arn = self.dynamodb.describe_table(TableName=self.table_name)["Table"][
            "LatestStreamArn"
        ]
        for logical_id in self.template.function_ids():
            self._handlers[logical_id] = load_handler(
                self.template.function(logical_id, self._parameters)
            )
        if environment.get("CONSOLIDATE_QUEUE_URL"):
            from botmemory.consolidation.work import register_local_queue

            # The worker queue, in process: each message is one invoke of the worker once
            # its sender returns (in order; SQS's deduplication is not modelled).
            register_local_queue(environment["CONSOLIDATE_QUEUE_URL"], self._enqueue_work)
        return self

    def _enqueue_work(self, body: str, group: str) -> None:
        from botmemory.consolidation.work import local_event

        self._work_sequence += 1
        self._async.append((WORKER_ID, local_event(body, group, self._work_sequence)))

    # Invoking ---------------------------------------------------------------------

    def invoke(self, logical_id: str, event: Any) -> Any:
        """Run one function on one event, collecting what it prints and its metrics."""
        timeout_s = int(
            self.template.function(logical_id, self._parameters).properties.get("Timeout", 3)
        )
        context = LambdaContext(function_name=logical_id, timeout_ms=timeout_s * 1000)
        captured = io.StringIO()
        with self._lock, contextlib.redirect_stdout(captured):
            result = self._handlers[logical_id](event, context)
        printed = captured.getvalue()
        self.output.write(printed)
        if self._echo and printed:
            print(printed, end="", flush=True)
        self.metrics.update(parse_emf(printed))
        while self._async and not self._lock.locked():
            self.invoke(*self._async.pop(0))
        return result

    def _say(self, text: str) -> None:
        if self._echo:
            print(text, flush=True)

    def stop(self) -> None:
        if self.discord is not None:
            self.discord.stop()
            self.discord = None

    # The stream -------------------------------------------------------------------

    def _read_stream(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        shards = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"][
            "Shards"
        ]
        for shard in shards:
            shard_id = shard["ShardId"]
            iterator = (
                self._shard_iterators.get(shard_id)
                or self.streams.get_shard_iterator(
                    StreamArn=self.stream_arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
            )
            while iterator:
                page = self.streams.get_records(ShardIterator=iterator, Limit=1000)
                # Lambda's event records: the stream's, with the ARN of their source.
                records += [{**r, "eventSourceARN": self.stream_arn} for r in page["Records"]]
                iterator = page.get("NextShardIterator")
                self._shard_iterators[shard_id] = iterator
                if not page["Records"]:
                    break
        return records

    def stream_consumers(self) -> list[str]:
        """The functions the table's stream feeds (ConsolidateFunction, SearchIndexFunction)."""
        consumers = []
        for logical_id in self.template.function_ids():
            events = self.template.resources[logical_id].get("Properties", {}).get("Events", {})
            if any(e.get("Type") == "DynamoDB" for e in events.values()):
                consumers.append(logical_id)
        return consumers

    def pump_stream(self, *, flush: bool = False) -> int:
        """Deliver new stream records to each function the stream feeds, as its event source
        would.

        For each function, records pass its FilterCriteria, then go out in batches of at
        most BatchSize once a batch is full, the batching window has passed, or `flush` is
        set. Returns how many records were delivered to ConsolidateFunction.
        """
        fresh = self._read_stream()
        delivered: dict[str, int] = {}
        for logical_id in self.stream_consumers():
            delivered[logical_id] = self._pump(logical_id, fresh, flush)
        return delivered.get(CONSOLIDATE_ID, 0)

    def batching_window(self, logical_id: str) -> float:
        """Seconds the stream's records wait for this function to fill a batch."""
        if self._batching_window is not None:
            return self._batching_window
        return self.template_batching_window(logical_id)

    def template_batching_window(self, logical_id: str = CONSOLIDATE_ID) -> float:
        source = self.template.stream_source(logical_id)
        return float(source.get("MaximumBatchingWindowInSeconds", 0))

    def _pump(self, logical_id: str, records: list[dict[str, Any]], flush: bool) -> int:
        source = self.template.stream_source(logical_id)
        filters = self.template.stream_filters(logical_id)
        queue = self._waiting.setdefault(logical_id, _Queue())
        passing = [r for r in records if passes_filters(filters, r)]
        if passing and not queue.records:
            queue.since = time.monotonic()
        queue.records += passing
        window = self.batching_window(logical_id)
        size = int(source.get("BatchSize", 100))
        delivered = 0
        while queue.records and (
            flush or len(queue.records) >= size or time.monotonic() - queue.since >= window
        ):
            batch, queue.records = queue.records[:size], queue.records[size:]
            self._deliver(logical_id, batch, int(source.get("MaximumRetryAttempts", 0)))
            delivered += len(batch)
            queue.since = time.monotonic()
        return delivered

    def _deliver(self, logical_id: str, batch: list[dict[str, Any]], retries: int) -> None:
        """Invoke with a batch; on partial failure retry from the first failed record."""
        for _attempt in range(retries + 1):
            try:
                answer = self.invoke(logical_id, {"Records": batch})
                failed = {f["itemIdentifier"] for f in answer.get("batchItemFailures", [])}
            except Exception as error:  # a function error fails the whole batch
                print(f"{logical_id} failed: {error}")
                failed = {batch[0]["dynamodb"]["SequenceNumber"]}
            if not failed:
                return
            first = next(
                i for i, r in enumerate(batch) if r["dynamodb"]["SequenceNumber"] in failed
            )
            batch = batch[first:]
        self.dead_lettered += len(batch)

    # The schedule -----------------------------------------------------------------

    def run_schedule(self) -> Any:
        event = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            "resources": [],
            "detail": {},
        }
        return self.invoke(SWEEP_ID, event)

    def schedule_seconds(self) -> int:
        """The sweep's rate from the template, e.g. rate(5 minutes) -> 300."""
        for event in self.template.resources[SWEEP_ID]["Properties"].get("Events", {}).values():
            expression = str(event.get("Properties", {}).get("Schedule", ""))
            if expression.startswith("rate(") and expression.endswith(")"):
                amount, unit = expression[5:-1].split()
                return int(amount) * {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600}.get(
                    unit, 1
                )
        return 300
