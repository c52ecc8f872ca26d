"""`make bench` table 9: model calls by kind, embedding requests and model call lengths,
worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench's modules import each other by name

from embedder import CountingEmbedder, per_thousand, requests_for  # noqa: E402
from flow import Calls, Run  # noqa: E402
from model_time import ANSWER_TOKENS, TimedModel, call_ms  # noqa: E402
from scale import _rate, call_rows  # noqa: E402

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
    assert rows["  rounds over a full batch or a backlog"] == 50.0
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


def test_a_call_takes_its_fixed_latency_and_its_tokens_time() -> None:
    # 12 s, then 155 ms per 1,000 input tokens and 15,244 per 1,000 output tokens.
    assert call_ms(12_000, 0, 0) == 12_000
    assert call_ms(12_000, 20_000, 1_000) == 12_000 + 3_100 + 15_244


def test_a_bigger_batch_is_a_slower_call_and_its_answer_stays_within_its_allowance() -> None:
    from botmemory.consolidation.model.contract import ModelInput, NumberedObservation

    def batch(n: int, allowance: int | None = None) -> ModelInput:
        lines = [
            NumberedObservation(
                number=i + 1, author_id="1", author_name="Ada", kind="msg", text="lol " * 20
            )
            for i in range(n)
        ]
        return ModelInput(channel_id="c", observations=lines, max_output_tokens=allowance)

    model = TimedModel(fixed_ms=3_000)
    model.consolidate(batch(20))
    model.consolidate(batch(1_000, allowance=4_000))
    (small_in, small_out), (big_in, big_out) = model.sizes
    assert small_out == ANSWER_TOKENS <= big_out <= 4_000
    assert big_in > 20 * small_in // 2 and model.durations[1] > model.durations[0] > 3_000


def test_a_channel_s_rate_is_over_the_time_its_counted_work_took() -> None:
    assert _rate(Run(consumed=2_400, done_ms=100_000)) == 24.0
    assert _rate(Run()) == 0.0
