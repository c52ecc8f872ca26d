"""Tables 8d and 8e, and the keyword leg's lines of 8a and 8b: what the deployed keyword
shards (botmemory.search.keyword_shards) cost to write, keep and read.

Measured (`measure_keyword_writes`): chat messages in CHANNELS channels of one server,
round robin, the first REAL_MESSAGES through ingest and consolidation (a round per full
batch) with the deployed index (eval/paths.py's: S3 Vectors on its in-memory service, the
keyword shards on moto's S3 in this process), their rounds' index writes recorded; then
those writes again, the messages' passages re-keyed (new ids, later times; the facts the
same, learned again), until MESSAGES. Every S3 request is metered on the client
(DynamoMeter.watch). Each round rewrites the shards it touches, the whole file: its
channel's and the server's facts shard, so the bytes uploaded per round grow with the
channel's history (the last LAST messages show it). The arithmetic (`keyword_rows`,
`idle_rows`) is pure, so tests/bench checks it on known input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import boto3
from deployed_recall import Swapped
from embedder import CountingEmbedder, per_thousand
from meter import S3_OPERATIONS, Request, S3Counts
from tables import GB, MILLION, print_table
from world import QUERY, SPEAKERS, Lab, chat_line, varied_lines

from botmemory.clock import epoch_seconds
from botmemory.records import scope_of
from botmemory.runtime import build_services
from botmemory.search.deployed import DeployedSearchIndex
from botmemory.search.keyword_layout import FACTS_SHARD, SHARD_SUFFIX
from botmemory.search.port import Passage, SearchIndex, SearchQuery
from eval.paths import DEPLOYED, KEYWORD_BUCKET, KEYWORD_PREFIX, search_paths
from localrun import gateway as gw
from localrun.fakeaws import REGION

# moto takes most of a second a round, so only the first REAL_MESSAGES go through ingest and
# consolidation; their rounds' index writes are then made again, re-keyed, up to MESSAGES.
REAL_MESSAGES = 200
MESSAGES = 5_000
CHANNELS = 2
LAST = 1_000  # the replay's last messages, counted apart: the shards are biggest then
FACTS_EVERY = 5  # one message in five is a chat line the rules model learns a fact from

# One line of a cost table: item, quantity, dollars, how (cost.Row's fields).
CostLine = tuple[str, str, float, str]


@dataclass
class KeywordUsage:
    """What MESSAGES messages cost the keyword shards, as measured."""

    messages: int
    real: int = 0  # of which through ingest and consolidation (the rest replayed)
    channels: int = 0
    rounds: int = 0  # consolidation rounds that wrote to the index (replayed ones too)
    s3: S3Counts = field(default_factory=S3Counts)  # every S3 request of the replay
    last_messages: int = 0
    last: S3Counts = field(default_factory=S3Counts)  # those of the last `last_messages`
    shard_bytes: int = 0  # the shards in S3 after the replay
    shards: int = 0
    largest_shard: int = 0  # bytes
    query_gets: int = 0  # GetObject of one channel search (the answer path, per query)
    query_lists: int = 0  # and its ListObjectsV2


def channel_ids(count: int) -> list[str]:
    return [f"25{n:016d}" for n in range(count)]


def _line(messages: int) -> Callable[[int], str]:
    varied = varied_lines(seed=messages)
    return lambda i: chat_line(i) if i % FACTS_EVERY == 0 else varied(i)


@dataclass
class IndexCall:
    """One write consolidation made to the index: an add or a remove."""

    passages: list[Passage] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    scope: str | None = None


class Recording(Swapped):
    """A SearchIndex passing every call to `index`, its writes kept in `calls`."""

    def __init__(self, index: SearchIndex) -> None:
        super().__init__(index)
        self.calls: list[IndexCall] = []

    def add(self, passages: Sequence[Passage]) -> int:
        self.calls.append(IndexCall(passages=list(passages)))
        return self.index.add(passages)

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        removed = list(ids)
        self.calls.append(IndexCall(removed=removed, scope=scope))
        return self.index.remove(removed, scope=scope)


def _is_fact(passage_id: str) -> bool:
    return passage_id.startswith("F#")  # a fact belongs to no channel


def rekeyed_id(passage_id: str, copy: int, shift_ms: int) -> str:
    """A passage id of a replayed round: a message's made new and `shift_ms` later (its
    snowflake's time decides its month's shard), an episode's or a summary's made new (same
    channel); a fact's kept, as the same facts are learned again (upserts)."""
    if _is_fact(passage_id):
        return passage_id
    kind, channel, item = passage_id.split("#", 2)
    if kind == "M":  # the snowflake's time moves on; its process bits tell copies apart
        return f"M#{channel}#{int(item) + (shift_ms << 22) + (copy << 12)}"
    return f"{passage_id}r{copy}"


def rekeyed(passage: Passage, copy: int, shift_ms: int) -> Passage:
    if _is_fact(passage.id):
        return passage
    return passage.model_copy(
        update={
            "id": rekeyed_id(passage.id, copy, shift_ms),
            "time_ms": passage.time_ms + shift_ms,
        }
    )


def replay(index: SearchIndex, calls: Sequence[IndexCall], copy: int, shift_ms: int) -> None:
    """The recorded writes again, as consolidation of more messages would make them."""
    for call in calls:
        if call.passages:
            index.add([rekeyed(p, copy, shift_ms) for p in call.passages])
        if call.removed:
            index.remove([rekeyed_id(i, copy, shift_ms) for i in call.removed], scope=call.scope)


def measure_keyword_writes(
    lab: Lab,
    messages: int = MESSAGES,
    real: int = REAL_MESSAGES,
    channels: int = CHANNELS,
    last: int = LAST,
) -> KeywordUsage:
    """`real` messages through ingest and consolidation, then their rounds' index writes
    again until `messages` (a multiple of `real`), every S3 request counted; then the
    shards' sizes and one search's GETs."""
    world = lab.world()
    s3 = boto3.client("s3", region_name=REGION)
    lab.meter.watch(s3, "s3")
    paths = search_paths(CountingEmbedder(), s3)
    deployed = paths.indexes[DEPLOYED]
    if not isinstance(deployed, DeployedSearchIndex):
        raise TypeError(f"the {DEPLOYED} path is not the deployed hybrid: {deployed!r}")
    recording = Recording(deployed)
    services = build_services(
        world.services.settings,
        dynamodb=lab.client,
        clock=world.clock,
        model=world.model,
        search_index=recording,
    )
    every = services.settings.consolidate_every
    ids, line = channel_ids(channels), _line(real)
    copies = max(1, messages // real)
    # Counted in whole copies of the real messages: the last `last`, rounded down to them.
    usage = KeywordUsage(
        messages=messages,
        real=real,
        channels=channels,
        last_messages=real * max(1, min(last, messages) // real),
    )
    timeline: list[tuple[int, list[Request]]] = []  # (messages so far, S3 requests)
    lab.meter.take()
    try:
        started = world.clock.now_ms()
        for i in range(real):
            channel = ids[i % channels]
            event = gw.message(SPEAKERS[i % 3], line(i), world.clock.now_ms(), channel=channel)
            services.recorder.record([event])
            world.clock.advance(seconds=1)
            if (i // channels + 1) % every == 0:  # a full batch waits in this channel
                outcomes = services.consolidator.consolidate(channel)
                usage.rounds += sum(o.index_writes > 0 for o in outcomes)
            timeline.append((i + 1, _s3_of(lab.meter.take())))
        span = world.clock.now_ms() - started
        for copy in range(1, copies):
            replay(deployed, recording.calls, copy, copy * span)
            timeline.append(((copy + 1) * real, _s3_of(lab.meter.take())))
        usage.messages = copies * real
        usage.rounds *= copies
        cut = usage.messages - usage.last_messages
        usage.s3 = S3Counts.of([r for _, taken in timeline for r in taken])
        usage.last = S3Counts.of([r for done, taken in timeline if done > cut for r in taken])
        sizes = _shard_sizes(s3)
        usage.shards, usage.shard_bytes = len(sizes), sum(sizes)
        usage.largest_shard = max(sizes, default=0)
        lab.meter.take()
        query = SearchQuery(
            scope=scope_of(gw.GUILD),
            channel_ids=[ids[0], ""],
            text=QUERY,
            now_s=epoch_seconds(world.clock.now_ms()),
        )
        deployed.keywords.search(query)
        asked = S3Counts.of(lab.meter.take())
        usage.query_gets, usage.query_lists = asked.gets, asked.lists
    finally:
        paths.close()
    return usage


def _s3_of(requests: Sequence[Request]) -> list[Request]:
    return [r for r in requests if r.operation in S3_OPERATIONS]


def _shard_sizes(s3: Any) -> list[int]:
    """Each shard's bytes as S3 holds them (one listing page: a few shards here)."""
    listed = s3.list_objects_v2(Bucket=KEYWORD_BUCKET, Prefix=f"{KEYWORD_PREFIX}/")
    return [
        int(o["Size"]) for o in listed.get("Contents", []) if str(o["Key"]).endswith(SHARD_SUFFIX)
    ]


# The arithmetic --------------------------------------------------------------------------


def request_dollars(s3: S3Counts, scale: float, prices: dict[str, float]) -> float:
    """S3's request prices on these counts times `scale`: every GetObject priced (304 and
    404 too), PutObject and ListObjectsV2 at the PUT/LIST rate, DeleteObjects free."""
    return (
        scale * s3.puts / 1000 * prices["s3_put_per_thousand"]
        + scale * s3.gets / 1000 * prices["s3_get_per_thousand"]
        + scale * s3.lists / 1000 * prices["s3_list_per_thousand"]
    )


def stored_gb(usage: KeywordUsage) -> float:
    """What a million messages leave in the shards, GB."""
    return MILLION / usage.messages * usage.shard_bytes / GB


def keyword_rows(usage: KeywordUsage, prices: dict[str, float]) -> list[CostLine]:
    """8a's lines: the requests of writing a million messages, a month of their shards."""
    scale = MILLION / usage.messages
    s3 = usage.s3
    gb = stored_gb(usage)
    return [
        (
            "S3 keyword shards requests",
            f"{scale * s3.puts:,.0f} PUT, {scale * s3.gets:,.0f} GET, {scale * s3.lists:,.0f} LIST",
            request_dollars(s3, scale, prices),
            "each round: its shards read (304) and rewritten",
        ),
        (
            "S3 keyword shards storage",
            f"{gb:,.3f} GB x 1 month",
            gb * prices["s3_storage_gb_month"],
            "a month of what they leave",
        ),
    ]


def answer_line(usage: KeywordUsage, prices: dict[str, float]) -> CostLine:
    """8b's line: the requests of 1,000 searches (the channel's listing, the facts shard's
    GET, 304 or not, and any shard changed since the container read it)."""
    gets, lists = 1000 * usage.query_gets, 1000 * usage.query_lists
    return (
        "S3 keyword shards LIST + GET",
        f"{lists:,} LIST, {gets:,} GET",
        lists / 1000 * prices["s3_list_per_thousand"] + gets / 1000 * prices["s3_get_per_thousand"],
        f"a recall lists its channel's shards ({usage.query_lists}) and asks for the facts'"
        f" ({usage.query_gets} GET)",
    )


def idle_rows(
    usage: KeywordUsage, vector_gb: float, prices: dict[str, float]
) -> list[tuple[str, str, float]]:
    """8e: a month with no traffic, a million messages held: storage alone (neither leg
    has provisioned capacity); `vector_gb` is what S3 Vectors holds for them."""
    gb = stored_gb(usage)
    return [
        ("S3 keyword shards", f"{gb:,.3f} GB", gb * prices["s3_storage_gb_month"]),
        ("S3 Vectors", f"{vector_gb:,.3f} GB", vector_gb * prices["s3vectors_storage_gb_month"]),
        ("provisioned capacity (either leg)", "none", 0.0),
    ]


def count_rows(usage: KeywordUsage) -> list[tuple[object, ...]]:
    """8d's rows: per 1,000 messages over the whole replay and over its last messages."""

    def both(pick: Any) -> tuple[float, float]:
        return (
            round(per_thousand(pick(usage.s3), usage.messages), 1),
            round(per_thousand(pick(usage.last), usage.last_messages), 1),
        )

    rows: list[tuple[object, ...]] = [
        ("S3 PutObject", *both(lambda c: c.puts)),
        ("  of which lost to another writer (412, redone)", *both(lambda c: c.lost_races)),
        ("S3 GetObject", *both(lambda c: c.gets)),
        ("  of which 304 Not Modified (the cached copy)", *both(lambda c: c.not_modified)),
        ("  of which 404 (a new shard)", *both(lambda c: c.absent)),
        ("S3 ListObjectsV2", *both(lambda c: c.lists)),
        ("S3 DeleteObjects", *both(lambda c: c.deletes)),
        ("KB uploaded", *both(lambda c: c.uploaded / 1024)),
        ("KB downloaded", *both(lambda c: c.downloaded / 1024)),
    ]
    rows.append(
        (
            "KB of shards in S3 after the replay",
            round(per_thousand(usage.shard_bytes, usage.messages) / 1024, 1),
            "",
        )
    )
    return rows


def print_keyword_tables(
    usage: KeywordUsage, vector_gb: float, prices: dict[str, float], date: str
) -> None:
    print_table(
        "8d. Writing the keyword shards: S3 requests and bytes per 1,000 messages",
        ["figure", f"all {usage.messages:,}", f"the last {usage.last_messages:,}"],
        count_rows(usage),
        [
            f"{usage.messages:,} messages in {usage.channels} channels of one server, round"
            f" robin, {usage.rounds} rounds writing to the deployed index: the first",
            f"{usage.real} through ingest and consolidation, then their rounds' index writes"
            " again (passages re-keyed,",
            "facts the same). S3 requests metered on moto's S3. One message in"
            f" {FACTS_EVERY} is a chat line the rules",
            f"model learns a fact from. {usage.shards} shards after the replay (each channel's"
            f" month of messages and episodes, and {FACTS_SHARD}),",
            f"{usage.shard_bytes / 1024:,.0f} KB in all, the largest"
            f" {usage.largest_shard / 1024:,.0f} KB.",
            "A round reads its shards (304 to the copy the container wrote) and rewrites them",
            "whole: bytes uploaded per message grow with a channel's history (the last",
            "column), requests do not. The stream's removals (SearchIndexFunction) are not in.",
        ],
    )
    rows = idle_rows(usage, vector_gb, prices)
    print_table(
        f"8e. An idle month: the search indexes of a million messages, no traffic ({date})",
        ["leg", "stored", "dollars a month"],
        [(leg, stored, f"{dollars:,.4f}") for leg, stored, dollars in rows]
        + [("total", "", f"{sum(d for _, _, d in rows):,.4f}")],
        [
            "Storage alone: neither S3 Vectors nor the shards bill provisioned capacity; what a",
            "million messages leave, as in 8a (S3 Vectors: their vectors, keys and metadata).",
        ],
    )
