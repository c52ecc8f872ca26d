"""The container's health check in the fleet mode: healthy while the fleet's loop touches
its file, lease or no lease; unhealthy when the file is missing or stale."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from relay.health import ALIVE_FILE, STALE_SECONDS, main


def test_healthy_while_the_loop_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_URL", "http://127.0.0.1:9/ingest")
    monkeypatch.setenv("RELAY_TABLE_NAME", "MemoryTable")
    monkeypatch.setenv("RELAY_SPOOL_DIR", str(tmp_path))
    assert main() == 1  # nothing touched yet
    alive = tmp_path / ALIVE_FILE
    alive.touch()
    assert main() == 0
    stale = time.time() - STALE_SECONDS - 1
    os.utime(alive, (stale, stale))
    assert main() == 1
