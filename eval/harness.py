"""One LoCoMo conversation through the real path, then every question through recall.

Everything runs in this process: moto's DynamoDB (`mock_aws`, with `localrun.fastmoto`'s one
backup per transaction and plain JSON reads), the services `botmemory.runtime.build_services` wires, the offline
`rules` model, and a ManualClock moved along the conversation's own session dates:

- each gateway event is recorded a second after its snowflake's time; the events that fall
  within the stream's batching window (10 s in template.yaml) are one stream batch, and each
  batch is followed by `consolidate(channel)`, as ConsolidateFunction does per stream batch;
- the sweep (`rate(5 minutes)` in template.yaml) runs at every five-minute tick of the clock
  while anything could be due, so a session's tail is consolidated when the channel has been
  quiet for `MEMORY_IDLE_FLUSH_MINUTES`, as deployed; ticks in a quiet gap stop once a sweep
  found nothing to do and nothing is pending (later ticks would find nothing either);
- the questions are asked when the conversation is over and the sweep has taken everything,
  with retention and TTL filtering read at that time.

Then every question of categories 1 to 4 goes to recall, with both speakers as participants,
once per block size, and the turns each block shows are compared with the question's evidence;
the two baselines pack raw turns into the same sizes.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from botmemory.clock import ManualClock
from botmemory.consolidation.model.rules import RulesModel
from botmemory.consolidation.outcome import Outcome, Status
from botmemory.recall.block import BLOCK_FOOTER, BLOCK_HEADER
from botmemory.recall.contract import RecallRequest
from botmemory.recall.recaller import Recaller
from botmemory.recall.search_leg import SearchLeg, search_depth
from botmemory.records import Fact, scope_of
from botmemory.runtime import build_services
from botmemory.search import EMBEDDING_TIMEOUT_SECONDS
from botmemory.search.embeddings import Embedder, build_embedder, embed_query
from botmemory.search.port import SearchIndex
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings, settings_from
from botmemory.snowflake import snowflake_ms
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.schema import create_table
from eval import embedding_server
from eval.baselines import RawTurns
from eval.dataset import Conversation, Question, load_conversation
from eval.dated import TEMPORAL, answer_date, shows_date
from eval.embedding_server import EmbeddingServer, EmbeddingStats
from eval.evidence import EvidenceIndex, holds_evidence
from eval.paths import KEYWORDS, search_paths

TABLE = "LocomoEval"
STREAM_WINDOW_MS = 10_000  # ConsolidateFunction's MaximumBatchingWindowInSeconds
STREAM_BATCH = 100  # and its BatchSize
SWEEP_EVERY_MS = 5 * 60_000  # SweepFunction's rate(5 minutes)
# Search gets the setting's most, not the deployed 800 ms: here it waits on moto in this
# process on busy cores, which says nothing of DynamoDB (latency is printed apart), and a
# search cut short would count as a question lost.
EVAL_SEARCH_TIMEOUT_MS = 10_000
DELIVERY_MS = 1_000  # from a message's snowflake time to its observation in the table
DRAIN_TICKS = 12 * 24  # after the last turn, at most a day of sweeps to take what is pending
# Block sizes: today's settings, then total block sizes in characters.
DEFAULT = "today"
BLOCK_SIZES = (2_000, 4_000, 8_000)
# Section budgets at a given total size: what is left after the block's own lines, split
# between facts, passages and episodes as the defaults split them (1,600 : 2,000 : 1,200).
DEFAULT_SHARES = {
    "recall_fact_chars": 1_600,
    "recall_search_chars": 2_000,
    "recall_episode_chars": 1_200,
}
# Sections a sized block leaves out: LoCoMo has no pins; each conversation is one channel, so
# there are no short-term entries from others; and the rolling channel summary is a
# paraphrase, which the evidence check cannot credit (it counts a fact citing a turn, a
# passage holding it, an episode quoting it), so at a fixed size its room goes to those.
UNCHECKED_SECTIONS = {
    "recall_pin_chars": 0,
    "recall_summary_chars": 0,
    "recall_short_term_chars": 0,
}
# "\n\n".join([header, pins, facts, passages, episodes, footer]): room for every section.
BLOCK_OVERHEAD = len(BLOCK_HEADER) + len(BLOCK_FOOTER) + 5 * len("\n\n")


def label(chars: int | None) -> str:
    return DEFAULT if chars is None else f"{chars:,}"


def search_depth_at(chars: int) -> int:
    """The hits recall asks of the index for a block of `chars` characters."""
    return search_depth(sized_settings(Settings(), chars))


# Hits asked of the keyword leg to see where a missed question's evidence ranks: as many as
# one search may ask (SearchQuery.limit).
RANKED_HITS = 100


def sized_settings(base: Settings, total_chars: int | None) -> Settings:
    """Recall settings whose whole block is at most `total_chars` characters.

    The caps on facts per person and on episodes stay at their defaults, as deployed: the
    room they leave goes to the passages, as recall gives it (the block is never larger than
    the sum of its budgets).
    """
    if total_chars is None:
        return base
    room = total_chars - BLOCK_OVERHEAD
    whole = sum(DEFAULT_SHARES.values())
    budgets = {name: room * share // whole for name, share in DEFAULT_SHARES.items()}
    values = base.model_dump() | budgets | UNCHECKED_SECTIONS
    return Settings.model_validate(values)


@dataclass
class ReplayStats:
    turns: int = 0
    stored: int = 0
    stream_batches: int = 0
    sweeps: int = 0
    rounds: int = 0  # consolidation rounds that committed (one model call each)
    facts: int = 0  # facts of the two speakers at question time (any status)
    episodes: int = 0  # episodes the channel holds at question time
    replay_s: float = 0.0
    recall_s: float = 0.0
    passages: int = 0  # search index entries at question time
    search: dict[str, int] = field(default_factory=dict)  # recalls by search status
    embedder: str = ""  # the vector legs' embedder, "" for keywords only
    index_embedding: EmbeddingStats = field(default_factory=EmbeddingStats)  # the replay's
    query_embedding: EmbeddingStats = field(default_factory=EmbeddingStats)  # the questions'


@dataclass
class QuestionOutcome:
    conversation: str
    number: int
    category: int
    # By search path (eval.paths), then block size: the block shows an evidence turn (cited:
    # today's provenance figure), and shows it still holding the answer (held: strict).
    cited: dict[str, dict[str, bool]] = field(default_factory=dict)
    held: dict[str, dict[str, bool]] = field(default_factory=dict)
    loose: dict[str, bool] = field(default_factory=dict)  # keyword-only, + episode sources
    recency: dict[str, bool] = field(default_factory=dict)
    bm25: dict[str, bool] = field(default_factory=dict)  # whole turns: cited is held
    bm25_snippets: dict[str, bool] = field(default_factory=dict)  # held, as for recall
    block_chars: dict[str, int] = field(default_factory=dict)  # keyword-only
    # Asked for (eval.miss_ranks): a question the keyword-only block of that size misses,
    # where its evidence ranks in the keyword leg (its first hit whose own message is an
    # evidence turn, of RANKED_HITS asked); 0 when none of them is.
    miss_rank: int | None = None
    # A temporal question whose answer is a date (eval.dated): by path, then size, whether
    # the block shows that date or an evidence turn on a dated line; empty for the others.
    dated: dict[str, dict[str, bool]] = field(default_factory=dict)

    @property
    def system(self) -> dict[str, bool]:
        """The keyword-only path's cited figure, by size."""
        return self.cited.get(KEYWORDS, {})


@dataclass
class ConversationReport:
    sample_id: str
    speakers: list[str]
    unanswerable: int
    stats: ReplayStats
    questions: list[QuestionOutcome]
    latencies_ms: dict[str, list[float]]
    requests: dict[str, list[int]]


# The local stack -----------------------------------------------------------------------


class RequestCounter:
    """Counts a client's DynamoDB requests (botocore's `before-call` event), across threads."""

    def __init__(self, client: Any) -> None:
        self._count = 0
        self._lock = threading.Lock()
        client.meta.events.register("before-call.dynamodb.*", self._before)

    def _before(self, **_: Any) -> None:
        with self._lock:
            self._count += 1

    def take(self) -> int:
        with self._lock:
            taken, self._count = self._count, 0
        return taken


@contextmanager
def local_dynamodb() -> Iterator[Any]:
    """A DynamoDB client on moto, in this process, with the memory table created."""
    import boto3
    from moto import mock_aws

    from localrun.fakeaws import REGION, use_fake_aws
    from localrun.fastmoto import fast_dynamodb

    use_fake_aws("eval-person-hash-key-0123456789")
    with mock_aws(), fast_dynamodb():
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, TABLE)
        yield client


# Replay on the conversation's clock ----------------------------------------------------


def _event_ms(event: dict[str, Any]) -> int:
    return snowflake_ms(event["d"]["id"])


def stream_batches(events: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Consecutive events within one batching window (and batch size) of the first."""
    batch: list[dict[str, Any]] = []
    for event in events:
        if batch and (
            _event_ms(event) - _event_ms(batch[0]) > STREAM_WINDOW_MS or len(batch) >= STREAM_BATCH
        ):
            yield batch
            batch = []
        batch.append(event)
    if batch:
        yield batch


class Replayer:
    """Drives ingest, the stream's consolidation and the scheduled sweep along the clock."""

    def __init__(self, services: MemoryServices, clock: ManualClock, channel_id: str) -> None:
        self._services = services
        self._clock = clock
        self._channel = channel_id
        self.stats = ReplayStats()

    def replay(self, events: list[dict[str, Any]]) -> ReplayStats:
        started = time.perf_counter()
        last_ms: int | None = None
        for batch in stream_batches(events):
            if last_ms is not None:
                self._sweeps(last_ms, _event_ms(batch[0]))
            last_ms = _event_ms(batch[-1])
            self._clock.set(last_ms + DELIVERY_MS)
            self.stats.stored += self._services.recorder.record(batch).stored
            self.stats.stream_batches += 1
            self._count(self._services.consolidator.consolidate(self._channel))
        if last_ms is not None:
            self._sweeps(last_ms, last_ms + DRAIN_TICKS * SWEEP_EVERY_MS)
        self.stats.turns = len(events)
        self.stats.replay_s = time.perf_counter() - started
        return self.stats

    def _sweeps(self, after_ms: int, before_ms: int) -> None:
        """The sweep at each schedule tick in (after, before), while one could do anything."""
        tick = (after_ms + DELIVERY_MS) // SWEEP_EVERY_MS * SWEEP_EVERY_MS + SWEEP_EVERY_MS
        while tick < before_ms:
            self._clock.set(tick)
            outcomes = self._services.consolidator.sweep()
            self.stats.sweeps += 1
            self._count(outcomes)
            if not outcomes and not self._services.repository.count_pending(self._channel, 1):
                return
            tick += SWEEP_EVERY_MS

    def _count(self, outcomes: list[Outcome]) -> None:
        self.stats.rounds += sum(1 for o in outcomes if o.status == Status.CONSOLIDATED)


# Questions through recall --------------------------------------------------------------


def recall_request(conversation: Conversation, question: str) -> RecallRequest:
    """The question as the message being answered (the query); both speakers in the
    conversation."""
    speakers = list(conversation.speakers.values())
    return RecallRequest(
        guild_id=conversation.replay.guild_id,
        channel_id=conversation.replay.channel_id,
        user_id=speakers[0],
        participants=speakers,
        query=question,
    )


class ReadCache:
    """The repository's reads, each answered once: the table does not change while the
    questions are asked, and the vector paths ask the same reads as the keyword-only one
    (copies are handed out, so no caller can change another's answer). Only for the
    vector paths: the keyword-only path reads the table itself, and its requests are counted."""

    def __init__(self, repository: MemoryRepository) -> None:
        self._repository = repository
        self._answers: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._repository, name)
        if not callable(method):
            return method

        def cached(*args: Any, **kwargs: Any) -> Any:
            key = repr((name, args, sorted(kwargs.items())))
            with self._lock:
                if key in self._answers:
                    return copy.deepcopy(self._answers[key])
            answer = method(*args, **kwargs)
            with self._lock:
                self._answers[key] = copy.deepcopy(answer)
            return answer

        return cached


class Measurer:
    """Asks every question at every block size on every search path, and packs the
    baselines to match. The keyword-only path gets every size; the vector paths the fixed
    sizes only (today's settings carry an unchecked summary: see harness.UNCHECKED_SECTIONS)."""

    def __init__(
        self,
        services: MemoryServices,
        conversation: Conversation,
        counter: RequestCounter,
        sizes: tuple[int | None, ...],
        indexes: dict[str, SearchIndex] | None = None,
        rank_misses_at: int | None = None,
    ) -> None:
        self._services = services
        self._conversation = conversation
        # The block size whose keyword-only misses get their evidence's rank, by its label.
        self._ranked = label(rank_misses_at) if rank_misses_at is not None else None
        self._counter = counter
        if indexes is None:
            index = services.search_index
            indexes = {KEYWORDS: index} if index is not None else {}
        self._keyword_index = indexes.get(KEYWORDS)
        self._paths: dict[str, dict[str, Recaller]] = {}
        reads = cast(MemoryRepository, ReadCache(services.repository))
        for path, index in indexes.items():
            path_sizes = sizes if path == KEYWORDS else tuple(c for c in sizes if c is not None)
            repository = services.repository if path == KEYWORDS else reads
            self._paths[path] = {
                label(chars): _recaller(services, chars, index, repository) for chars in path_sizes
            }
        self._recallers = self._paths.get(KEYWORDS) or {
            label(chars): _recaller(services, chars, None, services.repository) for chars in sizes
        }
        self._budgets = {label(chars): chars for chars in sizes}
        scope = scope_of(conversation.replay.guild_id)
        facts: list[Fact] = []
        for user_id in conversation.speakers.values():
            facts += services.repository.all_facts(scope, user_id)
        self.facts = len(facts)
        self._evidence = EvidenceIndex(conversation.turns, facts)
        self._raw = RawTurns(conversation.turns)
        self._recency: dict[int, frozenset[str]] = {}
        self.latencies_ms: dict[str, list[float]] = {name: [] for name in self._recallers}
        self.requests: dict[str, list[int]] = {name: [] for name in self._recallers}
        self.search: Counter[str] = Counter()  # search statuses (ok, timeout, failed)
        self.baselines = True  # off: the raw-turn baselines are not packed (eval.folds)

    def ask(self, question: Question) -> QuestionOutcome:
        outcome = QuestionOutcome(self._conversation.sample_id, question.number, question.category)
        evidence = set(question.evidence)
        ranking = self._raw.ranking(question.text) if self.baselines else []
        request = recall_request(self._conversation, question.text)
        for path, recallers in self._paths.items():
            outcome.cited[path], outcome.held[path] = {}, {}
            for name, recaller in recallers.items():
                self._counter.take()
                started = time.perf_counter()
                result = recaller.recall(request)
                if path == KEYWORDS:  # latency and requests: as before, one path
                    self.latencies_ms[name].append((time.perf_counter() - started) * 1000)
                    self.requests[name].append(self._counter.take())
                self.search[result.search.value] += 1
                shown = self._evidence.shown(result, question.text, question.answer)
                outcome.cited[path][name] = bool(evidence & shown.strict)
                outcome.held[path][name] = bool(evidence & shown.held)
                if question.category == TEMPORAL and answer_date(question.answer):
                    outcome.dated.setdefault(path, {})[name] = shows_date(
                        self._evidence, result, question.answer, evidence
                    )
                if path == KEYWORDS:
                    if name == self._ranked and not outcome.held[path][name]:
                        outcome.miss_rank = self._evidence_rank(question, name)
                    outcome.loose[name] = bool(evidence & shown.loose)
                    outcome.block_chars[name] = len(result.memory)
                    if self.baselines:
                        self._baselines(outcome, question, ranking, name, len(result.memory))
        return outcome

    def _evidence_rank(self, question: Question, name: str) -> int:
        """Where the question's evidence ranks in the keyword leg, as the block of this size
        asks it but for RANKED_HITS hits: 1-based, 0 when none of them shows an evidence turn
        as its own message (its context does not count: the block cuts it)."""
        index = self._keyword_index
        if index is None:
            return 0
        settings = sized_settings(self._services.settings, self._budgets[name])
        replay = self._conversation.replay
        query = SearchLeg(index, self._services.repository, settings).query_for(
            replay.guild_id, replay.channel_id, question.text, self._services.clock.now_ms()
        )
        hits = index.search(query.model_copy(update={"limit": RANKED_HITS}))
        evidence = set(question.evidence)
        for rank, hit in enumerate(hits, start=1):
            if evidence & self._evidence.turns_of(hit.passage.sources[-1:]):
                return rank
        return 0

    def _baselines(
        self,
        outcome: QuestionOutcome,
        question: Question,
        ranking: list[int],
        name: str,
        chars: int,
    ) -> None:
        evidence = set(question.evidence)
        # Today's settings have no total size: the baselines get this block's length.
        budget = self._budgets[name] or chars
        if budget not in self._recency:
            self._recency[budget] = self._raw.recency(budget)
        outcome.recency[name] = bool(evidence & self._recency[budget])
        outcome.bm25[name] = bool(evidence & self._raw.pack(ranking, budget))
        snippets = self._raw.pack_snippets(ranking, budget, question.text)
        outcome.bm25_snippets[name] = any(
            dia_id in snippets and holds_evidence(turn.text, snippets[dia_id], question.answer)
            for dia_id in evidence
            if (turn := self._evidence.turn(dia_id)) is not None
        )


def _embedding(stats: EmbeddingStats, embedder: TimedEmbedder | None) -> EmbeddingStats:
    """The server's counts, or, for an embedder the environment names, the client's."""
    if embedder is not None and not stats.requests:
        return EmbeddingStats(embedder.texts, 0, 0, embedder.seconds)
    return stats


def embedder_from_environment() -> Embedder | None:
    """EMBEDDING_MODEL and its settings, as a deployment reads them; None when unset."""
    configured = settings_from(os.environ)
    return build_embedder(
        configured.embedding_model,
        base_url=configured.embedding_base_url or configured.model_base_url,
        api_key=configured.embedding_api_key or configured.model_api_key,
        dimensions=configured.embedding_dimensions,
        timeout_seconds=EMBEDDING_TIMEOUT_SECONDS,
        max_attempts=configured.model_max_attempts,
        query_prefix=configured.embedding_query_prefix,
        passage_prefix=configured.embedding_passage_prefix,
    )


def _recaller(
    services: MemoryServices,
    chars: int | None,
    index: SearchIndex | None,
    repository: MemoryRepository,
) -> Recaller:
    """A recaller whose block is at most `chars` characters, searching `index`."""
    settings = sized_settings(services.settings, chars)
    search = SearchLeg(index, repository, settings) if index is not None else None
    return Recaller(repository, settings, services.clock, search)


class TimedEmbedder:
    """An embedder, timed: the seconds spent in its calls, HTTP included, and the texts."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.name = inner.name
        self.dimensions = inner.dimensions
        self.seconds = 0.0
        self.texts = 0
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return self._inner.embed(texts)
        finally:
            with self._lock:
                self.seconds += time.perf_counter() - started
                self.texts += len(texts)

    def embed_query(self, text: str) -> list[float]:
        started = time.perf_counter()
        try:
            return embed_query(self._inner, text)
        finally:
            with self._lock:
                self.seconds += time.perf_counter() - started
                self.texts += 1


# The offline model's server, one per process (each eval process runs its own model).
_SERVER: EmbeddingServer | None = None


def offline_server() -> EmbeddingServer | None:
    """This process's server of the shipped model, started on first use; None without it."""
    global _SERVER
    if _SERVER is None:
        model, _ = embedding_server.offline_model()
        if model is None:
            return None
        _SERVER = EmbeddingServer(model.encode, model.dimensions, model.name)
    return _SERVER


def run_embedder(vectors: bool) -> tuple[Embedder | None, EmbeddingServer | None]:
    """The vector legs' embedder: EMBEDDING_MODEL when the environment names one, else the
    offline model served on 127.0.0.1 through the project's `openai:` embedder; None when
    `vectors` is off or neither is there."""
    if not vectors:
        return None, None
    configured = embedder_from_environment()
    if configured is not None:
        return configured, None
    server = offline_server()
    if server is None:
        return None, None
    embedder = build_embedder(
        f"openai:{embedding_server.MODEL_NAME}",
        base_url=server.base_url,
        api_key=None,
        dimensions=server.dimensions,
        # Not the deployed 800 ms search budget: one model on a busy core embeds batches.
        timeout_seconds=120.0,
        max_attempts=1,
        # As a deployment serving e5 sets EMBEDDING_QUERY_PREFIX and EMBEDDING_PASSAGE_PREFIX.
        query_prefix=embedding_server.QUERY_PREFIX,
        passage_prefix=embedding_server.PASSAGE_PREFIX,
    )
    return embedder, server


@contextmanager
def keyword_database(wanted: bool) -> Iterator[str | None]:
    """A fresh database on a temporary PostgreSQL cluster for the deployed path (None when
    the run has no embedder, so no deployed path)."""
    if not wanted:
        yield None
        return
    from localrun.postgres import create_database, temporary_cluster

    with temporary_cluster() as cluster:
        yield create_database(cluster, "eval")


def run_conversation(
    path: Path,
    limit: int | None = None,
    sizes: tuple[int | None, ...] = (None, *BLOCK_SIZES),
    vectors: bool = True,
    rank_misses_at: int | None = None,
) -> ConversationReport:
    """Replay one conversation on a fresh local table and ask it all its questions, on every
    search path the embedder allows (eval.paths); `rank_misses_at`: a block size whose
    keyword-only misses get their evidence's rank (QuestionOutcome.miss_rank)."""
    conversation = load_conversation(path, limit)
    inner, server = run_embedder(vectors)
    embedder = TimedEmbedder(inner) if inner is not None else None
    before = server.stats if server is not None else EmbeddingStats()
    with local_dynamodb() as client, keyword_database(embedder is not None) as keyword_dsn:
        # The deployed path's keyword leg runs on a temporary local PostgreSQL.
        events = conversation.replay.events
        clock = ManualClock(_event_ms(events[0]))
        paths = search_paths(embedder, keyword_dsn, clock)
        counter = RequestCounter(client)
        settings = Settings(
            table_name=TABLE, memory_model="rules", search_timeout_ms=EVAL_SEARCH_TIMEOUT_MS
        )
        # Every search path's index is written by the same consolidation (eval.paths).
        services = build_services(
            settings, dynamodb=client, clock=clock, model=RulesModel(), search_index=paths.tee
        )
        stats = Replayer(services, clock, conversation.replay.channel_id).replay(events)
        replayed = server.stats if server is not None else EmbeddingStats()
        stats.index_embedding = _embedding(replayed.since(before), embedder)
        clock.set(clock.now_ms() + SWEEP_EVERY_MS)
        started = time.perf_counter()
        measurer = Measurer(services, conversation, counter, sizes, paths.indexes, rank_misses_at)
        stats.facts = measurer.facts
        stats.episodes = len(
            services.repository.recent_episodes(conversation.replay.channel_id, 100)
        )
        outcomes = [measurer.ask(q) for q in conversation.questions]
        stats.recall_s = time.perf_counter() - started
        stats.passages = sum(1 for _ in paths.tee.passages())
        stats.search = dict(measurer.search)
        stats.embedder = embedder.name if embedder is not None else ""
        if server is not None:
            stats.query_embedding = server.stats.since(replayed)
        paths.close()
    return ConversationReport(
        sample_id=conversation.sample_id,
        speakers=list(conversation.speakers),
        unanswerable=conversation.unanswerable,
        stats=stats,
        questions=outcomes,
        latencies_ms=measurer.latencies_ms,
        requests=measurer.requests,
    )
