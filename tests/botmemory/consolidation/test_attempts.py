"""The retry policy of a failing batch (botmemory.consolidation.attempts): a failure that counts
moves the batch towards its split and quarantine; an outage's does not."""

from __future__ import annotations

from botmemory.consolidation.attempts import MINUTE_MS, RetryPolicy

POLICY = RetryPolicy(max_attempts=3, backoff_ms=15 * MINUTE_MS, backoff_max_ms=120 * MINUTE_MS)
BATCH = ["OBS#1", "OBS#2", "OBS#3"]


def test_counted_failures_split_the_batch_then_quarantine_what_fails_alone() -> None:
    record, quarantine = None, False
    for n in range(3):
        record, quarantine = POLICY.after_failure(record, BATCH, "bad", now_ms=n * MINUTE_MS)
    assert record is not None and record.split_size == 2 and not quarantine
    assert record.failing_since_ms == 0  # when the streak began, kept through it

    record, quarantine = POLICY.after_failure(record, BATCH[:2], "bad", now_ms=10 * MINUTE_MS)
    record, quarantine = POLICY.after_failure(record, BATCH[:1], "bad", now_ms=20 * MINUTE_MS)
    assert quarantine


def test_a_failure_that_does_not_count_only_backs_off() -> None:
    record, _ = POLICY.after_failure(None, BATCH, "bad", now_ms=0)
    record, _ = POLICY.after_failure(record, BATCH, "bad", now_ms=MINUTE_MS)
    for n in range(20):  # an outage of any length
        now = (n + 2) * 200 * MINUTE_MS
        record, quarantine = POLICY.after_failure(record, BATCH, "503", now, counted=False)
        assert not quarantine
        assert record.count == 2 and record.split_size is None  # where the batch stood
        assert record.retry_at_ms == now + POLICY.backoff(record.failures)  # growing, capped
    assert record.failing_since_ms == 0


def test_success_ends_the_streak() -> None:
    record, _ = POLICY.after_failure(None, BATCH, "503", now_ms=0, counted=False)

    assert POLICY.after_success(record, BATCH, model_called=True) is None
