"""`make bench` table 10d on a small server: a backfill staff start is consolidated whole, in
time order, in rounds within the batch's bounds, at fewer model calls per 1,000 messages than
the status's estimate (botmemory.catchup.backfill.MODEL_CALLS_PER_1000) and the live target."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench's modules import each other by name

from backfill import Backfilled, Call, Counted, backfill  # noqa: E402

from botmemory.catchup.backfill import MODEL_CALLS_PER_1000  # noqa: E402
from botmemory.clock import DAY_MS  # noqa: E402
from botmemory.records import Episode  # noqa: E402

LIVE_TARGET = 50  # issue 52: a backfill costs no more than the live figure's target
TOKENS = 2_000  # MEMORY_BATCH_MAX_TOKENS, small: each channel's backlog takes several rounds


def consolidated_whole(run: Backfilled) -> None:
    assert run.imported == run.said == 400
    assert run.pending == 0  # every imported observation consumed by a round
    assert run.in_time_order()
    assert run.episodes_span_days() and run.facts > 0
    assert run.counted.calls and run.per_thousand <= LIVE_TARGET


def test_a_held_backlog_is_consolidated_whole_in_bounded_rounds_oldest_first() -> None:
    run = backfill(
        2, 200, live_stream=False, dataset=None, environment={"MEMORY_BATCH_MAX_TOKENS": "2000"}
    )
    consolidated_whole(run)
    assert run.rounds_importing == 0  # the stream waited for the import's end
    assert run.batch_max_tokens == TOKENS
    assert all(call.tokens <= TOKENS for call in run.counted.calls)
    for channel in {call.channel for call in run.counted.calls}:  # several rounds each
        assert sum(call.channel == channel for call in run.counted.calls) >= 3


def test_a_backfill_with_the_stream_live_costs_at_most_the_status_estimate() -> None:
    run = backfill(2, 200, live_stream=True, dataset=None)
    consolidated_whole(run)
    assert run.rounds_importing == len(run.counted.calls)  # each page consolidated meanwhile
    assert run.per_thousand <= MODEL_CALLS_PER_1000


def call(first_ms: int, last_ms: int) -> Call:
    return Call("c", observations=2, tokens=50, chars=400, first_ms=first_ms, last_ms=last_ms)


def episode(start_ms: int, end_ms: int) -> Episode:
    return Episode(
        channel_id="c",
        episode_id=f"e{start_ms}",
        sk=f"EP#{start_ms}",
        summary="",
        start_ms=start_ms,
        end_ms=end_ms,
        created_ms=0,
    )


def figures(calls: list[Call], episodes: list[Episode]) -> Backfilled:
    return Backfilled(
        said=4,
        imported=4,
        channels=1,
        days=2,
        counted=Counted(calls),
        live_per_thousand=50.0,
        pending=0,
        episodes={"c": episodes},
        facts=1,
        refused=0,
        rounds_importing=0,
        import_seconds=0.0,
        consolidate_seconds=0.0,
    )


def test_rounds_out_of_time_order_or_overlapping_episodes_are_seen() -> None:
    ordered = figures([call(0, 10), call(11, 20)], [episode(0, 10), episode(11, 2 * DAY_MS)])
    assert ordered.in_time_order() and ordered.episodes_span_days()
    assert not figures([call(11, 20), call(0, 10)], []).in_time_order()
    assert not figures([], [episode(0, 10), episode(5, 20)]).in_time_order()
    assert not figures([], [episode(0, 10)]).episodes_span_days()  # a day short of the span
    assert figures([call(0, 10)] * 2 + [call(11, 12)] * 2, []).per_thousand == 1000.0
