"""The IDENTIFY ledger: a rolling 24 hours, on disk, moved by a clock rather than sleeps."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from relay.identify import WINDOW_SECONDS, IdentifyLedger
from tests.relay.helpers import Clock


def test_the_bound_holds_over_a_rolling_day(tmp_path: Path) -> None:
    clock = Clock()
    ledger = IdentifyLedger(tmp_path / "identify.json", 3, clock)
    for _ in range(3):
        assert ledger.wait_seconds() == 0
        ledger.record()
        clock.advance(3600)
    # Three in the last 24 h: the next waits until the oldest is a day old.
    assert ledger.count() == 3
    assert ledger.wait_seconds() == pytest.approx(WINDOW_SECONDS - 3 * 3600)
    clock.advance(WINDOW_SECONDS - 3 * 3600)
    assert ledger.wait_seconds() == 0
    assert ledger.count() == 2


def test_the_ledger_survives_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    first = IdentifyLedger(tmp_path / "identify.json", 2, clock)
    first.record()
    first.record()
    restarted = IdentifyLedger(tmp_path / "identify.json", 2, clock)
    assert restarted.count() == 2
    assert restarted.wait_seconds() > 0


def test_a_lowered_bound_counts_the_history_already_there(tmp_path: Path) -> None:
    clock = Clock()
    ledger = IdentifyLedger(tmp_path / "identify.json", 5, clock)
    for _ in range(5):
        ledger.record()
        clock.advance(60)
    lowered = IdentifyLedger(tmp_path / "identify.json", 2, clock)
    # Four of the five must age out before another is allowed: the fourth at 24 h after it.
    assert lowered.wait_seconds() == pytest.approx(WINDOW_SECONDS - 2 * 60)


def test_an_unreadable_ledger_is_replaced_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "identify.json"
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING):
        ledger = IdentifyLedger(path, 2, Clock())
    assert ledger.count() == 0
    assert "unreadable" in caplog.text
    ledger.record()
    assert IdentifyLedger(path, 2, Clock()).count() == 1
