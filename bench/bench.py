"""Cost benchmark of the memory layer: what each operation costs, and whether it grows.

Run it from the repository root:

    .venv/bin/python bench/bench.py

Everything runs in-process against moto's DynamoDB (no network, no AWS account) with
the offline `rules` memory model and an embedded search index (SQLite FTS5 in memory), as
local runs have. It measures and prints; it asserts nothing and exits 0.

How the figures are taken:

- DynamoDB requests: every API call the client makes, counted by botocore's
  `before-call.dynamodb.*` event (a BatchWriteItem or a TransactWriteItems is one request).
- Model calls: a wrapper around RulesModel counts them and keeps the last input.
- Sequential round trips (recall): every request is timed with `before-call` and
  `after-call` hooks, and each is held for a simulated network latency so that
  requests issued side by side really overlap. The figure is the longest chain of
  requests in which each one started only after the previous one had finished: the
  number of round trips a caller waits for, whatever runs concurrently beside them.
- Read units: estimated from the items each read returned (see the footnotes).

How to read the tables: in the "history" comparisons the left column is a young
channel and the right one a channel 100 times older; the ratio column is right/left.
A ratio of about 1.00 means the operation's cost does not grow with history.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "core"), str(ROOT)]

# Fake credentials and a region before boto3 is imported: never a real AWS account.
for _name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
    os.environ.pop(_name, None)
os.environ.update(
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_DEFAULT_REGION="us-east-1",
    AWS_ACCOUNT_ID_ENDPOINT_MODE="disabled",
    # The person hash's key (deployed: a Secrets Manager secret; see botmemory.people.optout).
    MEMORY_HASH_KEY="bench-person-hash-key-0123456789",
)

import boto3  # noqa: E402
from cold_start import bench_cold_start  # noqa: E402  (beside this script)
from layer_size import bench_layer  # noqa: E402
from moto import mock_aws  # noqa: E402
from moto.core.botocore_stubber import BotocoreStubber  # noqa: E402
from moto.core.models import DEFAULT_ACCOUNT_ID  # noqa: E402
from moto.dynamodb.models import dynamodb_backends  # noqa: E402

from botmemory.answering.answerer import Answerer  # noqa: E402
from botmemory.answering.chat.contract import ChatReply, ChatRequest  # noqa: E402
from botmemory.answering.prompt import system_prompt_source  # noqa: E402
from botmemory.answering.rate import AnswerRateLimiter  # noqa: E402
from botmemory.answering.requests import question_of  # noqa: E402
from botmemory.answering.triggers import answer_trigger  # noqa: E402
from botmemory.clock import DAY_MS, ManualClock, epoch_seconds  # noqa: E402
from botmemory.consolidation.model.contract import (  # noqa: E402
    ConsolidationAnswer,
    MemoryModelError,
    ModelInput,
)
from botmemory.consolidation.model.rules import RulesModel  # noqa: E402
from botmemory.consolidation.outcome import Outcome, Status  # noqa: E402
from botmemory.recall.block import (  # noqa: E402
    ELSEWHERE_HEADING,
    EPISODE_HEADING,
    FACT_HEADING,
    PASSAGE_HEADING,
    PIN_HEADING,
    SUMMARY_HEADING,
)
from botmemory.recall.contract import RecallRequest  # noqa: E402
from botmemory.recall.recaller import FACT_WINDOW_FACTOR  # noqa: E402
from botmemory.recall.search_leg import SearchLeg, SearchStatus, search_depth  # noqa: E402
from botmemory.records import (  # noqa: E402
    ChannelSummary,
    Episode,
    Fact,
    FactKind,
    FactSource,
    MemoryScope,
    Observation,
    ObservationKind,
    Persona,
    Pin,
    ShortTermEntry,
    scope_of,
)
from botmemory.runtime import build_services  # noqa: E402
from botmemory.search.index_sync import IndexReport, IndexWriter  # noqa: E402
from botmemory.search.keywords import tokens  # noqa: E402
from botmemory.search.passages import message_passages  # noqa: E402
from botmemory.search.port import Passage  # noqa: E402
from botmemory.search.sqlite_index import SqliteSearchIndex  # noqa: E402
from botmemory.services import MemoryServices  # noqa: E402
from botmemory.settings.config import Settings  # noqa: E402
from botmemory.storage import keys  # noqa: E402
from botmemory.storage.items import fact_values, observation_values, to_item  # noqa: E402
from botmemory.storage.keys import episode_sk, observation_sk  # noqa: E402
from botmemory.storage.schema import create_table  # noqa: E402
from botmemory.text import content_hash, short_id  # noqa: E402
from localrun.fastmoto import fast_dynamodb  # noqa: E402
from tests import gateway as gw  # noqa: E402
from tests.storage import put_episode, put_items  # noqa: E402

REGION = "us-east-1"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the clock's start in every scenario
SPEAKERS = [gw.ALICE, gw.BOB, gw.CAROL]
SIMULATED_LATENCY_S = 0.02  # per request, while recall is measured
# MEMORY_SEARCH_TIMEOUT_MS (default 800): moto reads a big partition in Python, slowly, and
# the search's read-back would wait behind those reads past the default (see table 3c).
SEARCH_TIMEOUT_MS = 10_000
WRITE_OPERATIONS = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
READ_OPERATIONS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}
CHAT_LINES = [
    "has anyone tried the new patch yet, the loading screens feel shorter",
    "I love hiking in the Dolomites when the weather holds",
    "the raid starts at nine tonight, bring potions",
    "I use Neovim for everything, even for writing emails",
    "did the build on main go green again after the fix",
    "I work as a nurse so weekends are hit and miss",
    "lol that clip from yesterday was unreal",
    "I'm working on a small synth plugin in Rust",
]
# Table 3c: messages drawn from a small vocabulary (the chat lines' words and a few more),
# one known early message, and a question about it that shares a word with many others.
VOCABULARY = sorted(
    {word.strip(",").lower() for line in CHAT_LINES for word in line.split()}
    | {"bread", "sunday", "coffee", "garden", "train", "movie", "guitar", "market", "rain"}
)
MESSAGE_WORDS = (4, 10)  # the least and the most words in a message
EARLY_MESSAGE = 10  # the index in the history of the message the query asks about
EARLY_TEXT = "my grandmother taught me to bake sourdough bread in Lisbon every Sunday"
QUERY = "What was that about baking sourdough bread in Lisbon on a Sunday?"
INDEX_BATCH = 1000  # passages per SearchIndex.add while seeding
SEARCH_TIMINGS = 5  # in-process searches timed (the median is shown)


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

    def _after(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        request: Request = context["bench_request"]
        request.ended = time.perf_counter()
        request.response = parsed

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
    def tagged(self, tag: str) -> Iterator[None]:
        """Tags the requests started inside (whatever thread starts them)."""
        self.tag = tag
        try:
            yield
        finally:
            self.tag = ""


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


# The model and the world ---------------------------------------------------------------


class CountingModel:
    """The rules model, with a call counter and the last input kept for size figures."""

    name = "rules (counted)"

    def __init__(self) -> None:
        self.inner = RulesModel()
        self.calls = 0
        self.last_input: ModelInput | None = None

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        self.calls += 1
        self.last_input = batch
        return self.inner.consolidate(batch)

    def recompress(self, summary: str, target_chars: int) -> str:
        self.calls += 1  # a second call of that round: counted like any other
        return self.inner.recompress(summary, target_chars)


class FailingModel(CountingModel):
    """The counted rules model, except that every call for the given channels fails, the way
    a real model fails deterministically (a truncated answer)."""

    name = "rules (counted, failing for some channels)"

    def __init__(self, failing: set[str]) -> None:
        super().__init__()
        self.failing = failing

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        if batch.channel_id in self.failing:
            self.calls += 1
            self.last_input = batch
            raise MemoryModelError("answer truncated (simulated)")
        return super().consolidate(batch)


@dataclass
class World:
    """One fresh table and search index with their services, model and clock."""

    services: MemoryServices
    model: CountingModel
    clock: ManualClock
    index: SqliteSearchIndex


class Lab:
    """Makes worlds on one moto-backed client, each on a fresh table with a fresh embedded
    search index (SQLite FTS5 in memory), as local runs have.

    The previous world's table is dropped and its index closed first, so one of each is held
    at a time.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.meter = DynamoMeter(client)
        self._tables = 0
        self._index: SqliteSearchIndex | None = None

    def close(self) -> None:
        """Close the last world's index."""
        if self._index is not None:
            self._index.close()
            self._index = None

    def world(self, model: CountingModel | None = None) -> World:
        if self._tables:
            self.client.delete_table(TableName=f"Bench{self._tables}")
        self.close()
        self._tables += 1
        table = f"Bench{self._tables}"
        create_table(self.client, table)
        settings = Settings(
            table_name=table,
            memory_model="rules",
            bot_user_id=gw.BOT,
            consolidate_every=20,  # MEMORY_CONSOLIDATE_EVERY=20
            search_timeout_ms=SEARCH_TIMEOUT_MS,
        )
        model, clock = model or CountingModel(), ManualClock(T0)
        index = self._index = SqliteSearchIndex(":memory:")
        services = build_services(
            settings, dynamodb=self.client, clock=clock, model=model, search_index=index
        )
        self.meter.take()
        return World(services, model, clock, index)


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


# Building events and history -----------------------------------------------------------


def event_mix(count: int, start_ms: int) -> list[dict[str, Any]]:
    """`count` gateway events cycling through all eight dispatch types (and the bot's answers)."""
    events: list[dict[str, Any]] = []
    at = start_ms
    while len(events) < count:
        events += gw.every_event_type(at)
        at += 10_000
    return events[:count]


def chat(count: int, start_ms: int) -> list[dict[str, Any]]:
    """Messages from the three speakers in turn, one second apart, some stating facts."""
    return [
        gw.message(SPEAKERS[i % 3], CHAT_LINES[i % len(CHAT_LINES)], start_ms + i * 1000)
        for i in range(count)
    ]


def chat_line(index: int) -> str:
    return CHAT_LINES[index % len(CHAT_LINES)]


def varied_lines(seed: int) -> Callable[[int], str]:
    """Texts for the messages of a history in order: MESSAGE_WORDS words from VOCABULARY
    (seeded, so every run writes the same), and EARLY_TEXT as message EARLY_MESSAGE."""
    draw = random.Random(seed)

    def line(index: int) -> str:
        if index == EARLY_MESSAGE:
            return EARLY_TEXT
        return " ".join(draw.choices(VOCABULARY, k=draw.randint(*MESSAGE_WORDS)))

    return line


def consumed_observation(index: int, at_ms: int, clock: ManualClock, text: str) -> Observation:
    """A message of the history, already consumed, expiring 30 days from the clock's now."""
    author = SPEAKERS[index % 3]
    message_id = gw.snowflake(at_ms)
    return Observation(
        channel_id=gw.CHANNEL,
        scope=gw.GUILD,
        sk=observation_sk(at_ms, ObservationKind.MESSAGE, message_id),
        kind=ObservationKind.MESSAGE,
        at_ms=at_ms,
        author_id=author,
        author_name=gw.NAMES[author],
        message_id=message_id,
        content=text,
        expires_at=epoch_seconds(clock.now_ms() + 30 * DAY_MS),
    )


def fact_item(user_id: str, index: int, count: int, clock: ManualClock) -> dict[str, Any]:
    """An active fact item as put_fact writes it, updated in the past, expiring in the future."""
    text = f"Likes board game number {index:05d}"
    updated = clock.now_ms() - (count - index) * 60_000
    fact = Fact(
        fact_id=short_id(content_hash(gw.GUILD, user_id, text)),
        scope=gw.GUILD,
        user_id=user_id,
        text=text,
        kind=list(FactKind)[index % len(FactKind)],
        source=FactSource.SELF,
        provenance=[observation_sk(updated, ObservationKind.MESSAGE, str(index))],
        created_ms=updated,
        updated_ms=updated,
        hits=1 + index % 4,
        expires_at=epoch_seconds(clock.now_ms() + 180 * DAY_MS),
    )
    return fact_values(fact)


def seed_pins_and_episodes(world: World) -> None:
    """Two global pins, one channel pin, and the channel's episode cap (10) of episodes."""
    repository, now = world.services.repository, world.clock.now_ms()
    pins = [
        ("global", "Be kind; no spoilers outside #spoilers."),
        ("global", "Server time is UTC."),
        (gw.CHANNEL, "This channel is for the weekly raid."),
    ]
    for n, (target, text) in enumerate(pins):
        repository.put_pin(
            Pin(pin_id=f"pin{n}", scope=gw.GUILD, target=target, text=text, created_ms=now)
        )
    for n in range(world.services.settings.episodes_per_channel):
        created = now - (n + 1) * 3_600_000
        episode_id = f"ep{n:04d}"
        episode = Episode(
            channel_id=gw.CHANNEL,
            episode_id=episode_id,
            sk=episode_sk(created, episode_id),
            summary="Alice, Bob, Carol talked about the raid schedule and who brings potions. "
            "Alice: \u201cI love hiking in the Dolomites when the weather holds\u201d",
            participant_ids=SPEAKERS,
            participant_names=[gw.NAMES[s] for s in SPEAKERS],
            start_ms=created - 600_000,
            end_ms=created,
            created_ms=created,
            expires_at=epoch_seconds(now + 90 * DAY_MS),
        )
        put_episode(repository, episode, gw.GUILD)


def put_in_moto(world: World, items: Iterable[dict[str, Any]]) -> None:
    """Write already-shaped items straight into moto's table: what moto does for each item of
    a BatchWriteItem, without botocore serializing and moto parsing 25 items at a time
    (100,000 observations take some 20 s this way, 45 s as BatchWriteItem requests)."""
    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION]
    table = world.services.repository.table_name
    for values in items:
        backend.put_item(table, to_item(values))


def seed_history(
    world: World, observations: int, facts_per_user: int, text: Callable[[int], str] = chat_line
) -> list[Observation]:
    """Consumed observations before T0, one a second from the speakers in turn, active facts
    for the three speakers, pins and episodes. Returns the observations written."""
    clock = world.clock
    history = [
        consumed_observation(i, T0 - (observations - i) * 1000, clock, text(i))
        for i in range(observations)
    ]
    put_in_moto(world, (observation_values(o, pending=False) for o in history))
    put_in_moto(
        world,
        (
            fact_item(user, i, facts_per_user, clock)
            for user in SPEAKERS
            for i in range(facts_per_user)
        ),
    )
    seed_pins_and_episodes(world)
    world.clock.advance(seconds=1)
    return history


# Printing ------------------------------------------------------------------------------


def fmt(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}"


def ratio(left: float, right: float) -> str:
    if left == 0:
        return "1.00x" if right == 0 else "n/a"
    return f"{right / left:,.2f}x"


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    notes: Sequence[str] = (),
) -> None:
    cells = [list(columns)] + [[fmt(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    print(title)
    print("=" * len(title))
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))
    for note in notes:
        print(f"  {note}")
    print()


def compared(rows: Sequence[tuple[str, float, float]]) -> list[tuple[object, ...]]:
    return [(label, left, right, ratio(left, right)) for label, left, right in rows]


# 1. Ingest -----------------------------------------------------------------------------


def _is_opt_out_read(request: Request) -> bool:
    values = request.body.get("ExpressionAttributeValues", {})
    return request.operation == "Query" and values.get(":pk", {}).get("S") == keys.OPT_OUT_PK


def bench_ingest(lab: Lab) -> None:
    world = lab.world()
    events = event_mix(200, T0)
    kinds = Counter(e["t"] for e in events)
    stored = 0
    for start in range(0, len(events), 10):  # the relay delivers events in small batches
        stored += world.services.recorder.record(events[start : start + 10]).stored
    requests = lab.meter.take()
    n = len(events)
    opt_out_list = [r for r in requests if _is_opt_out_read(r)]
    per_event = [r for r in requests if r not in opt_out_list]
    print_table(
        "1. Ingest, per observed event",
        ["figure", "value"],
        [
            ("gateway events recorded", n),
            ("  of which stored", stored),
            ("DynamoDB writes per event", writes(per_event) / n),
            ("DynamoDB reads per event", reads(per_event) / n),
            ("model calls per event", world.model.calls / n),
            ("opt-out list reads in the run", len(opt_out_list)),
        ],
        [
            "The opt-out list is one Query per container per minute (cached), not per event.",
            f"{len(kinds)} dispatch types cycled, {min(kinds.values())} to"
            f" {max(kinds.values())} of each; the bot's answers are MESSAGE_CREATE",
            "events from its own id. Recorded 10 events per call, as the relay batches them.",
        ],
    )


# 2. Consolidation ----------------------------------------------------------------------

INDEX_TAG = "index"  # requests issued inside IndexWriter.write


@contextmanager
def index_writes_tagged(meter: DynamoMeter) -> Iterator[None]:
    """Tags the requests IndexWriter.write issues (the read-back of the sources of the
    passages it wrote) with INDEX_TAG. Consolidation runs on one thread, so nothing else
    is tagged."""
    original = IndexWriter.write

    def write(
        writer: IndexWriter, passages: list[Passage], remove: Sequence[str] = ()
    ) -> IndexReport:
        with meter.tagged(INDEX_TAG):
            return original(writer, passages, remove)

    IndexWriter.write = write  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        IndexWriter.write = original  # type: ignore[method-assign]


def index_requests(requests: Sequence[Request]) -> list[Request]:
    return [r for r in requests if r.tag == INDEX_TAG]


def bench_stream(lab: Lab) -> None:
    world = lab.world()
    services = world.services
    consolidating: list[list[Request]] = []  # the requests of each trigger that consolidated
    waiting: list[list[Request]] = []  # the requests of each trigger below the threshold
    outcomes: list[Outcome] = []
    with index_writes_tagged(lab.meter):
        for event in chat(200, T0):
            services.recorder.record([event])
            lab.meter.take()
            world.clock.advance(seconds=1)
            trigger = services.consolidator.consolidate(gw.CHANNEL)
            requests = lab.meter.take()
            outcomes += trigger
            done = any(o.status == Status.CONSOLIDATED for o in trigger)
            (consolidating if done else waiting).append(requests)
    rounds = [o for o in outcomes if o.status == Status.CONSOLIDATED]
    calls = world.model.calls
    consumed = sum(o.consumed for o in rounds)

    def mean(groups: list[list[Request]], count: Callable[[list[Request]], float]) -> float:
        return sum(count(g) for g in groups) / len(groups) if groups else 0.0

    def read_back(requests: list[Request]) -> int:
        return reads(index_requests(requests))

    def read_back_units(requests: list[Request]) -> float:
        return sum(read_units(r) for r in index_requests(requests))

    last = consolidating[-1] if consolidating else []

    print_table(
        "2a. Consolidation, 200 messages, one trigger each (MEMORY_CONSOLIDATE_EVERY=20)",
        ["figure", "value"],
        [
            ("triggers", len(consolidating) + len(waiting)),
            ("consolidations", len(rounds)),
            ("model calls", calls),
            ("model calls per consolidation", calls / len(rounds) if rounds else 0.0),
            ("  of which summary recompressions", sum(o.summary_recompressed for o in rounds)),
            ("observations per model call", consumed / calls if calls else 0.0),
            ("facts written in all", sum(o.facts_written for o in rounds)),
            (
                "search index writes per consolidation",
                sum(o.index_writes for o in rounds) / len(rounds) if rounds else 0.0,
            ),
            ("DynamoDB requests per consolidation", mean(consolidating, len)),
            ("  reads", mean(consolidating, reads)),
            ("    of which the index's read-back of its sources", mean(consolidating, read_back)),
            ("    its estimated read units", mean(consolidating, read_back_units)),
            ("  writes", mean(consolidating, writes)),
            ("DynamoDB requests per trigger below threshold", mean(waiting, len)),
            ("  reads", mean(waiting, reads)),
            ("  writes", mean(waiting, writes)),
        ],
        [
            "Requests are those of the trigger alone; each message's own PutItem is in table 1.",
            "The rolling channel summary is rewritten in the same call; a recompression pass (a",
            "second call) happens only when the model's summary exceeds MEMORY_SUMMARY_MAX_TOKENS.",
            f"A consolidation: {operations(last) if last else '-'}.",
            f"Below threshold: {operations(waiting[-1]) if waiting else '-'}.",
            "Index writes: Outcome.index_writes (the round's messages, facts and episode).",
            "Index read-back: the requests issued inside IndexWriter.write (tagged by a wrapper):",
            f"{operations(index_requests(last)) if last else '-'}, strongly consistent, after the"
            " commit, to withdraw any passage",
            "whose source changed meanwhile.",
            "Ingest writes nothing to the index: one PutItem per event (table 1).",
        ],
    )


@dataclass
class InputFigures:
    model_calls: int
    input_chars: int
    observations: int
    facts: int
    pins: int
    requests: int


def consolidation_input(lab: Lab, prior_observations: int, facts_per_user: int) -> InputFigures:
    world = lab.world()
    seed_history(world, prior_observations, facts_per_user)
    services = world.services
    services.recorder.record(chat(20, T0 + 1000))
    lab.meter.take()
    outcomes = services.consolidator.consolidate(gw.CHANNEL)
    requests = lab.meter.take()
    model_input = world.model.last_input or ModelInput(channel_id=gw.CHANNEL, observations=[])
    return InputFigures(
        model_calls=sum(o.model_calls for o in outcomes),
        input_chars=sum(o.model_input_chars for o in outcomes),
        observations=len(model_input.observations),
        facts=len(model_input.facts),
        pins=len(model_input.pins),
        requests=len(requests),
    )


def bench_model_input(lab: Lab) -> None:
    small, large = (100, 20), (10_000, 1_000)
    young = consolidation_input(lab, *small)
    old = consolidation_input(lab, *large)
    cap = Settings().facts_per_person_in_model
    print_table(
        "2b. Model input for one consolidation of 20 new messages",
        ["figure", "young channel", "old channel", "ratio"],
        compared(
            [
                ("prior observations in the channel (consumed)", small[0], large[0]),
                ("prior active facts per speaker (3 speakers)", small[1], large[1]),
                ("model calls", young.model_calls, old.model_calls),
                ("observations in the model input", young.observations, old.observations),
                ("facts in the model input", young.facts, old.facts),
                ("pins in the model input", young.pins, old.pins),
                (
                    "model input characters (Outcome.model_input_chars)",
                    young.input_chars,
                    old.input_chars,
                ),
                ("DynamoDB requests for the consolidation", young.requests, old.requests),
            ]
        ),
        [
            f"The model is shown at most MEMORY_FACTS_PER_PERSON_IN_MODEL={cap} facts per speaker,",
            "the newest; both channels hold more than that, so neither older observations nor",
            "more facts reach the model: its input is the new batch plus a bounded context.",
            "Both channels also hold 3 pins and 10 episodes.",
        ],
    )


# 2c. A hostile load: channels whose every batch fails ----------------------------------

SWEEP_EVERY_MS = 5 * 60_000  # template.yaml: SweepFunction runs rate(5 minutes)
SWEEP_BUDGET_MS = 300_000  # the sweep function's timeout
MODEL_CALL_MS = 20_000  # what a slow model call takes out of that budget, in the second run


def failing_channel_day(lab: Lab) -> dict[str, object]:
    """A live channel whose every model call fails, for two days: a message, a stream
    trigger and a sweep every 5 minutes; then the model heals."""
    model = FailingModel({gw.CHANNEL})
    world = lab.world(model)
    services, clock = world.services, world.clock
    services.recorder.record(chat(25, T0 - 60_000))
    calls_by_day, statuses = [0, 0], Counter[Status]()
    for step in range(2 * DAY_MS // SWEEP_EVERY_MS):
        clock.advance(ms=SWEEP_EVERY_MS)
        before = model.calls
        services.recorder.record(chat(1, clock.now_ms() - 1000))
        outcomes = services.consolidator.consolidate(gw.CHANNEL)
        outcomes += services.consolidator.sweep()
        calls_by_day[step * SWEEP_EVERY_MS // DAY_MS] += model.calls - before
        statuses.update(o.status for o in outcomes)
        lab.meter.take()
    model.failing.clear()  # the model works again
    healed_at, minutes = clock.now_ms(), 0
    while services.repository.count_pending(gw.CHANNEL, 1) and minutes < 24 * 60:
        clock.advance(ms=SWEEP_EVERY_MS)
        minutes += 5
        services.consolidator.consolidate(gw.CHANNEL)
        services.consolidator.sweep()
        lab.meter.take()
    return {
        "day 1": calls_by_day[0],
        "day 2": calls_by_day[1],
        "deferred": statuses[Status.DEFERRED],
        "quarantined": statuses[Status.QUARANTINED],
        "recovered minutes": (clock.now_ms() - healed_at) // 60_000,
    }


def sweep_reach(lab: Lab, model_call_ms: int | None) -> list[int]:
    """50 stuck channels (every call fails) and 10 healthy quiet ones that spoke a minute
    later: healthy channels consolidated by each sweep until all are done."""
    stuck = {f"21000000000000{i:04d}" for i in range(50)}
    healthy = [f"22000000000000{i:04d}" for i in range(10)]
    model = FailingModel(stuck)
    world = lab.world(model)
    services, clock = world.services, world.clock
    for channel in sorted(stuck):
        services.recorder.record([gw.message(SPEAKERS[0], CHAT_LINES[0], T0, channel=channel)])
        services.consolidator.consolidate(channel)
    clock.advance(ms=60_000)
    for channel in healthy:
        services.recorder.record([gw.message(SPEAKERS[1], CHAT_LINES[1], T0, channel=channel)])
        services.consolidator.consolidate(channel)
    clock.advance(ms=31 * 60_000)
    per_sweep: list[int] = []
    while sum(per_sweep) < len(healthy) and len(per_sweep) < 50:
        first = model.calls

        def time_left(first: int = first) -> int:
            if model_call_ms is None:
                return SWEEP_BUDGET_MS
            return SWEEP_BUDGET_MS - model_call_ms * (model.calls - first)

        outcomes = services.consolidator.sweep(time_left_ms=time_left)
        per_sweep.append(
            sum(o.channel_id in healthy and o.status == Status.CONSOLIDATED for o in outcomes)
        )
        clock.advance(ms=SWEEP_EVERY_MS)
        lab.meter.take()
    return per_sweep


def bench_hostile(lab: Lab) -> None:
    # Every failure is logged as a warning; the table says how many there were.
    logger = logging.getLogger("botmemory.consolidation.consolidator")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        day = failing_channel_day(lab)
        fast = sweep_reach(lab, None)
        slow = sweep_reach(lab, MODEL_CALL_MS)
    finally:
        logger.setLevel(level)
    attempts = Settings().batch_max_attempts
    backoff = (Settings().retry_backoff_minutes, Settings().retry_backoff_max_minutes)
    print_table(
        "2c. Hostile load: a channel whose every model call fails, and 50 stuck channels",
        ["figure", "value"],
        [
            ("model calls, permanently failing channel, day 1", day["day 1"]),
            ("model calls, permanently failing channel, day 2", day["day 2"]),
            ("  stream triggers deferred by its back-off (no model call)", day["deferred"]),
            ("  observations quarantined in the two days", day["quarantined"]),
            (
                "  minutes until all pending is consumed once the model heals",
                day["recovered minutes"],
            ),
            ("healthy channels (of 10) consolidated per sweep, 50 stuck present", _counts(fast)),
            (
                f"  same, each model call taking {MODEL_CALL_MS // 1000} s of a 300 s sweep",
                _counts(slow),
            ),
        ],
        [
            "A message, a stream trigger and a sweep every 5 minutes (rate(5 minutes) in",
            f"template.yaml). A batch is retried {attempts} times from its head, then bisected down to",
            "one observation; what fails alone is quarantined (consumed without facts). Each failure",
            f"backs the channel off {backoff[0]} minutes, doubling to {backoff[1]}; without it every",
            "trigger at the threshold and every sweep called the model again (288+ calls a day).",
            "Sweep reach: the sweep pages past its first 50 channels and a failed channel moves",
            "back on the list to its next try, so the stuck ones each take one round, then wait.",
        ],
    )


def _counts(per_sweep: list[int]) -> str:
    shown = ", ".join(str(n) for n in per_sweep[:8]) + (", ..." if len(per_sweep) > 8 else "")
    return f"{shown} (all after {len(per_sweep)} sweep{'s' if len(per_sweep) > 1 else ''})"


# 3. Recall -----------------------------------------------------------------------------


@dataclass
class RecallFigures:
    requests: int
    round_trips: int
    read_units: float
    block_chars: int
    operations: str
    chain: str
    search: SearchStatus
    passages: int  # passages the block shows
    shown_hits: set[str]  # the messages they show as hits (sort keys)
    shown_context: set[str]  # those they show as a hit's context (the message before it)
    slowest_ms: float  # the slowest request, simulated latency included
    batch_read_units: float  # those of its BatchGetItem (search's read-back of its hits)


def measure_recall(
    lab: Lab,
    world: World,
    participants: list[str] | None,
    query: str | None = None,
    persona_id: str | None = None,
) -> RecallFigures:
    request = RecallRequest(
        guild_id=gw.GUILD,
        channel_id=gw.CHANNEL,
        user_id=gw.ALICE,
        participants=participants,
        query=query,
        persona_id=persona_id,
    )
    recaller = world.services.recaller
    recaller.recall(request)  # warm-up: the recall thread pool starts its threads
    lab.meter.take()
    with serialized_moto(), lab.meter.simulated_latency(SIMULATED_LATENCY_S):
        result = recaller.recall(request)
    requests = lab.meter.take()
    chain = longest_chain(requests)
    return RecallFigures(
        requests=len(requests),
        round_trips=len(chain),
        read_units=sum(read_units(r) for r in requests),
        block_chars=len(result.memory),
        operations=operations(requests),
        chain=" -> ".join(describe(r) for r in chain),
        search=result.search,
        passages=len(result.passages),
        shown_hits={p.provenance[-1] for p in result.passages if p.provenance},
        shown_context={sk for p in result.passages for sk in p.provenance[:-1]},
        slowest_ms=max(((r.ended - r.started) * 1000 for r in requests), default=0.0),
        batch_read_units=sum(read_units(r) for r in requests if r.operation == "BatchGetItem"),
    )


def recall_world(lab: Lab, observations: int, facts_per_user: int) -> World:
    world = lab.world()
    seed_history(world, observations, facts_per_user)
    return world


def recall_rows(left: RecallFigures, right: RecallFigures) -> list[tuple[object, ...]]:
    return compared(
        [
            ("DynamoDB requests", left.requests, right.requests),
            ("sequential round trips", left.round_trips, right.round_trips),
            ("estimated read units", left.read_units, right.read_units),
            ("memory block characters", left.block_chars, right.block_chars),
        ]
    )


def bench_recall(lab: Lab) -> None:
    facts_a = 20
    young = measure_recall(lab, recall_world(lab, 100, facts_a), None)
    old = measure_recall(lab, recall_world(lab, 10_000, facts_a), None)
    print_table(
        "3a. Recall, participants derived from the channel: 100 vs 10,000 observations",
        ["figure", "100 obs", "10,000 obs", "ratio"],
        recall_rows(young, old),
        [
            f"requests: {young.operations} (100 obs); {old.operations} (10,000 obs).",
            f"longest chain: {old.chain}.",
            f"Each channel: 3 speakers with {facts_a} active facts each, 3 pins, 10 episodes.",
        ],
    )

    few = measure_recall(lab, recall_world(lab, 100, 10), SPEAKERS)
    many = measure_recall(lab, recall_world(lab, 100, 1_000), SPEAKERS)
    shown = Settings().recall_facts_per_person
    window = shown * FACT_WINDOW_FACTOR
    print_table(
        "3b. Recall, 3 participants given explicitly: 10 vs 1,000 active facts per user",
        ["figure", "10 facts", "1,000 facts", "ratio"],
        recall_rows(few, many),
        [
            f"requests: {few.operations} (10 facts); {many.operations} (1,000 facts).",
            f"longest chain: {many.chain}.",
            f"Recall reads at most {window} facts per person ({shown} shown x window factor"
            f" {FACT_WINDOW_FACTOR}), the newest;",
            "then ranks them by hits and recency. More facts beyond that window cost nothing.",
            "Each channel: 100 observations, 3 pins, 10 episodes.",
        ],
    )
    bench_recall_query(lab)
    bench_full_block(lab)
    bench_persona(lab)
    print("Footnotes")
    print("=========")
    print(
        f"  Round trips: each request is held {SIMULATED_LATENCY_S * 1000:.0f} ms (simulated network)"
        " so the reads Recaller\n  issues side by side on its thread pool really overlap; the figure"
        " is the longest chain of\n  requests each started after the previous one ended: what the"
        " caller waits for in sequence."
    )
    print(
        "  Read units are an ESTIMATE: an item's size is taken as the sum of the UTF-8 lengths of"
        "\n  its attribute names and values as returned; per Query/Scan the total is rounded up to"
        "\n  4 KB units (at least one), per GetItem/BatchGetItem each item is rounded up on its own;"
        "\n  x0.5 for eventually consistent reads (every recall read is; GSI queries always are)."
        "\n  DynamoDB charges the full item even when a projection returns part of it."
    )
    print()


# 3c. Recall with a query: search over the whole history ---------------------------------


@dataclass
class QueryFigures:
    recall: RecallFigures
    early_found: str  # how the block shows the early message: as a hit, as context, or not
    hits: int  # what the index returned for the query (at most search_depth(settings))
    search_ms: float  # the in-process index search alone, median of SEARCH_TIMINGS
    seeding_s: tuple[float, float]  # seconds to fill the table, then the index
    matching: int  # passages that share a token with the query


def indexed_world(lab: Lab, observations: int) -> tuple[World, str, tuple[float, float], int]:
    """The world of table 3a with varied messages, every one indexed as a message passage:
    the world, the early message's sort key, the seconds seeding took, and how many
    passages share a token with QUERY."""
    started = time.perf_counter()
    world = lab.world()
    history = seed_history(world, observations, 20, varied_lines(seed=observations))
    table_s = time.perf_counter() - started
    passages = message_passages(history, scope_of(gw.GUILD), gw.BOT)
    for start in range(0, len(passages), INDEX_BATCH):
        world.index.add(passages[start : start + INDEX_BATCH])
    seeding = (table_s, time.perf_counter() - started - table_s)
    wanted = set(tokens(QUERY))
    matching = sum(1 for p in passages if wanted.intersection(tokens(p.text)))
    return world, history[EARLY_MESSAGE].sk, seeding, matching


def timed_search(world: World) -> tuple[float, int]:
    """The median milliseconds of the index search recall runs for QUERY, and its hits."""
    services = world.services
    leg = SearchLeg(world.index, services.repository, services.settings)
    query = leg.query_for(gw.GUILD, gw.CHANNEL, QUERY, world.clock.now_ms())
    timings, hits = [], 0
    for _ in range(SEARCH_TIMINGS):
        started = time.perf_counter()
        hits = len(world.index.search(query))
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings), hits


def measure_query(lab: Lab, observations: int) -> QueryFigures:
    world, early, seeding, matching = indexed_world(lab, observations)
    search_ms, hits = timed_search(world)
    recall = measure_recall(lab, world, None, QUERY)
    return QueryFigures(recall, _shown(early, recall), hits, search_ms, seeding, matching)


def _shown(sk: str, recall: RecallFigures) -> str:
    if sk in recall.shown_hits:
        return "yes, a hit"
    return "yes, as context" if sk in recall.shown_context else "no"


SATURATED_HISTORY = 1_000


def bench_recall_query(lab: Lab) -> None:
    small, large = 100, 100_000
    young = measure_query(lab, small)
    old = measure_query(lab, large)
    # A history where search already returns its full depth: beyond it, the two ends differ
    # by the hits search returns, not by the length of the history.
    saturated = measure_query(lab, SATURATED_HISTORY)
    a, b = young.recall, old.recall
    rows = recall_rows(a, b)
    rows[3:3] = compared(
        [("  of which the search's read-back", a.batch_read_units, b.batch_read_units)]
    )
    rows += [
        ("search status (RecallResult.search)", a.search.value, b.search.value, ""),
        ("passages sharing a word with the query", young.matching, old.matching, ""),
        ("index hits checked against the table", young.hits, old.hits, ratio(young.hits, old.hits)),
        ("passages shown", a.passages, b.passages, ""),
        ("the early message found", young.early_found, old.early_found, ""),
        (
            f"in-process index search, ms (median of {SEARCH_TIMINGS})",
            young.search_ms,
            old.search_ms,
            ratio(young.search_ms, old.search_ms),
        ),
    ]
    table_s, index_s = old.seeding_s
    as_context = [
        "'as context': the block shows the early message as the context of the message after it",
        "(a short message's passage holds the one before it), whose passage outranked its own.",
    ]
    if "yes, as context" not in (young.early_found, old.early_found):
        as_context = []
    print_table(
        "3c. Recall with a query: 100 vs 100,000 observations in the channel",
        ["figure", "100 obs", "100,000 obs", "ratio"],
        rows,
        [
            f'query: "{QUERY}"',
            f"the early message, #{EARLY_MESSAGE} of each history:",
            f'  "{EARLY_TEXT}"',
            f"requests: {a.operations} (100 obs); {b.operations} (100,000 obs).",
            f"At {SATURATED_HISTORY:,} obs, where {saturated.matching} passages share a word with"
            f" the query and search already returns {saturated.hits} hits:"
            f" {saturated.recall.requests} requests,",
            f"{saturated.recall.round_trips} round trips ({saturated.recall.chain}),"
            f" {saturated.recall.read_units:.2f} read units. Past that depth",
            "the history's length adds nothing: read units then vary with the hits (how many",
            "carry the message before them, how many neighbours share one), within the bound below.",
            f"longest chain: {b.chain}.",
            "The search's read-back is strongly consistent BatchGetItem (100 keys each) of its hits' sources",
            f"(a message and the one before it, and their delete marks): at most"
            f" {search_depth(Settings())} hits with the default budgets, so at most"
            f" {4 * search_depth(Settings())} keys",
            "however long the history; fewer where hits are neighbours and share a message, as",
            "among 100.",
            "The index search runs in process (SQLite FTS5) before that BatchGetItem: it is no",
            "DynamoDB round trip and is in none of the figures above but the last row. FTS5 ranks",
            "every passage that shares a word with the query, so its time grows with them.",
            *as_context,
            f"Each channel: the world of 3a, its messages {MESSAGE_WORDS[0]} to {MESSAGE_WORDS[1]}"
            f" words drawn from a {len(VOCABULARY)}-word",
            "vocabulary (the query's 'bread' and 'Sunday' among them), each indexed as a passage.",
            f"Seeding 100,000 observations: {table_s:.1f} s into the table, then {index_s:.1f} s"
            " to build and",
            f"index their passages ({INDEX_BATCH:,} per add).",
            f"MEMORY_SEARCH_TIMEOUT_MS is {SEARCH_TIMEOUT_MS:,} here (default"
            f" {Settings().search_timeout_ms}). The recall's slowest request took",
            f"{b.slowest_ms:,.0f} ms at 100,000 obs ({a.slowest_ms:,.0f} ms at 100), waiting on"
            " the serialized moto, which sorts",
            "the whole partition in Python for each Query (DynamoDB seeks the key range): the",
            "default budget would cut the search off there.",
        ],
    )


# 3d. The largest block: every section full -------------------------------------------

# DiscoClaw's published worst case for its assembled memory context, in characters.
DISCOCLAW_WORST_CASE_CHARS = 8_600
FULL_PARTICIPANTS = 8  # MEMORY_RECALL_MAX_PARTICIPANTS


def full_world(lab: Lab) -> tuple[World, list[str]]:
    """Every section over its budget: long pins, a summary at its cap, 8 people with 20 facts
    each and short-term entries in 3 other public channels, 500 indexed messages the query
    matches, the episode cap."""
    world = lab.world()
    history = seed_history(world, 500, 20, varied_lines(seed=3))
    world.index.add(message_passages(history, scope_of(gw.GUILD), gw.BOT))
    repository, now = world.services.repository, world.clock.now_ms()
    people = SPEAKERS + [f"30000000000000009{n}" for n in range(FULL_PARTICIPANTS - 3)]
    put_in_moto(world, (fact_item(p, i, 20, world.clock) for p in people[3:] for i in range(20)))
    for n in range(8):
        repository.put_pin(
            Pin(
                pin_id=f"long{n}",
                scope=gw.GUILD,
                target="global",
                text=f"Rule {n}: " + "be kind and keep spoilers in their channel; " * 3,
                created_ms=now,
            )
        )
    sentences = " ".join(
        f"In week {n} the raid team planned route {n} and who heals." for n in range(60)
    )
    summary = ChannelSummary(
        channel_id=gw.CHANNEL,
        episode_id="summary",
        sk=keys.SUMMARY_SK,
        summary=sentences[: world.services.settings.summary_max_chars],
        participant_ids=SPEAKERS,
        start_ms=T0 - DAY_MS,
        end_ms=now,
        created_ms=now,
        expires_at=epoch_seconds(now + 90 * DAY_MS),
    )
    put_episode(repository, summary, gw.GUILD)
    elsewhere: list[Observation] = []
    entries: list[ShortTermEntry] = []
    for p_index, person in enumerate(people):
        for c in range(3):
            channel = f"20000000000000090{c}"
            said = [
                consumed_observation(
                    p_index, now - 60_000 * (c * 2 + k + 1), world.clock, "x"
                ).model_copy(
                    update={
                        "channel_id": channel,
                        "author_id": person,
                        "author_name": f"Member {p_index}",
                        "content": f"in channel {c} I'm still fixing the deploy script, step {k}: "
                        + "checking the logs again " * 4,
                    }
                )
                for k in range(2)
            ]
            elsewhere += said
            entries.append(
                ShortTermEntry(
                    scope=gw.GUILD,
                    user_id=person,
                    channel_id=channel,
                    observation_sks=[o.sk for o in said],
                    messages=2,
                    at_ms=max(o.at_ms for o in said),
                    expires_at=epoch_seconds(now + 6 * 3_600_000),
                )
            )
    put_in_moto(world, (observation_values(o, pending=False) for o in elsewhere))
    for entry in entries:
        repository.record_short_term(entry, world.services.settings.short_term_per_person)
    return world, people


def bench_full_block(lab: Lab) -> None:
    world, people = full_world(lab)
    figures = measure_recall(lab, world, people, QUERY)
    result = world.services.recaller.recall(
        RecallRequest(
            guild_id=gw.GUILD,
            channel_id=gw.CHANNEL,
            user_id=gw.ALICE,
            participants=people,
            query=QUERY,
        )
    )
    settings = world.services.settings
    sections = {block.split("\n", 1)[0]: len(block) for block in result.memory.split("\n\n")}
    budgeted = [
        (PIN_HEADING, settings.recall_pin_chars),
        (SUMMARY_HEADING, settings.recall_summary_chars),
        (FACT_HEADING, settings.recall_fact_chars),
        (ELSEWHERE_HEADING, settings.recall_short_term_chars),
        (PASSAGE_HEADING, settings.recall_search_chars),
        (EPISODE_HEADING, settings.recall_episode_chars),
    ]
    rows: list[tuple[object, ...]] = [
        (f"  {heading}", sections.get(heading, 0), budget) for heading, budget in budgeted
    ]
    header_footer = len(result.memory) - sum(sections.get(h, 0) for h, _ in budgeted)
    budgets = sum(budget for _, budget in budgeted)
    bound = budgets + header_footer
    rows += [
        ("  header, footer and blank lines", header_footer, ""),
        ("whole memory block", len(result.memory), f"{budgets:,} + header"),
        ("its bound: every budget spent, and the header", bound, ""),
        ("DiscoClaw's published worst case", DISCOCLAW_WORST_CASE_CHARS, ""),
        ("DiscoClaw's worst case / this bound", ratio(bound, DISCOCLAW_WORST_CASE_CHARS), ""),
        ("DynamoDB requests", figures.requests, ""),
        ("sequential round trips", figures.round_trips, "at most 3"),
        ("estimated read units", figures.read_units, ""),
    ]
    print_table(
        "3d. The largest memory block: every section over its budget (default budgets)",
        ["figure", "characters or count", "budget"],
        rows,
        [
            f"{len(people)} participants (MEMORY_RECALL_MAX_PARTICIPANTS) with 20 facts each and"
            " short-term entries in 3 other",
            "public channels; 8 long pins; a channel summary at its 2,000-character cap; 500"
            " indexed messages the",
            "query matches; the episode cap. The passages also take the room facts and episodes"
            " leave unused, so",
            "the block never exceeds the sum of the budgets plus its header.",
            f"requests: {figures.operations}.",
            f"longest chain: {figures.chain}.",
        ],
    )


# 3e. Recall with a persona ----------------------------------------------------------------

PERSONA = Persona(
    persona_id="helpdesk",
    lineage_id="bench-help",
    name="Helpdesk",
    prompt="You are the helpdesk.\n{memory}",
    guild_id=gw.GUILD,
    channels=[gw.CHANNEL],
)


def persona_world(lab: Lab) -> World:
    """The world of 3b (100 observations, 20 facts per speaker) with a persona answering in
    the channel: 20 facts it keeps about each speaker and 20 of its own knowledge."""
    world = recall_world(lab, 100, 20)
    world.services.repository.put_persona(PERSONA, replaces_ms=None)
    persona_scope = keys.persona_scope(gw.GUILD, PERSONA.lineage_id)
    subjects = [*SPEAKERS, keys.PERSONA_SUBJECT]
    put_in_moto(
        world,
        (
            fact_item(subject, i, 20, world.clock)
            | {
                "pk": keys.user_pk(persona_scope, subject),
                "scope": persona_scope,
                "lineage_id": PERSONA.lineage_id,
                "memory_scope": (
                    MemoryScope.PERSONA
                    if subject == keys.PERSONA_SUBJECT
                    else MemoryScope.PERSONA_USER
                ).value,
            }
            for subject in subjects
            for i in range(20)
        ),
    )
    return world


def bench_persona(lab: Lab) -> None:
    world = persona_world(lab)
    without = measure_recall(lab, world, SPEAKERS)
    with_persona = measure_recall(lab, world, SPEAKERS, persona_id=PERSONA.persona_id)
    print_table(
        "3e. Recall, 3 participants given explicitly: without and with a persona",
        ["figure", "no persona", "persona", "ratio"],
        recall_rows(without, with_persona),
        [
            f"requests: {without.operations} (no persona); {with_persona.operations} (persona).",
            f"longest chain with the persona: {with_persona.chain}.",
            "The persona is read beside the first wave (one Query of the server's personas); what",
            "it knows of each participant and its own knowledge are read beside their own facts.",
            "Each speaker: 20 facts of their own, 20 the persona keeps about them; 20 of its own.",
        ],
    )


# 7. Answering a mention ------------------------------------------------------------------


class TimedChatModel:
    """Answers at once and notes when it was asked, and what: the path ends at the model."""

    def __init__(self) -> None:
        self.asked_at = 0.0
        self.request: ChatRequest | None = None

    def reply(self, request: ChatRequest) -> ChatReply:
        self.asked_at = time.perf_counter()
        self.request = request
        return ChatReply(text="ok")


class SilentPoster:
    """Discord's side, left out: the path measured ends before the answer is posted."""

    def trigger_typing(self, channel_id: str) -> None:
        pass

    def create_message(self, channel_id: str, content: str, **_: Any) -> dict[str, Any]:
        return {}

    def edit_original_response(
        self, application_id: str, token: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        return None


def bench_answer(lab: Lab) -> None:
    """From the ingest of a mention to the chat model's request, in a channel with history."""
    world = recall_world(lab, 2_000, 40)
    services, clock = world.services, world.clock
    model = TimedChatModel()
    answerer = Answerer(
        services,
        model,
        SilentPoster(),
        AnswerRateLimiter(lab.client, services.settings.table_name, services.settings, clock),
        system_prompt_source(services.settings),
    )
    at_ms = clock.now_ms() + 60_000
    event = gw.message(gw.ALICE, f"<@{gw.BOT}> where do I like hiking?", at_ms)
    event["d"]["mentions"] = [gw.user(gw.BOT, bot=True)]

    def one(event: dict[str, Any]) -> tuple[float, list[Request]]:
        lab.meter.take()
        with serialized_moto(), lab.meter.simulated_latency(SIMULATED_LATENCY_S):
            started = time.perf_counter()
            services.recorder.record([event])  # IngestFunction's write
            trigger = answer_trigger(event, gw.BOT)
            assert trigger is not None
            question, reply = question_of({"answer": trigger.model_dump(mode="json")})
            answerer.answer(question, reply)
        before_model = [r for r in lab.meter.take() if r.started <= model.asked_at]
        return (model.asked_at - started) * 1000, before_model

    one(event)  # warm-up: thread pools, the rules of pydantic
    second = gw.message(gw.ALICE, f"<@{gw.BOT}> and what do I do for work?", at_ms + 1000)
    second["d"]["mentions"] = event["d"]["mentions"]
    elapsed_ms, requests = one(second)
    chain = longest_chain(requests)
    request = model.request
    assert request is not None
    settings = services.settings
    budgets = {
        "pins": settings.recall_pin_chars,
        "channel summary": settings.recall_summary_chars,
        "facts": settings.recall_fact_chars,
        "other channels": settings.recall_short_term_chars,
        "episodes": settings.recall_episode_chars,
        "passages": settings.recall_search_chars,
        "history": settings.answer_history_chars,
    }
    print_table(
        "7. Answering a mention: from its ingest to the chat model's request",
        ["figure", "value"],
        [
            ("time, ms (model excluded; 20 ms per DynamoDB request)", f"{elapsed_ms:.0f}"),
            ("DynamoDB requests", len(requests)),
            ("sequential round trips (target: at most 4)", len(chain)),
            ("system prompt, characters", len(request.system)),
            ("the parts' budgets together, characters", sum(budgets.values())),
            ("user turn, characters", len(request.turns[-1].content)),
        ],
        [
            f"requests: {operations(requests)}.",
            f"longest chain: {' -> '.join(describe(r) for r in chain)}.",
            "The chain: the mention's PutItem (ingest); the rate limit's two counters, the",
            "channel's persona, the guild's staff record and the mention's stored roles side by",
            "side; recall's first wave (the channel summary among",
            "it), the channel's history and the speaker's facts side by side; then the facts",
            "and short-term entries of the people recall found. The search runs in process",
            "here (SQLite FTS5); its read-back is one more BatchGetItem when it finds something.",
            f"Budgets: {', '.join(f'{k} {v:,}' for k, v in budgets.items())};",
            f"the person note adds at most {settings.answer_person_facts} facts; the template is"
            " the default prompt.",
        ],
    )


# 4. Erasure ----------------------------------------------------------------------------

ERASED = "1300000000000000077"  # the person erased: not one of the speakers
ERASED_ITEMS = 10


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


def erasure_requests(lab: Lab, other_messages: int) -> list[Request]:
    """Erase a person with ERASED_ITEMS items (messages, a fact, a profile) in a channel that
    holds `other_messages` messages of others, 3 speakers' facts, 3 pins and 10 episodes."""
    from botmemory.people.erasure import Eraser
    from botmemory.people.optout import person_hash

    world = lab.world()
    seed_history(world, other_messages, 20)
    repository, now = world.services.repository, world.clock.now_ms()
    messages = [
        Observation(
            channel_id=gw.CHANNEL,
            scope=gw.GUILD,
            sk=observation_sk(now + n, ObservationKind.MESSAGE, gw.snowflake(now + n)),
            kind=ObservationKind.MESSAGE,
            at_ms=now + n,
            author_id=ERASED,
            author_name="Zephyrine",
            message_id=gw.snowflake(now + n),
            content="I keep bees on the roof",
        )
        for n in range(ERASED_ITEMS - 2)
    ]
    put_items(repository, (observation_values(o, pending=False) for o in messages))
    put_items(
        repository,
        [
            fact_item(ERASED, 0, 1, world.clock),
            {
                "pk": keys.user_pk(gw.GUILD, ERASED),
                "sk": keys.PROFILE_SK,
                "user_id": ERASED,
                "scope": gw.GUILD,
                "display_name": "Zephyrine",
                "channels": {gw.CHANNEL},
            },
        ],
    )
    lab.meter.take()
    eraser = Eraser(repository, world.clock, lambda u: person_hash(u, b"bench-hash-key-0123456789"))
    eraser.erase(ERASED, ["Zephyrine"])
    return lab.meter.take()


def bench_erasure(lab: Lab) -> None:
    small, large = 100, 10_000
    young = erasure_requests(lab, small)
    old = erasure_requests(lab, large)
    print_table(
        f"4. Erasure of a person with {ERASED_ITEMS} items: 100 vs 10,000 other messages",
        ["figure", "100 msgs", "10,000 msgs", "ratio"],
        compared(
            [
                ("other messages in the person's channel", small, large),
                ("read requests", reads(young), reads(old)),
                ("items read", item_reads(young), item_reads(old)),
                ("write requests", writes(young), writes(old)),
                ("items written or deleted", item_writes(young), item_writes(old)),
            ]
        ),
        [
            f"requests: {operations(old)} (10,000 msgs).",
            "Erasure reads the person's own items (the by_user index), the items that name them",
            "(Named pointers), the episodes of their channels (at most 50 per channel) and the",
            "replay-protection records; never a channel's messages. Each channel also holds",
            "3 speakers with 20 facts each, 3 pins and 10 episodes.",
        ],
    )


def main() -> int:
    started = time.perf_counter()
    with mock_aws(), fast_dynamodb():
        lab = Lab(boto3.client("dynamodb", region_name=REGION))
        bench_ingest(lab)
        bench_stream(lab)
        bench_model_input(lab)
        bench_hostile(lab)
        bench_recall(lab)
        bench_erasure(lab)
        lab.close()
    bench_cold_start()
    bench_layer()
    with mock_aws(), fast_dynamodb():
        lab = Lab(boto3.client("dynamodb", region_name=REGION))
        bench_answer(lab)
        lab.close()
    print(f"(bench finished in {time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
