"""Issue 28: does a large server keep up? The project's own consolidation on moto, in
simulated time.

A fake clock and a loop of 200 ms ticks (no real sleep): messages arrive at a steady rate,
the table's stream hands them out in batches (100 records or 10 s, the template's), and each
Lambda invocation runs the real code at its start, then holds its worker for as long as the
invocation would take: every model call its simulated length (1, 3 or 12 s) plus 50 ms of
table work per round.

- before: the inline consumer as it was: one batch in flight per shard, the batch's channels
  consolidated one after another, rounds not bounded by the time left.
- after: the stream consumer enqueues one message per channel (FIFO, deduplicated per
  channel and minute, as botmemory.consolidation.work does), and N workers take one channel's
  message each (never two of one channel at once), with the time budget; a channel left
  behind is enqueued again.

Scaling, so the run stays short: one channel runs 30 s; 2,000 channels at 200 messages/s are
simulated as a 1-in-100 sample (20 channels at 2 messages/s) for 240 s; the sample gets its
share of the consumer's time (before: each invocation counts 100 times as long, as it would
carry 100 times the channels) or of the workers (after: 1 worker stands for 100). Figures
are scaled back up. The sweep's 10^5 channels are a 500-channel sample, its requests x 200.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from embedder import CountingEmbedder, per_thousand
from tables import print_table
from world import T0, Lab, World, chat_line

from botmemory.consolidation.consolidator import round_reserve_ms
from botmemory.consolidation.outcome import Outcome, Status
from botmemory.consolidation.work import (
    ENQUEUE_WINDOW_MS,
    Sweeper,
    WorkDispatcher,
    WorkMessage,
    WorkQueue,
    dedup_id,
    register_local_queue,
    work_of,
)
from localrun import gateway as gw

TICK_MS = 200
STREAM_BATCH, STREAM_WINDOW_MS = 100, 10_000  # template.yaml: BatchSize, batching window
TIMEOUT_MS = 300_000  # the consolidating function's Timeout
TABLE_MS_PER_ROUND = 50
SIM_QUEUE = "bench-sim-queue"
SPEAKERS = (gw.ALICE, gw.BOB, gw.CAROL)


@dataclass
class Calls:
    """Model calls by kind, of the invocations done by the end of a simulation."""

    full_rounds: int = 0  # a round's one consolidation call over a full batch
    short_rounds: int = 0  # a round over fewer messages than a batch (tiny, answered, sweep)
    split_rounds: int = 0  # a round of a failing batch being bisected
    recompressions: int = 0  # the channel summary's second pass
    failed: int = 0  # calls that failed (retried later)
    unfinished: int = 0  # calls of invocations still running at the end: not counted

    @property
    def counted(self) -> int:
        return (
            self.full_rounds
            + self.short_rounds
            + self.split_rounds
            + self.recompressions
            + self.failed
        )

    def add(self, outcomes: list[Outcome], batch: int) -> None:
        for o in outcomes:
            if o.status == Status.MODEL_FAILED:
                self.failed += o.model_calls
                continue
            if o.model_calls == 0:
                continue
            if o.splitting or o.status == Status.QUARANTINED:
                self.split_rounds += 1
            elif o.consumed >= batch:
                self.full_rounds += 1
            else:
                self.short_rounds += 1
            self.recompressions += int(o.summary_recompressed)


@dataclass
class Run:
    consumed: int = 0
    longest_ms: int = 0
    model_calls: int = 0
    invocations: int = 0
    statuses: Counter[Status] = field(default_factory=Counter)
    calls: Calls = field(default_factory=Calls)
    # What the bench printed before: every call made, over the messages consumed by the end.
    calls_started: int = 0
    embedding_requests: int = 0  # of the invocations done by the end, as the model calls
    embedded_texts: int = 0


class Sim:
    def __init__(
        self,
        world: World,
        model_ms: int,
        end_ms: int,
        dilation: int = 1,
        embedder: CountingEmbedder | None = None,
    ) -> None:
        self.world = world
        self.embedder = embedder
        self.model_ms = model_ms
        self.end_ms = end_ms
        self.dilation = dilation
        self.run = Run()

    def invoke(self, work: Callable[[Callable[[], int]], list[Outcome]], now: int) -> int:
        """Run one invocation now; how long it holds its worker (ms, simulated). What it
        consumed counts only if it would have finished before the simulation ends."""
        model = self.world.model
        first = model.calls

        def time_left() -> int:
            return TIMEOUT_MS - (model.calls - first) * self.model_ms

        embedded = self.embedder.take() if self.embedder else (0, 0)
        outcomes = work(time_left)
        calls = model.calls - first
        embedded = self.embedder.take() if self.embedder else (0, 0)
        rounds = sum(o.status != Status.BELOW_THRESHOLD for o in outcomes)
        took = (calls * self.model_ms + rounds * TABLE_MS_PER_ROUND + 20) * self.dilation
        self.run.calls_started += calls
        if now + took <= self.end_ms:
            # Done by the end: its messages and its model calls count, both or neither.
            self.run.consumed += sum(o.consumed for o in outcomes)
            self.run.model_calls += calls
            self.run.calls.add(outcomes, self.world.services.settings.consolidate_every)
            self.run.embedding_requests += embedded[0]
            self.run.embedded_texts += embedded[1]
        else:
            self.run.calls.unfinished += calls
        self.run.invocations += 1
        self.run.longest_ms = max(self.run.longest_ms, took)
        self.run.statuses.update(o.status for o in outcomes)
        return took


def arrivals(channels: list[str], per_second: float, seconds: int) -> dict[int, list[str]]:
    """Per tick, the channels a message arrives in (round robin, evenly spaced)."""
    total = int(per_second * seconds)
    at: dict[int, list[str]] = {}
    for n in range(total):
        tick = int(n * 1000 / per_second) // TICK_MS
        at.setdefault(tick, []).append(channels[n % len(channels)])
    return at


def simulate(  # noqa: C901 (one loop: arrivals, the stream, the queue, the workers)
    lab: Lab,
    *,
    channels: list[str],
    per_second: float,
    seconds: int,
    model_ms: int,
    after: bool,
    workers: int = 0,
    dilation: int = 1,
    sweep_every_ms: int = 0,
    stagger: bool = False,
    embedder: CountingEmbedder | None = None,
) -> Run:
    world = lab.world(embedder=embedder)
    services, clock = world.services, world.clock
    sim = Sim(world, model_ms, seconds * 1000, dilation, embedder)
    if stagger:  # as if arriving for a while already: channels reach the threshold in turn
        every = services.settings.consolidate_every
        for i, channel in enumerate(channels):
            count = i * every // len(channels)
            old = [
                gw.message(gw.ALICE, chat_line(n), T0 - 60_000, channel=channel)
                for n in range(count)
            ]
            if old:
                services.recorder.record(old)
    incoming = arrivals(channels, per_second, seconds)
    stream: list[str] = []  # channel of each record not yet delivered
    stream_since = 0
    consumer_free = 0
    queue: list[WorkMessage] = []
    seen_ids: dict[str, int] = {}
    in_flight: dict[str, int] = {}  # channel -> free at
    worker_free = [0] * max(workers, 1)
    sent: list[WorkMessage] = []
    register_local_queue(SIM_QUEUE, lambda body, _group: sent.append(work_of(body)))
    dispatcher = WorkDispatcher(WorkQueue(SIM_QUEUE, clock), services.repository, clock)
    counter = 0

    def enqueue(now: int) -> None:
        for work in sent:
            key = dedup_id(work, now)
            if work.source != "continue" and now - seen_ids.get(key, -(10**12)) < 300_000:
                continue  # SQS drops a repeated deduplication id for 5 minutes
            seen_ids[key] = now
            queue.append(work)
        sent.clear()

    for tick in range(seconds * 1000 // TICK_MS):
        now = tick * TICK_MS
        clock.set(T0 + now)
        events = []
        for channel in incoming.get(tick, []):
            counter += 1
            speaker = SPEAKERS[counter % 3]
            events.append(gw.message(speaker, chat_line(counter), T0 + now, channel=channel))
            if not stream:
                stream_since = now
            stream.append(channel)
        if events:
            services.recorder.record(events)
        ready = stream and (len(stream) >= STREAM_BATCH or now - stream_since >= STREAM_WINDOW_MS)
        if ready and consumer_free <= now:
            batch, stream = stream[:STREAM_BATCH], stream[STREAM_BATCH:]
            stream_since = now
            if after:
                dispatcher.from_stream(batch)
                enqueue(now)
                consumer_free = now + 20 + 15 * (len(set(batch)) // 10 + 1)
            else:

                def inline(time_left: Callable[[], int], batch: list[str] = batch) -> list[Outcome]:
                    outcomes: list[Outcome] = []
                    for channel in dict.fromkeys(batch):
                        # As before: rounds not bounded by the invocation's time.
                        outcomes += services.consolidator.consolidate(channel)
                    return outcomes

                consumer_free = now + sim.invoke(inline, now)
        if not after:
            continue
        if sweep_every_ms and now and now % sweep_every_ms == 0:
            Sweeper(services.settings, dispatcher).sweep(time_left_ms=lambda: TIMEOUT_MS)
            enqueue(now)
        for index, free_at in enumerate(worker_free):
            if free_at > now:
                continue
            pick = next((w for w in queue if in_flight.get(w.channel_id, 0) <= now), None)
            if pick is None:
                break
            queue.remove(pick)

            def worker(time_left: Callable[[], int], work: WorkMessage = pick) -> list[Outcome]:
                if work.source == "sweep":
                    return services.consolidator.flush(work.channel_id, time_left_ms=time_left)
                outcomes = services.consolidator.consolidate(
                    work.channel_id, force=work.force, time_left_ms=time_left
                )
                if outcomes[-1].again:
                    dispatcher.again(work, force=work.force or outcomes[-1].splitting)
                return outcomes

            took = sim.invoke(worker, now)
            worker_free[index] = in_flight[pick.channel_id] = now + took
            enqueue(now)
    lab.meter.take()
    return sim.run


def throughput_rows(lab: Lab) -> list[tuple[object, ...]]:
    one = ["210000000000000001"]
    many = [f"22000000000000{i:04d}" for i in range(20)]  # 1 in 100 of 2,000
    rows: list[tuple[object, ...]] = []
    for model_s in (1, 3, 12):
        ms = model_s * 1000
        before = simulate(lab, channels=one, per_second=20, seconds=30, model_ms=ms, after=False)
        after = simulate(
            lab, channels=one, per_second=20, seconds=30, model_ms=ms, after=True, workers=4
        )
        rows.append(
            (f"1 channel, 20 msg/s, {model_s} s calls", before.consumed / 30, after.consumed / 30)
            + (f"{before.longest_ms / 1000:.0f} s", f"{after.longest_ms / 1000:.0f} s")
        )
        before = simulate(
            lab,
            channels=many,
            per_second=2,
            seconds=240,
            model_ms=ms,
            after=False,
            dilation=100,
            stagger=True,
        )
        after = simulate(
            lab,
            channels=many,
            per_second=2,
            seconds=240,
            model_ms=ms,
            after=True,
            workers=1,
            stagger=True,
        )
        rows.append(
            (
                f"2,000 channels, 200 msg/s, {model_s} s calls",
                before.consumed * 100 / 240,
                after.consumed * 100 / 240,
                f"{before.longest_ms / 1000:.0f} s",
                f"{after.longest_ms / 1000:.0f} s",
            )
        )
    return rows


def _collector(sent: list[str]) -> Callable[[str, str], None]:
    return lambda body, _group: sent.append(body)


def quiet_channels(lab: Lab, count: int) -> World:
    """`count` channels, each with one observation waiting an hour: the sweep's list."""
    world = lab.world()
    services = world.services
    for i in range(count):
        channel = f"23{i:016d}"
        services.recorder.record([gw.message(gw.ALICE, chat_line(i), T0, channel=channel)])
        services.repository.mark_pending_since(channel, T0)
    world.clock.set(T0 + 3_600_000)
    return world


def sweep_rows(lab: Lab) -> list[tuple[object, ...]]:
    """Channels one 5-minute sweep gets through: before, consolidated one by one in the
    sweep (a 3 s model call each); after, handed to the queue (request counts on moto at
    10^2 channels, at 10^5 from a sample of 500, times an assumed 10 ms per Query page and
    15 ms per SendMessageBatch)."""
    rows: list[tuple[object, ...]] = []
    world = quiet_channels(lab, 100)
    model = world.model
    first = model.calls
    budget = 300_000

    def time_left() -> int:
        return budget - (model.calls - first) * 3_000

    swept = world.services.consolidator.sweep(time_left_ms=time_left)
    before = sum(o.status == Status.CONSOLIDATED for o in swept)
    per_channel_ms: dict[int, float] = {}
    for sample, scale in ((100, 1), (500, 200)):
        world = quiet_channels(lab, sample)
        sent: list[str] = []
        register_local_queue(SIM_QUEUE, _collector(sent))
        dispatcher = WorkDispatcher(
            WorkQueue(SIM_QUEUE, world.clock), world.services.repository, world.clock
        )
        lab.meter.take()
        Sweeper(world.services.settings, dispatcher).sweep(time_left_ms=lambda: budget)
        queries = sum(r.operation == "Query" for r in lab.meter.take())
        batches = -(-len(sent) // 10)
        per_channel_ms[sample * scale] = (queries * 10 + batches * 15) / len(sent)
    for channels in (100, 100_000):
        cost = per_channel_ms[channels]
        capacity = min(channels, int((budget - 10_000) / cost))
        rows.append((f"{channels:,} quiet channels", min(before, channels), capacity))
    return rows


def model_call_rows(lab: Lab) -> Run:
    """A multi-channel server for 20 minutes: 10 channels, 0.5 message/s in all, a sweep every
    5 minutes (idle 30 min, tiny 120 min), the index embedding through a counting embedder;
    model calls (summary recompressions included) and embedding requests per 1,000 messages
    consumed, all counted over the invocations done by the end."""
    channels = [f"24{i:016d}" for i in range(10)]
    return simulate(
        lab,
        channels=channels,
        per_second=0.5,
        seconds=1200,
        model_ms=3000,
        after=True,
        workers=4,
        sweep_every_ms=300_000,
        embedder=CountingEmbedder(),
    )


def call_rows(run: Run) -> list[tuple[object, ...]]:
    """Table 9c's rows: model calls per 1,000 messages by kind, and embedding requests."""
    calls = run.calls
    consumed = run.consumed

    def rate(count: int) -> float:
        return round(per_thousand(count, consumed), 1)

    return [
        ("model calls per 1,000 messages", rate(run.model_calls)),
        ("  rounds over a full batch", rate(calls.full_rounds)),
        ("  rounds over fewer messages (tiny, answered turns)", rate(calls.short_rounds)),
        ("  split rounds of a failing batch", rate(calls.split_rounds)),
        ("  summary recompressions", rate(calls.recompressions)),
        ("  failed calls (retried later)", rate(calls.failed)),
        ("calls still running at the end (not counted)", calls.unfinished),
        ("as printed before (every call started / consumed)", rate(run.calls_started)),
        ("messages consumed in 20 minutes", consumed),
        ("embedding requests per 1,000 messages", rate(run.embedding_requests)),
        ("texts embedded per 1,000 messages", rate(run.embedded_texts)),
    ]


def bench_scale(lab: Lab) -> None:
    logger = logging.getLogger("botmemory.consolidation.consolidator")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        rows = throughput_rows(lab)
        sweeps = sweep_rows(lab)
        server = model_call_rows(lab)
    finally:
        logger.setLevel(level)
    reserve = round_reserve_ms(lab.world().services.settings) // 1000
    print_table(
        "9. A large server keeps up (issue 28): messages/s consumed, simulated time on moto",
        ["load", "before", "after", "longest before", "longest after"],
        rows,
        [
            "before: one inline consumer per shard, channels one after another; after: the",
            "worker queue, 4 workers for one channel (one at a time: its FIFO group), 100 for",
            "2,000 channels (simulated as 20 channels and 1 worker). Longest: the longest",
            f"invocation against the {TIMEOUT_MS // 1000} s timeout; a round starts only with",
            f"{reserve} s left (the model's 30 s timeout x 3 attempts + 20 s).",
            f"Dedup window {ENQUEUE_WINDOW_MS // 1000} s per channel on the stream's messages:",
            "after trails arrivals by up to one window. Consumed counts only invocations done",
            "by the end; the sample's channels start part-way to the threshold (staggered).",
        ],
    )
    print_table(
        "9b. Sweep capacity: channels one 5-minute sweep gets through",
        ["quiet channels", "before (3 s calls)", "after (enqueued)"],
        sweeps,
        ["after: the workers consolidate them; a tiny channel (1-5 waiting) waits 120 min."],
    )
    print_table(
        "9c. Model calls per 1,000 messages, a multi-channel server (target <= 50)",
        ["figure", "value"],
        call_rows(server),
        [
            "10 channels, 0.5 msg/s in all, 20 minutes, 3 s model calls, a batch of 20 (one",
            "call per 20 messages is 50.0). Calls and messages count only invocations done by",
            "the end (before, calls still running were counted without their messages).",
            "Embedding: a counting embedder behind the index, one request per 64 texts",
            "(OpenAIEmbedder's batch).",
        ],
    )
