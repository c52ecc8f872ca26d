"""A ledger of IDENTIFYs in a rolling 24 hours, kept on disk across restarts.

Discord allows 1000 session starts a day per bot and resets the token beyond that. The
library resumes sessions, but a crash loop (a bad deploy, a restart policy) would start a
new session every time; the ledger is what stops that, because it survives the process.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

WINDOW_SECONDS = 86_400.0


class IdentifyLedger:
    def __init__(
        self, path: Path, max_per_day: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._path = path
        self._max = max_per_day
        self._clock = clock
        self._times = self._load()

    def _load(self) -> list[float]:
        try:
            data = json.loads(self._path.read_text())
            return sorted(float(moment) for moment in data["identifies"])
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as error:
            # Unknown history: start afresh, loudly. Discord's own session_start_limit,
            # checked before every IDENTIFY, still guards the hard limit.
            log.warning("identify ledger %s unreadable (%s); starting a new one", self._path, error)
            return []

    def _prune(self) -> None:
        horizon = self._clock() - WINDOW_SECONDS
        self._times = [moment for moment in self._times if moment > horizon]

    def count(self) -> int:
        """IDENTIFYs in the last 24 hours."""
        self._prune()
        return len(self._times)

    def wait_seconds(self) -> float:
        """0 when another IDENTIFY is allowed now, else how long until one is."""
        self._prune()
        if len(self._times) < self._max:
            return 0.0
        return max(0.0, self._times[len(self._times) - self._max] + WINDOW_SECONDS - self._clock())

    def record(self) -> None:
        self._prune()
        self._times.append(self._clock())
        temporary = self._path.with_name(self._path.name + ".tmp")
        self._path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps({"identifies": self._times}))
        os.replace(temporary, self._path)
