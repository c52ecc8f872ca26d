"""Table 9's simulation: messages arriving in simulated time through the production path
(the stream's hand-out, the FIFO work queue, N workers, the sweep every 5 minutes), on moto.

A fake clock and a loop of 200 ms ticks (no real sleep): messages arrive on a schedule, the
table's stream hands them out in batches (100 records or 10 s, the template's), and each
worker invocation runs the real code at its start (WorkDispatcher, Sweeper,
Consolidator.consolidate / flush with its time budget, the worker's follow-ups), then holds
its worker for as long as the invocation would take: each model call its simulated length
(bench/model_time.py: a fixed latency plus a cost per token) and 50 ms of table work per
round. SQS FIFO's rules: one message of a channel in flight at a time, a repeated
deduplication id dropped for 5 minutes.

Each observation is followed from its storage to its consumption (the end of the invocation
whose round consumed it): the waits table 9 prints beside the bounds of
botmemory.consolidation.bounds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from embedder import CountingEmbedder
from model_time import TimedModel
from world import T0, Lab, chat_line

from botmemory.consolidation import consolidator as consolidator_module
from botmemory.consolidation.outcome import Outcome, Status
from botmemory.consolidation.work import (
    Sweeper,
    WorkDispatcher,
    WorkMessage,
    WorkQueue,
    dedup_id,
    register_local_queue,
    work_of,
)
from botmemory.snowflake import snowflake_ms
from botmemory.storage import keys
from botmemory.storage.schema import PENDING_INDEX
from localrun import gateway as gw

TICK_MS = 200
STREAM_BATCH, STREAM_WINDOW_MS = 100, 10_000  # template.yaml: BatchSize, batching window
TIMEOUT_MS = 300_000  # the worker's Timeout
TABLE_MS_PER_ROUND = 50
SIM_QUEUE = "bench-sim-queue"
SPEAKERS = (gw.ALICE, gw.BOB, gw.CAROL)

Arrivals = dict[int, list[str]]  # tick -> the channel of each message arriving then


@dataclass
class Calls:
    """Model calls by kind, of the invocations done by the end of a simulation."""

    full_rounds: int = 0  # a round's one consolidation call over a full batch or more
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
    done_ms: int = 0  # when the last invocation counted ended (the consumed's time span)
    longest_ms: int = 0
    longest_call_ms: int = 0
    call_allowed_ms: int = 0  # the longest call's timeout, to read beside longest_call_ms
    model_calls: int = 0
    invocations: int = 0
    statuses: Counter[Status] = field(default_factory=Counter)
    calls: Calls = field(default_factory=Calls)
    calls_started: int = 0  # every call made, finished or not
    embedding_requests: int = 0  # of the invocations done by the end, as the model calls
    embedded_texts: int = 0
    stored: dict[str, int] = field(default_factory=dict)  # observation sk -> stored at
    waits: dict[str, list[int]] = field(default_factory=dict)  # channel kind -> waits (ms)
    pending_at_end: Counter[str] = field(default_factory=Counter)  # channel kind -> count


@contextmanager
def normal_batches_only() -> Iterator[None]:
    """Before issue 48: a channel that is behind never gets a grown batch."""
    reserve = consolidator_module.grown_round_reserve_ms
    consolidator_module.grown_round_reserve_ms = lambda settings: 10**12
    try:
        yield
    finally:
        consolidator_module.grown_round_reserve_ms = reserve


def arrivals(channels: list[str], per_second: float, seconds: int, start_s: int = 0) -> Arrivals:
    """Per tick, the channels a message arrives in (round robin, evenly spaced)."""
    total = int(per_second * seconds)
    at: Arrivals = {}
    for n in range(total):
        tick = int(start_s * 1000 + n * 1000 / per_second) // TICK_MS
        at.setdefault(tick, []).append(channels[n % len(channels)])
    return at


def merged(*schedules: Arrivals) -> Arrivals:
    at: Arrivals = {}
    for schedule in schedules:
        for tick, channels in schedule.items():
            at.setdefault(tick, []).extend(channels)
    return at


def simulate(  # noqa: C901 (one loop: arrivals, the stream, the queue, the workers)
    lab: Lab,
    *,
    incoming: Arrivals,
    seconds: int,
    fixed_ms: int,
    workers: int,
    sweep_every_ms: int = 0,
    staggered: list[str] | None = None,
    backlog: dict[str, int] | None = None,
    kinds: dict[str, str] | None = None,
    embedder: CountingEmbedder | None = None,
) -> Run:
    model = TimedModel(fixed_ms)
    world = lab.world(model=model, embedder=embedder)
    services, clock, repository = world.services, world.clock, world.services.repository
    run = Run()
    end = seconds * 1000
    kinds = kinds or {}
    for i, channel in enumerate(staggered or []):  # part-way to the threshold already
        count = i * services.settings.consolidate_every // len(staggered or [1])
        old = [
            gw.message(gw.ALICE, chat_line(n), T0 - 60_000, channel=channel) for n in range(count)
        ]
        if old:
            services.recorder.record(old)
    stream: list[str] = []  # channel of each record not yet delivered
    stream_since = 0
    consumer_free = 0
    queue: list[WorkMessage] = []
    seen_ids: dict[str, int] = {}
    in_flight: dict[str, int] = {}  # channel -> free at
    worker_free = [0] * max(workers, 1)
    sent: list[WorkMessage] = []
    register_local_queue(SIM_QUEUE, lambda body, _group: sent.append(work_of(body)))
    dispatcher = WorkDispatcher(WorkQueue(SIM_QUEUE, clock), repository, clock)
    waiting: dict[str, dict[str, int]] = {}  # channel -> sk -> stored at (followed ones)
    counter = 0
    for channel, count in (backlog or {}).items():  # a channel that fell behind before
        behind = [
            gw.message(SPEAKERS[n % 3], chat_line(n), T0 - 60_000 + n, channel=channel)
            for n in range(count)
        ]
        services.recorder.record(behind)
        repository.mark_pending_since(channel, T0 - 60_000)
        sent.append(WorkMessage(channel_id=channel))

    def enqueue(now: int) -> None:
        for work in sent:
            key = dedup_id(work, now)
            if work.source != "continue" and now - seen_ids.get(key, -(10**12)) < 300_000:
                continue  # SQS drops a repeated deduplication id for 5 minutes
            seen_ids[key] = now
            queue.append(work)
        sent.clear()

    def invoke(work: Callable[[Callable[[], int]], list[Outcome]], now: int) -> int:
        first_call, first_duration = model.calls, len(model.durations)

        def time_left() -> int:
            return TIMEOUT_MS - sum(model.durations[first_duration:])

        before = embedder.take() if embedder else (0, 0)
        outcomes = work(time_left)
        embedded = embedder.take() if embedder else before
        calls = model.calls - first_call
        durations = model.durations[first_duration:]
        rounds = sum(o.status != Status.BELOW_THRESHOLD for o in outcomes)
        took = sum(durations) + rounds * TABLE_MS_PER_ROUND + 20
        run.calls_started += calls
        if now + took <= end:  # done by the end: its messages and calls count, both or neither
            run.consumed += sum(o.consumed for o in outcomes)
            run.done_ms = max(run.done_ms, now + took)
            run.model_calls += calls
            run.calls.add(outcomes, services.settings.consolidate_every)
            run.embedding_requests += embedded[0]
            run.embedded_texts += embedded[1]
        else:
            run.calls.unfinished += calls
        run.invocations += 1
        run.longest_ms = max(run.longest_ms, took)
        run.longest_call_ms = max([run.longest_call_ms, *durations])
        run.call_allowed_ms = model.longest_allowed_ms
        run.statuses.update(o.status for o in outcomes)
        return took

    def follow(channel: str, done_at: int) -> None:
        """The channel's followed observations that left the pending index: consumed."""
        mine = waiting.get(channel)
        if not mine or done_at > end:
            return
        still = _pending_sks(repository, channel)
        for sk in [sk for sk in mine if sk not in still]:
            run.waits.setdefault(kinds.get(channel, "other"), []).append(done_at - mine.pop(sk))

    enqueue(0)  # a backlog's work is on the queue from the start
    for tick in range(seconds * 1000 // TICK_MS):
        now = tick * TICK_MS
        clock.set(T0 + now)
        events = []
        for channel in incoming.get(tick, []):
            counter += 1
            event = gw.message(SPEAKERS[counter % 3], chat_line(counter), T0 + now, channel=channel)
            events.append(event)
            message_id = event["d"]["id"]
            sk = keys.observation_sk(snowflake_ms(message_id), "msg", message_id)
            waiting.setdefault(channel, {})[sk] = now
            if not stream:
                stream_since = now
            stream.append(channel)
        if events:
            services.recorder.record(events)
        ready = stream and (len(stream) >= STREAM_BATCH or now - stream_since >= STREAM_WINDOW_MS)
        if ready and consumer_free <= now:
            batch, stream = stream[:STREAM_BATCH], stream[STREAM_BATCH:]
            stream_since = now
            dispatcher.from_stream(batch)
            enqueue(now)
            consumer_free = now + 20 + 15 * (len(set(batch)) // 10 + 1)
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

            took = invoke(worker, now)
            worker_free[index] = in_flight[pick.channel_id] = now + took
            follow(pick.channel_id, now + took)
            enqueue(now)
    for channel, left in waiting.items():
        run.pending_at_end[kinds.get(channel, "other")] += len(left)
    lab.meter.take()
    return run


def _pending_sks(repository: object, channel: str) -> set[str]:
    client = repository.client  # type: ignore[attr-defined]
    table = repository.table_name  # type: ignore[attr-defined]
    request = {
        "TableName": table,
        "IndexName": PENDING_INDEX,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": keys.channel_pk(channel)}},
        "ProjectionExpression": "pending_sk",
    }
    found: set[str] = set()
    while True:
        page = client.query(**request)
        found |= {item["pending_sk"]["S"] for item in page["Items"]}
        if "LastEvaluatedKey" not in page:
            return found
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
