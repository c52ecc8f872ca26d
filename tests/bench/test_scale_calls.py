"""`make bench` table 9c: model calls by kind and embedding requests, worked by hand."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench's modules import each other by name

from embedder import CountingEmbedder, per_thousand, requests_for  # noqa: E402
from scale import Calls, Run, Sim, call_rows  # noqa: E402

from botmemory.consolidation.outcome import Outcome, Status  # noqa: E402


def test_calls_are_sorted_by_kind() -> None:
    calls = Calls()
    calls.add(
        [
            Outcome("c", Status.CONSOLIDATED, consumed=20, model_calls=1),
            Outcome(
                "c", Status.CONSOLIDATED, consumed=20, model_calls=2, summary_recompressed=True
            ),
            Outcome("c", Status.CONSOLIDATED, consumed=3, model_calls=1),
            Outcome("c", Status.CONSOLIDATED, consumed=10, model_calls=1, splitting=True),
            Outcome("c", Status.QUARANTINED, consumed=1, model_calls=1),
            Outcome("c", Status.MODEL_FAILED, model_calls=1),
            Outcome("c", Status.BELOW_THRESHOLD),
            Outcome("c", Status.CONSOLIDATED, consumed=4),  # reactions alone: no call
        ],
        batch=20,
    )
    assert (calls.full_rounds, calls.short_rounds, calls.split_rounds) == (2, 1, 2)
    assert (calls.recompressions, calls.failed) == (1, 1)
    assert calls.counted == 7  # the outcomes' model calls, every one of them


def test_the_rows_count_per_thousand_messages_consumed() -> None:
    run = Run(consumed=480, model_calls=24, calls_started=28, embedding_requests=24)
    run.calls.full_rounds, run.calls.unfinished = 24, 4
    rows = dict(call_rows(run))
    assert rows["model calls per 1,000 messages"] == 50.0
    assert rows["  rounds over a full batch"] == 50.0
    assert rows["as printed before (every call started / consumed)"] == 58.3
    assert rows["calls still running at the end (not counted)"] == 4
    assert rows["embedding requests per 1,000 messages"] == 50.0
    assert per_thousand(5, 0) == 0.0


def test_the_counting_embedder_counts_requests_as_the_openai_embedder_batches() -> None:
    assert [requests_for(n) for n in (0, 1, 64, 65, 128)] == [0, 1, 1, 2, 2]
    embedder = CountingEmbedder(dimensions=8)
    vectors = embedder.embed(["sourdough in Lisbon"] * 65)
    embedder.embed([])
    assert len(vectors) == 65 and all(len(v) == 8 for v in vectors)
    assert embedder.take() == (2, 65)
    assert embedder.take() == (0, 0)
    near, far = embedder.embed(["baking sourdough", "tax returns"])
    (same,) = embedder.embed(["sourdough baking"])
    assert sum(a * b for a, b in zip(near, same, strict=True)) > 0.99
    assert sum(a * b for a, b in zip(far, same, strict=True)) < 0.5


class _Model:
    calls = 0


def test_an_invocation_still_running_at_the_end_counts_neither_calls_nor_messages() -> None:
    model = _Model()
    settings = SimpleNamespace(consolidate_every=20)
    world = SimpleNamespace(model=model, services=SimpleNamespace(settings=settings))
    sim = Sim(world, model_ms=3_000, end_ms=10_000)  # type: ignore[arg-type]

    def round_of_20(_time_left: Callable[[], int]) -> list[Outcome]:
        model.calls += 1
        return [Outcome("c", Status.CONSOLIDATED, consumed=20, model_calls=1)]

    assert sim.invoke(round_of_20, now=0) == 3_000 + 50 + 20
    sim.invoke(round_of_20, now=9_000)  # ends past 10 s

    assert (sim.run.consumed, sim.run.model_calls, sim.run.calls_started) == (20, 1, 2)
    assert (sim.run.calls.full_rounds, sim.run.calls.unfinished) == (1, 1)
