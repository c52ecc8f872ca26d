"""Issue 28, item 2: a round always ends inside its time budget.

No round (and so no model call) starts unless its worst case, the model's timeout on every
attempt plus the round's table work, fits in the time left; a channel left behind is handed
on (`again`), never lost; a backlog round leaves the channel summary for the round that
catches up.
"""

from __future__ import annotations

from botmemory.consolidation.consolidator import round_reserve_ms
from botmemory.consolidation.outcome import Status
from botmemory.services import MemoryServices
from localrun import gateway as gw
from tests.conftest import CountingModel

T0 = 1_767_225_600_000


def talk(services: MemoryServices, count: int) -> None:
    services.recorder.record(
        [gw.message(gw.ALICE, f"I love hiking, day {i}", T0 + i * 1000) for i in range(count)]
    )


def test_the_reserve_is_the_models_worst_case_and_the_rounds_table_work(
    services: MemoryServices,
) -> None:
    settings = services.settings
    worst = int(settings.model_timeout_seconds * 1000) * settings.model_max_attempts
    assert round_reserve_ms(settings) == worst + 20_000
    assert round_reserve_ms(settings.model_copy(update={"model_max_attempts": 1})) < worst


def test_no_round_starts_without_the_time_to_finish_it(
    services: MemoryServices, model: CountingModel
) -> None:
    talk(services, 25)
    short = round_reserve_ms(services.settings) - 1

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL, time_left_ms=lambda: short)

    assert outcome.status == Status.OUT_OF_TIME and outcome.again
    assert model.calls == []
    assert services.repository.count_pending(gw.CHANNEL, 100) == 25  # nothing lost


def test_a_backlog_stops_when_the_next_round_would_not_finish_and_is_handed_on(
    services: MemoryServices, model: CountingModel
) -> None:
    talk(services, 120)  # more than two full batches (MEMORY_MAX_BATCH 50)
    reserve = round_reserve_ms(services.settings)
    left = [reserve + 5_000]  # enough for one round; the model call takes the rest

    def time_left() -> int:
        return left[0] - 10_000 * len(model.calls)

    outcomes = services.consolidator.consolidate(gw.CHANNEL, time_left_ms=time_left)

    assert [o.status for o in outcomes] == [Status.CONSOLIDATED]
    assert len(model.calls) == 1
    assert outcomes[-1].again  # a full batch still waits: the worker enqueues it again
    assert services.repository.count_pending(gw.CHANNEL, 100) == 70


def test_a_backlog_round_leaves_the_summary_to_the_round_that_catches_up(
    services: MemoryServices, model: CountingModel
) -> None:
    talk(services, 60)  # one full batch, and ten behind it
    reserve = round_reserve_ms(services.settings)

    def one_round() -> int:
        return reserve if not model.calls else 0

    (behind,) = services.consolidator.consolidate(gw.CHANNEL, time_left_ms=one_round)
    assert behind.status == Status.CONSOLIDATED and behind.more_pending
    assert services.repository.channel_summary(gw.CHANNEL) is None  # no rewrite while behind

    (caught_up,) = services.consolidator.consolidate(gw.CHANNEL, force=True)
    assert caught_up.status == Status.CONSOLIDATED and not caught_up.more_pending
    assert services.repository.channel_summary(gw.CHANNEL) is not None
