"""What the bench measures on the write side: ingest (table 1), the consolidation stream
(2a), the model's input (2b), a hostile load and the sweep's reach (2c), erasure (4)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from meter import (
    DynamoMeter,
    Request,
    item_reads,
    item_writes,
    operations,
    read_units,
    reads,
    writes,
)
from tables import compared, print_table
from world import (
    CHAT_LINES,
    SPEAKERS,
    T0,
    FailingModel,
    Lab,
    chat,
    event_mix,
    fact_item,
    seed_history,
)

from botmemory.clock import DAY_MS
from botmemory.consolidation.model.contract import ModelInput
from botmemory.consolidation.outcome import Outcome, Status
from botmemory.records import Observation, ObservationKind
from botmemory.search.index_sync import IndexReport, IndexWriter
from botmemory.search.port import Passage
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.items import observation_values
from botmemory.storage.keys import observation_sk
from localrun import gateway as gw
from localrun.storage import put_items

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
        writer: IndexWriter,
        passages: list[Passage],
        remove: Sequence[str] = (),
        scope: str | None = None,
    ) -> IndexReport:
        with meter.tagged(INDEX_TAG):
            return original(writer, passages, remove, scope)

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


# 4. Erasure ----------------------------------------------------------------------------

ERASED = "1300000000000000077"  # the person erased: not one of the speakers
ERASED_ITEMS = 10


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
