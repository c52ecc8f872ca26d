"""Table 9: does a server keep up, and how long do words wait? The project's own
consolidation on moto, in simulated time (bench/flow.py), with model calls that take a fixed
latency plus a cost per token (bench/model_time.py).

- 9: one channel at 20 messages/s, and 2,000 channels at 200 messages/s (a 1-in-50 sample:
  40 channels and one worker standing for the template's 50), consumed messages/s with
  normal batches only (before issue 48) and with a backlog's grown batches (after).
- 9a: the wait from an observation's storage to its consumption, per channel kind, beside its
  bound (botmemory.consolidation.bounds): quiet and tiny channels of a server over 200
  simulated minutes, its hot channel, and a busy channel of the 2,000-channel load.
- 9b: channels one sweep gets through.
- 9c: model calls per 1,000 messages, fleet-wide over that server (target <= 50).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable

from embedder import CountingEmbedder, per_thousand
from flow import Run, arrivals, merged, normal_batches_only, simulate
from model_time import INPUT_MS_PER_1000, OUTPUT_MS_PER_1000
from tables import print_table
from world import T0, Lab, World, chat_line

from botmemory.consolidation import bounds
from botmemory.consolidation.outcome import Status
from botmemory.consolidation.work import Sweeper, WorkDispatcher, WorkQueue, register_local_queue
from botmemory.settings.config import Settings
from localrun import gateway as gw

SIM_QUEUE = "bench-sweep-queue"
TEMPLATE_WORKERS = 50  # template.yaml: ConsolidateWorkerConcurrency's default
SWEEP_MS = bounds.SWEEP_PERIOD_MS
HOT_SECONDS = 180
HOT_BEHIND = 2_400  # a launch that fell behind: two minutes of 20 messages/s already waiting
SAMPLE = 50  # the 2,000 channels are simulated 1 in 50


def hot_run(lab: Lab, fixed_ms: int, *, grown: bool) -> Run:
    """One channel that fell behind (HOT_BEHIND waiting) while 20 messages/s go on arriving:
    what it consumes per second is its capacity, which may exceed what arrives."""
    one = ["210000000000000001"]

    def run() -> Run:
        return simulate(
            lab,
            incoming=arrivals(one, 20, HOT_SECONDS),
            seconds=HOT_SECONDS,
            fixed_ms=fixed_ms,
            workers=4,
            backlog={one[0]: HOT_BEHIND},
            kinds={one[0]: "hot"},
        )

    if grown:
        return run()
    with normal_batches_only():
        return run()


def _rate(run: Run) -> float:
    """Messages/s a channel that always has work consumed: over the time until the last
    invocation counted ended (rounds run at their invocation's start, so arrivals during an
    invocation wait for the next: over the whole run, the end's unfinished one would count)."""
    return round(run.consumed * 1000 / max(run.done_ms, 1), 1)


def fleet_run(lab: Lab, fixed_ms: int, *, grown: bool) -> Run:
    many = [f"22000000000000{i:04d}" for i in range(2_000 // SAMPLE)]
    schedule = arrivals(many, 200 / SAMPLE, 240)
    kinds = dict.fromkeys(many, "busy")

    def run() -> Run:
        return simulate(
            lab,
            incoming=schedule,
            seconds=240,
            fixed_ms=fixed_ms,
            workers=1,
            staggered=many,
            kinds=kinds,
        )

    if grown:
        return run()
    with normal_batches_only():
        return run()


def throughput_rows(lab: Lab) -> tuple[list[tuple[object, ...]], dict[str, list[int]]]:
    rows: list[tuple[object, ...]] = []
    waits: dict[str, list[int]] = {}
    for model_s in (1, 3, 12):
        ms = model_s * 1000
        before, after = hot_run(lab, ms, grown=False), hot_run(lab, ms, grown=True)
        rows.append(
            (
                f"1 channel behind by {HOT_BEHIND:,}, 20 msg/s, {model_s} s calls",
                _rate(before),
                _rate(after),
                f"{before.longest_call_ms / 1000:.0f} s",
                f"{after.longest_call_ms / 1000:.0f} s / {after.call_allowed_ms // 1000} s",
            )
        )
        before, after = fleet_run(lab, ms, grown=False), fleet_run(lab, ms, grown=True)
        rows.append(
            (
                f"2,000 channels, 200 msg/s, {model_s} s calls",
                round(before.consumed * SAMPLE / 240, 1),
                round(after.consumed * SAMPLE / 240, 1),
                f"{before.longest_call_ms / 1000:.0f} s",
                f"{after.longest_call_ms / 1000:.0f} s / {after.call_allowed_ms // 1000} s",
            )
        )
        if model_s == 3:
            waits["busy (2,000 channels, 3 s calls)"] = after.waits.get("busy", [])
    return rows, waits


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


SERVER_SECONDS = 200 * 60  # long enough for a tiny channel's wait and the sweep after it


def server_run(lab: Lab) -> Run:
    """A server for 200 minutes, a sweep every 5: 20 quiet channels (8 messages each in the
    first hour), 20 tiny ones (2 messages), 5 busy ones (a message every 10 s for an hour) and
    a hot one (20 messages/s for 3 minutes); 3 s model calls, the template's 50 workers, the
    index embedding through a counting embedder."""
    quiet = [f"24{i:016d}" for i in range(20)]
    tiny = [f"25{i:016d}" for i in range(20)]
    busy = [f"26{i:016d}" for i in range(5)]
    hot = ["270000000000000001"]
    schedule = merged(
        arrivals(quiet, 20 * 8 / 3600, 3600),
        arrivals(tiny, 20 * 2 / 1800, 1800, start_s=600),
        arrivals(busy, 5 / 10, 3600),
        arrivals(hot, 20, HOT_SECONDS, start_s=1200),
    )
    kinds = dict.fromkeys(quiet, "quiet") | dict.fromkeys(tiny, "tiny")
    kinds |= dict.fromkeys(busy, "busy") | dict.fromkeys(hot, "hot")
    return simulate(
        lab,
        incoming=schedule,
        seconds=SERVER_SECONDS,
        fixed_ms=3_000,
        workers=TEMPLATE_WORKERS,
        sweep_every_ms=SWEEP_MS,
        kinds=kinds,
        embedder=CountingEmbedder(),
    )


def wait_rows(server: Run, more: dict[str, list[int]]) -> list[tuple[object, ...]]:
    """Table 9a: per channel kind, the waits (minutes) beside the bound."""
    settings = Settings()
    bound_of = {
        "quiet": bounds.quiet_ms(settings),
        "tiny": bounds.quiet_ms(settings),
        "busy": bounds.quiet_ms(settings),  # its last messages wait as a quiet channel's
        "hot": bounds.hot_ms(settings),
        "busy (2,000 channels, 3 s calls)": bounds.quiet_ms(settings),
    }
    rows: list[tuple[object, ...]] = []
    for kind, waits in [*server.waits.items(), *more.items()]:
        if not waits:
            rows.append((kind, 0, "n/a", "n/a", "n/a", _minutes(bound_of[kind]), 0))
            continue
        ordered = sorted(waits)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        rows.append(
            (
                kind,
                len(waits),
                _minutes(int(statistics.median(ordered))),
                _minutes(p99),
                _minutes(ordered[-1]),
                _minutes(bound_of[kind]),
                server.pending_at_end.get(kind, 0),
            )
        )
    return rows


def _minutes(ms: int) -> str:
    return f"{ms / 60_000:.1f} min"


def call_rows(run: Run) -> list[tuple[object, ...]]:
    """Table 9c's rows: model calls per 1,000 messages by kind, and embedding requests."""
    calls = run.calls
    consumed = run.consumed

    def rate(count: int) -> float:
        return round(per_thousand(count, consumed), 1)

    return [
        ("model calls per 1,000 messages", rate(run.model_calls)),
        ("  rounds over a full batch or a backlog", rate(calls.full_rounds)),
        ("  rounds over fewer messages (tiny, quiet, answered turns)", rate(calls.short_rounds)),
        ("  split rounds of a failing batch", rate(calls.split_rounds)),
        ("  summary recompressions", rate(calls.recompressions)),
        ("  failed calls (retried later)", rate(calls.failed)),
        ("calls still running at the end (not counted)", calls.unfinished),
        ("messages consumed in 200 minutes", consumed),
        ("embedding requests per 1,000 messages", rate(run.embedding_requests)),
        ("texts embedded per 1,000 messages", rate(run.embedded_texts)),
    ]


def bench_scale(lab: Lab) -> float:
    """Prints table 9; returns the fleet's model calls per 1,000 messages (table 8 prices them)."""
    logger = logging.getLogger("botmemory.consolidation.consolidator")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        rows, waits = throughput_rows(lab)
        server = server_run(lab)
        sweeps = sweep_rows(lab)
    finally:
        logger.setLevel(level)
    print_table(
        "9. A hot channel keeps up (issue 48): messages/s consumed, simulated time on moto",
        ["load", "before", "after", "longest call before", "longest call after / timeout"],
        rows,
        [
            "before: normal batches only (MEMORY_MAX_BATCH a call); after: a channel that is",
            "behind gets one grown call over its backlog (up to MEMORY_BATCH_MAX_TOKENS), with",
            "twice the answer and time allowance, committed in runs of one transaction each.",
            "A call takes its fixed latency plus 0.16 s per 1,000 input tokens and 15.2 s per",
            f"1,000 output tokens ({INPUT_MS_PER_1000} / {OUTPUT_MS_PER_1000} ms: LLMPerf on",
            "Bedrock, bench/model_time.py). One channel: behind by 2,400, 4 workers, one at a",
            "time (its FIFO group), 180 s, its rate over the time until its last invocation",
            "done ended; 2,000 channels: 1 in 50 simulated (40 channels, one worker for the",
            "template's 50), 240 s, staggered part-way to the threshold. Consumed counts only",
            "invocations done by the end.",
        ],
    )
    print_table(
        "9a. How long words wait: storage to consumption, per channel kind (invariant 17)",
        ["channel kind", "observations", "median", "p99", "max", "bound", "pending at end"],
        wait_rows(server, waits),
        [
            "quiet, tiny, busy, hot: one server for 200 simulated minutes (20 quiet channels",
            "of 8 messages, 20 tiny of 2, 5 busy at one message / 10 s for an hour, one hot at",
            "20 / s for 3 minutes), 3 s calls, a sweep every 5 minutes, 50 workers; the last",
            "row: a busy channel of table 9's 2,000 at 3 s calls. A busy channel's last messages",
            "wait as a quiet channel's, so its bound is the quiet one; its full batches wait",
            "the median's minutes. Bounds: botmemory.consolidation.bounds (architecture.md, 17).",
        ],
    )
    print_table(
        "9b. Sweep capacity: channels one 5-minute sweep gets through",
        ["quiet channels", "before (3 s calls)", "after (enqueued)"],
        sweeps,
        ["after: the workers consolidate them; a tiny channel (1-5 waiting) waits 120 min."],
    )
    print_table(
        "9c. Model calls per 1,000 messages, fleet-wide over table 9a's server (target <= 50)",
        ["figure", "value"],
        call_rows(server),
        [
            "Quiet, tiny, busy and hot channels together (a batch of 20 is 50.0 a 1,000).",
            "Calls and messages count only invocations done by the end. Embedding: a counting",
            "embedder behind the index, one request per 64 texts (OpenAIEmbedder's batch).",
        ],
    )
    return per_thousand(server.model_calls, server.consumed)
