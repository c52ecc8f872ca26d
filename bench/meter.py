"""Metering DynamoDB for the bench: every request a client makes, with its timing and its
parsed response, and what they add up to (writes, reads, the longest chain of round trips,
items, estimated read units)."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from moto.core.botocore_stubber import BotocoreStubber

WRITE_OPERATIONS = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
READ_OPERATIONS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}


# Measuring DynamoDB --------------------------------------------------------------------


@dataclass
class Request:
    """One DynamoDB API call as the client saw it."""

    operation: str
    body: dict[str, Any]
    started: float
    ended: float = math.inf
    response: dict[str, Any] = field(default_factory=dict)
    tag: str = ""  # what the meter was tagged with when the request started
    sent_bytes: int = 0  # the request body's size (S3's uploads; DynamoDB's are not counted)


class DynamoMeter:
    """Records every request of a client, with its timing and its parsed response."""

    def __init__(self, client: Any) -> None:
        self.latency_s = 0.0
        self.tag = ""
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        client.meta.events.register("before-call.dynamodb.*", self._before)
        client.meta.events.register("after-call.dynamodb.*", self._after)

    def _before(
        self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        body = params.get("body") or b"{}"
        request = Request(model.name, json.loads(body), time.perf_counter(), tag=self.tag)
        context["bench_request"] = request
        with self._lock:
            self._requests.append(request)
        if self.latency_s:
            time.sleep(self.latency_s)  # the network's share, outside moto's work

    def watch(self, client: Any, service: str) -> None:
        """Record another boto3 client's requests too (S3's), in the same timeline, held for
        the same simulated latency; an error response (a 304, a 412) is recorded as any."""
        client.meta.events.register(f"before-call.{service}.*", self._before_other)
        client.meta.events.register(f"after-call.{service}.*", self._after)

    def _before_other(
        self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        sent = body_size(params.get("body"))
        request = Request(model.name, {}, time.perf_counter(), tag=self.tag, sent_bytes=sent)
        context["bench_request"] = request
        with self._lock:
            self._requests.append(request)
        if self.latency_s:
            time.sleep(self.latency_s)

    def _after(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        request: Request = context["bench_request"]
        request.ended = time.perf_counter()
        request.response = parsed

    def peek(self) -> list[Request]:
        """The requests made since the last take, without taking them."""
        with self._lock:
            return list(self._requests)

    def take(self) -> list[Request]:
        """The requests made since the last take."""
        with self._lock:
            taken, self._requests = self._requests, []
        return taken

    @contextmanager
    def simulated_latency(self, seconds: float) -> Iterator[None]:
        self.latency_s = seconds
        try:
            yield
        finally:
            self.latency_s = 0.0

    @contextmanager
    def timed(self, operation: str) -> Iterator[None]:
        """A request to another service (an embedding call, QueryVectors), recorded in the
        same timeline as DynamoDB's and held for the same simulated latency."""
        request = Request(operation, {}, time.perf_counter(), tag=self.tag)
        with self._lock:
            self._requests.append(request)
        if self.latency_s:
            time.sleep(self.latency_s)
        try:
            yield
        finally:
            request.ended = time.perf_counter()

    @contextmanager
    def tagged(self, tag: str) -> Iterator[None]:
        """Tags the requests started inside (whatever thread starts them)."""
        self.tag = tag
        try:
            yield
        finally:
            self.tag = ""


def body_size(body: Any) -> int:
    """Bytes of a request body: bytes as they are, a file by its length (left where it was)."""
    if body is None:
        return 0
    if isinstance(body, bytes | bytearray | str):
        return len(body)
    here = int(body.tell())
    size = int(body.seek(0, 2)) - here
    body.seek(here)
    return size


def status(request: Request) -> int:
    """The HTTP status a request was answered with (0 when it never was)."""
    return int(request.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def writes(requests: Sequence[Request]) -> int:
    return sum(1 for r in requests if r.operation in WRITE_OPERATIONS)


def reads(requests: Sequence[Request]) -> int:
    return sum(1 for r in requests if r.operation in READ_OPERATIONS)


def longest_chain(requests: Sequence[Request]) -> list[Request]:
    """The longest chain of requests in which each started after the previous one ended.

    Its length is the number of sequential round trips the caller waited for.
    """
    ordered = sorted(requests, key=lambda r: r.started)
    chains: list[list[Request]] = []
    for i, request in enumerate(ordered):
        before = [chains[j] for j in range(i) if ordered[j].ended <= request.started]
        chains.append([*max(before, key=len, default=[]), request])
    return max(chains, key=len, default=[])


def describe(request: Request) -> str:
    """A short name for what a Query read: its index, or the sort-key prefix it asked for."""
    body = request.body
    if "IndexName" in body:
        return f"{request.operation} {body['IndexName']}"
    values = body.get("ExpressionAttributeValues", {})
    prefixes = [v["S"] for k, v in values.items() if k != ":pk" and "S" in v]
    if not prefixes:
        return request.operation
    kind, _, target = prefixes[0].rstrip("#").partition("#")
    if kind == "PIN":
        kind += " global" if target == "global" else " channel"
    return f"{request.operation} {kind}"


def operations(requests: Sequence[Request]) -> str:
    counts = Counter(r.operation for r in requests)
    return " + ".join(f"{n} {op}" for op, n in sorted(counts.items()))


def attribute_size(value: dict[str, Any]) -> int:
    """Estimated stored size of one attribute value (low-level wire format)."""
    ((kind, inner),) = value.items()
    if kind in ("S", "N"):
        return len(str(inner).encode("utf-8"))
    if kind == "B":
        return len(inner)
    if kind in ("SS", "NS"):
        return sum(len(str(v).encode("utf-8")) for v in inner)
    if kind == "BS":
        return sum(len(v) for v in inner)
    if kind == "L":
        return sum(attribute_size(v) for v in inner)
    if kind == "M":
        return item_size(inner)
    return 1  # BOOL, NULL


def item_size(item: dict[str, Any]) -> int:
    return sum(len(name.encode("utf-8")) + attribute_size(v) for name, v in item.items())


def _units(size_bytes: int) -> int:
    return max(1, math.ceil(size_bytes / 4096))


def read_units(request: Request) -> float:
    """Estimated read capacity units one read consumed, from the items it returned."""
    body, response = request.body, request.response
    if request.operation in ("Query", "Scan"):
        size = sum(item_size(i) for i in response.get("Items", []))
        return _units(size) * (1.0 if body.get("ConsistentRead") else 0.5)
    if request.operation == "GetItem":
        factor = 1.0 if body.get("ConsistentRead") else 0.5
        return _units(item_size(response.get("Item", {}))) * factor
    if request.operation == "BatchGetItem":
        total = 0.0
        for table, items in response.get("Responses", {}).items():
            factor = 1.0 if body["RequestItems"][table].get("ConsistentRead") else 0.5
            total += sum(_units(item_size(i)) * factor for i in items)
        return total
    return 0.0


@contextmanager
def serialized_moto() -> Iterator[None]:
    """moto's backend takes no lock: serialize its request handling, as the tests do.

    The simulated latency is spent in `before-call`, outside this lock, so requests
    issued side by side still overlap.
    """
    original = BotocoreStubber.__call__
    lock = threading.Lock()

    def locked(self: BotocoreStubber, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    BotocoreStubber.__call__ = locked  # type: ignore[method-assign]
    try:
        yield
    finally:
        BotocoreStubber.__call__ = original  # type: ignore[method-assign]


def item_reads(requests: Sequence[Request]) -> int:
    """Items DynamoDB returned to reads (a Query's page, a GetItem's item, a batch's items)."""
    total = 0
    for r in requests:
        if r.operation not in READ_OPERATIONS:
            continue
        if "Items" in r.response:
            total += len(r.response["Items"])
        elif "Item" in r.response:
            total += 1
        elif "Responses" in r.response:
            total += sum(len(found) for found in r.response["Responses"].values())
    return total


def item_writes(requests: Sequence[Request]) -> int:
    """Items written or deleted (every key of a batch or a transaction)."""
    total = 0
    for r in requests:
        if r.operation == "BatchWriteItem":
            total += sum(len(batch) for batch in r.body.get("RequestItems", {}).values())
        elif r.operation == "TransactWriteItems":
            total += len(r.body.get("TransactItems", []))
        elif r.operation in WRITE_OPERATIONS:
            total += 1
    return total


# Measuring S3 (the keyword shards) -----------------------------------------------------

S3_GET, S3_PUT, S3_LIST, S3_DELETE = "GetObject", "PutObject", "ListObjectsV2", "DeleteObjects"
S3_OPERATIONS = {S3_GET, S3_PUT, S3_LIST, S3_DELETE}


@dataclass
class S3Counts:
    """The S3 requests among a meter's, by kind; every GetObject is priced, 304 or 404 too."""

    gets: int = 0
    not_modified: int = 0  # GetObject answered 304 to the cached copy's ETag: no body
    absent: int = 0  # GetObject answered 404: no such shard (yet)
    puts: int = 0
    lost_races: int = 0  # PutObject answered 412 or 409: another writer won, redone
    lists: int = 0
    deletes: int = 0
    uploaded: int = 0  # PutObject bodies, bytes
    downloaded: int = 0  # GetObject bodies answered 200, bytes

    @classmethod
    def of(cls, requests: Sequence[Request]) -> S3Counts:
        counts = cls()
        for r in requests:
            code = status(r)
            if r.operation == S3_GET:
                counts.gets += 1
                counts.not_modified += code == 304
                counts.absent += code == 404
                if code == 200:
                    counts.downloaded += int(r.response.get("ContentLength", 0))
            elif r.operation == S3_PUT:
                counts.puts += 1
                counts.lost_races += code in (409, 412)
                counts.uploaded += r.sent_bytes
            elif r.operation == S3_LIST:
                counts.lists += 1
            elif r.operation == S3_DELETE:
                counts.deletes += 1
        return counts
