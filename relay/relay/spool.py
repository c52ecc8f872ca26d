"""Batches the sink could not take, kept on disk until it can, oldest first.

One file per batch, named `<sequence>-<event count>.json` and holding the exact body to
send, so draining is a read and a send. Files are written to a temporary name, synced and
renamed: a crash leaves either a whole batch or a stray temporary file, never half of one.
The spool is bounded in bytes; at the bound the oldest batches go first, and the number of
events lost is logged and counted.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{16})-(\d{1,6})\.json$")
CORRUPT_SUFFIX = ".corrupt"


@dataclass(frozen=True)
class SpoolEntry:
    path: Path
    sequence: int
    count: int
    size: int


class Spool:
    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: list[SpoolEntry] = []
        self._corrupt: list[Path] = []
        self.dropped_events = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._scan()
        self._next = self._entries[-1].sequence + 1 if self._entries else 1

    def _scan(self) -> None:
        for path in sorted(self.directory.iterdir()):
            if not path.is_file():
                continue
            if path.name.endswith(".tmp"):
                # A write interrupted before its rename: never a whole batch.
                log.warning("removing unfinished spool file %s", path.name)
                path.unlink(missing_ok=True)
                continue
            if path.name.endswith(CORRUPT_SUFFIX):
                self._corrupt.append(path)
                continue
            match = _NAME.match(path.name)
            if match is None:
                log.warning("ignoring unexpected file in the spool: %s", path.name)
                continue
            self._entries.append(
                SpoolEntry(path, int(match[1]), int(match[2]), path.stat().st_size)
            )
        self._entries.sort(key=lambda entry: entry.sequence)
        if self._entries:
            log.info(
                "spool holds %d events in %d batches from an earlier run",
                sum(entry.count for entry in self._entries),
                len(self._entries),
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def backlog_events(self) -> int:
        """Events waiting in the spool now."""
        with self._lock:
            return sum(entry.count for entry in self._entries)

    def append(self, body: bytes, count: int) -> int:
        """Keep one batch; returns how many events were dropped to stay within the bound."""
        with self._lock:
            if len(body) > self._max_bytes:
                log.error(
                    "a %d-byte batch exceeds the whole spool; %d events dropped", len(body), count
                )
                self.dropped_events += count
                return count
            dropped = self._make_room(len(body))
            sequence = self._next
            self._next += 1
            path = self.directory / f"{sequence:016d}-{count}.json"
            temporary = path.with_name(path.name + ".tmp")
            with open(temporary, "wb") as handle:
                handle.write(body)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
            self._entries.append(SpoolEntry(path, sequence, count, len(body)))
            return dropped

    def _make_room(self, size: int) -> int:
        used = sum(entry.size for entry in self._entries) + self._corrupt_bytes()
        # Corrupt files go first: they can never be sent.
        while self._corrupt and used + size > self._max_bytes:
            path = self._corrupt.pop(0)
            used -= _size(path)
            path.unlink(missing_ok=True)
        dropped_events = dropped_batches = 0
        while self._entries and used + size > self._max_bytes:
            oldest = self._entries.pop(0)
            used -= oldest.size
            oldest.path.unlink(missing_ok=True)
            dropped_events += oldest.count
            dropped_batches += 1
        if dropped_events:
            self.dropped_events += dropped_events
            log.warning(
                "spool full (%d bytes): dropped the %d oldest batches, %d events",
                self._max_bytes,
                dropped_batches,
                dropped_events,
            )
        return dropped_events

    def _corrupt_bytes(self) -> int:
        return sum(_size(path) for path in self._corrupt)

    def oldest(self) -> tuple[SpoolEntry, bytes] | None:
        """The oldest readable batch and its body; unreadable ones are set aside with a warning."""
        with self._lock:
            while self._entries:
                entry = self._entries[0]
                try:
                    body = entry.path.read_bytes()
                    _check(body)
                except (OSError, ValueError) as error:
                    self._entries.pop(0)
                    self._quarantine(entry, error)
                    continue
                return entry, body
            return None

    def remove(self, entry: SpoolEntry) -> None:
        with self._lock:
            if entry in self._entries:
                self._entries.remove(entry)
            entry.path.unlink(missing_ok=True)

    def _quarantine(self, entry: SpoolEntry, error: Exception) -> None:
        log.warning(
            "skipping corrupt spool file %s (%s); renamed to %s%s",
            entry.path.name,
            error,
            entry.path.name,
            CORRUPT_SUFFIX,
        )
        target = entry.path.with_name(entry.path.name + CORRUPT_SUFFIX)
        try:
            os.replace(entry.path, target)
            self._corrupt.append(target)
        except OSError:
            entry.path.unlink(missing_ok=True)


def _check(body: bytes) -> None:
    """A spooled body must still be the ingest contract, or it is not sent."""
    envelope = json.loads(body)
    events = envelope.get("events") if isinstance(envelope, dict) else None
    if not isinstance(events, list) or not events:
        raise ValueError('not an {"events": [...]} batch')
    for event in events:
        if not (
            isinstance(event, dict)
            and isinstance(event.get("t"), str)
            and isinstance(event.get("d"), dict)
        ):
            raise ValueError("an event is not {t, d}")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
