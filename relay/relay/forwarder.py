"""The forwarding core: dispatch events in, batches out to the sink, the spool in between.

Nothing here knows about Discord. `submit` is called from the gateway's event loop and
only appends under a lock; one worker thread seals batches, sends them, retries with
backoff and spools, so a slow or dead sink never stalls the websocket's heartbeats.

Order: batches leave in the order they were sealed. While the spool holds anything
(the sink is down, or an earlier run left a backlog), new batches join the spool's tail
and the spool drains oldest first, so events of one channel are never overtaken.
Delivery is at least once: IngestFunction stores an event under a key built from
Discord's ids, so a batch sent twice is stored once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from relay.backoff import Backoff
from relay.batch import ENVELOPE_BYTES, Batch, Batcher, BatchLimits, encode_event
from relay.events import FORWARDED_EVENTS, MESSAGE_EVENTS, split, trimmed
from relay.logs import HEALTH_EVENT, fields
from relay.sinks import Outcome, SendResult, Sink
from relay.spool import Spool

log = logging.getLogger(__name__)

# Fields IngestFunction never reads (of attachments, only their alt text, which stays:
# `_alt_texts`); dropped only from an event too large to send whole.
_BULKY_FIELDS = (
    "referenced_message",
    "message_snapshots",
    "embeds",
    "attachments",
    "components",
    "sticker_items",
    "stickers",
    "poll",
    "reactions",
    "mentions",
    "mention_roles",
    "mention_channels",
    "resolved",
    "interaction",
    "interaction_metadata",
)
# Spooled batches sent per worker step, so new events keep being sealed during a long drain.
_DRAIN_PER_STEP = 20


def _alt_texts(attachments: Any) -> list[dict[str, Any]]:
    """Of a message's attachments, what ingest keeps: the type and alt text of those with one."""
    if not isinstance(attachments, list):
        return []
    return [
        {"content_type": a.get("content_type"), "description": a["description"]}
        for a in attachments
        if isinstance(a, dict) and isinstance(a.get("description"), str) and a["description"]
    ]


@dataclass(frozen=True)
class Stats:
    received: int = 0  # events of the forwarded types that came in
    forwarded: int = 0  # events the sink accepted
    spooled: int = 0  # events written to the spool (they are forwarded later)
    dropped: int = 0  # events lost: spool overflow, too large, not encodable
    ignored: int = 0  # dispatches of other types
    rejected: int = 0  # events the sink refused, with a logged reason
    backlog: int = 0  # events waiting in the spool now

    def figures(self) -> dict[str, int]:
        """The totals under the names the health line uses, in its order."""
        return {
            "in": self.received,
            "forwarded": self.forwarded,
            "spooled": self.spooled,
            "dropped": self.dropped,
            "ignored": self.ignored,
            "rejected": self.rejected,
            "backlog": self.backlog,
        }

    def line(self) -> str:
        return " ".join(f"{name}={value}" for name, value in self.figures().items())


class Forwarder:
    def __init__(
        self,
        sink: Sink,
        spool: Spool,
        limits: BatchLimits,
        *,
        attempts: int = 4,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], bool] | None = None,
        health_seconds: float = 60.0,
    ) -> None:
        self._sink = sink
        self._spool = spool
        self._limits = limits
        self._attempts = attempts
        self._backoff = backoff or Backoff(base=0.5, cap=60.0)
        self._clock = clock
        self._stopping = threading.Event()
        # Waiting between retries ends early on shutdown (the batch is spooled instead).
        self._sleep = sleep or self._stopping.wait
        self._health_seconds = health_seconds
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._batcher = Batcher(limits, clock)
        self._ready: deque[Batch] = deque()
        self._taken: deque[Batch] = deque()  # batches the worker is delivering now
        self._abandoned = False
        self._closed = False  # set by the final step; later events have nowhere to go
        self._stats = Stats()
        # Tickets (`submit_ticket`): events queued, and events the sink has settled, in
        # order; an earlier run's spooled backlog is settled first, so it starts below 0.
        self._queued = 0
        self._settled = -spool.backlog_events
        self._ignored_types: Counter[str] = Counter()
        # An earlier run's backlog is drained before anything new is sent.
        self._outage = len(spool) > 0
        self._next_probe = clock()
        self._probe_failures = 0
        self._next_health = clock() + health_seconds
        self._thread: threading.Thread | None = None

    # Called from the gateway's thread.

    def submit(self, name: str, payload: Any) -> bool:
        """Queue one dispatch event; False when it is not forwarded (and counted why).

        A guild event too large for one batch goes as several parts (`events.split`), each
        counted as one event received."""
        return self.submit_ticket(name, payload)[0]

    def submit_ticket(self, name: str, payload: Any) -> tuple[bool, int]:
        """`submit`, and the event's ticket: once `settled` reaches it, the event and every
        one before it has been delivered or refused by the sink (not merely spooled on
        this task's disk, which dies with the task). A gateway session resumes from the
        last sequence whose ticket is settled, so a killed task loses nothing."""
        if name not in FORWARDED_EVENTS:
            with self._lock:
                self._count(ignored=1)
                self._ignored_types[name[:60]] += 1
                return False, self._queued
        encoded = self._encode(name, payload)
        with self._lock:
            if not encoded:
                self._count(dropped=1)
                return False, self._queued
            if self._closed:
                log.warning("%s arrived after shutdown; dropped", name)
                self._count(dropped=len(encoded))
                return False, self._queued
            self._count(received=len(encoded))
            self._queued += len(encoded)
            opens = len(self._batcher) == 0
            sealed = [batch for event in encoded for batch in self._batcher.add(event)]
            self._ready.extend(sealed)
            if sealed or opens:
                self._wake.notify()
            return True, self._queued

    def _encode(self, name: str, payload: Any) -> list[bytes]:
        if not isinstance(payload, dict):
            log.warning("%s without a payload object; dropped", name)
            return []
        if name in MESSAGE_EVENTS:  # the common case: one event, as Discord sent it
            one = self._encode_one(name, payload)
            return [] if one is None else [one]
        # What of `{"t":NAME,"d":...}` and the batch envelope is not the payload itself.
        overhead = ENVELOPE_BYTES + len(encode_event(name, {})) - 2
        parts = split(trimmed(name, payload), self._limits.max_bytes - overhead)
        if len(parts) > 1:
            log.info("%s %s split into %d parts", name, payload.get("id", ""), len(parts))
        encoded = [self._encode_one(name, part) for part in parts]
        return [] if None in encoded else [e for e in encoded if e is not None]

    def _encode_one(self, name: str, payload: dict[str, Any]) -> bytes | None:
        try:
            encoded = encode_event(name, payload)
            if not self._limits.fits_alone(encoded):
                slim = {k: v for k, v in payload.items() if k not in _BULKY_FIELDS}
                if alt_texts := _alt_texts(payload.get("attachments")):
                    slim["attachments"] = alt_texts
                encoded = encode_event(name, slim)
        except ValueError as error:
            log.warning("%s %s: %s; dropped", name, payload.get("id", ""), error)
            return None
        if not self._limits.fits_alone(encoded):
            log.warning(
                "%s %s is %d bytes, over the %d-byte batch bound even without its bulky "
                "fields; dropped",
                name,
                payload.get("id", ""),
                len(encoded),
                self._limits.max_bytes,
            )
            return None
        return encoded

    @property
    def stats(self) -> Stats:
        with self._lock:
            return replace(self._stats, backlog=self._spool.backlog_events)

    @property
    def settled(self) -> int:
        """The highest ticket whose event, and all before it, the sink has settled."""
        with self._lock:
            return self._settled

    @property
    def ignored_types(self) -> dict[str, int]:
        with self._lock:
            return dict(self._ignored_types)

    def _count(self, **deltas: int) -> None:
        values = {name: getattr(self._stats, name) + delta for name, delta in deltas.items()}
        self._stats = replace(self._stats, **values)

    # The worker.

    def start(self) -> None:
        # A daemon thread: a send stuck past the shutdown deadline must not keep the process.
        self._thread = threading.Thread(target=self._run, name="relay-forwarder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.pump()
            with self._lock:
                if self._ready or self._stopping.is_set():
                    continue
                delay = self._next_wake() - self._clock()
                if delay > 0:
                    self._wake.wait(delay)
        self.pump(final=True)

    def _next_wake(self) -> float:
        moments = [self._next_health]
        deadline = self._batcher.deadline()
        if deadline is not None:
            moments.append(deadline)
        if self._outage:
            moments.append(self._next_probe)
        return min(moments)

    def pump(self, *, final: bool = False) -> None:
        """One step: seal what is due, deliver it, drain the spool when a probe is due.

        The worker calls it in a loop; tests call it directly with a manual clock.
        `final` seals everything still open and never waits (shutdown).
        """
        with self._lock:
            if self._abandoned:
                return
            self._closed = self._closed or final
            self._ready.extend(self._batcher.drain() if final else self._batcher.due())
            self._taken.extend(self._ready)
            self._ready.clear()
        while True:
            with self._lock:
                if self._abandoned or not self._taken:
                    break
                batch = self._taken[0]
            self._deliver(batch)
            with self._lock:
                if self._taken and self._taken[0] is batch:
                    self._taken.popleft()
        if self._outage and not final and self._clock() >= self._next_probe:
            self._drain_spool()
        if final or self._clock() >= self._next_health:
            self._next_health = self._clock() + self._health_seconds
            self._log_health("down" if self._outage else "up")

    def _log_health(self, sink: str) -> None:
        """The health line: in text as README.md shows it; in JSON with every figure as a
        field, `sink_down` 1 unless the sink is up (relay/template.yaml's metric filters)."""
        stats = self.stats
        figures = {**stats.figures(), "sink": sink, "sink_down": int(sink != "up")}
        log.info("health: %s sink=%s", stats.line(), sink, extra=fields(HEALTH_EVENT, figures))

    def _deliver(self, batch: Batch) -> None:
        if self._outage:
            self._to_spool(batch)
            return
        body = batch.body()
        result = self._send_with_retries(body)
        if result.outcome is Outcome.RETRY:
            log.warning(
                "sink %s unavailable (%s); spooling until it is back",
                self._sink.description,
                result.reason,
            )
            self._outage = True
            self._probe_failures = 0
            self._next_probe = self._clock() + self._backoff.delay(0)
            self._to_spool(batch)
            return
        self._account(result, batch.count)

    def _send_with_retries(self, body: bytes) -> SendResult:
        attempt = 0
        while True:
            result = self._sink.send(body)
            attempt += 1
            if result.outcome is not Outcome.RETRY or attempt >= self._attempts:
                return result
            if self._stopping.is_set():
                return result
            delay = self._backoff.delay(attempt - 1)
            log.info("send failed (%s); attempt %d in %.2fs", result.reason, attempt + 1, delay)
            if self._sleep(delay):
                return result

    def _account(self, result: SendResult, count: int) -> None:
        if result.outcome is Outcome.REJECTED:
            log.warning("sink rejected a batch of %d events, not retried: %s", count, result.reason)
            with self._lock:
                self._count(rejected=count)
                self._settled += count
            return
        for rejection in result.rejected:
            log.warning(
                "sink rejected event %d (%s): %s",
                rejection.index,
                rejection.event,
                rejection.reason,
            )
        with self._lock:
            self._count(
                forwarded=count - len(result.rejected),
                rejected=len(result.rejected),
            )
            self._settled += count

    def _to_spool(self, batch: Batch) -> None:
        dropped = self._spool.append(batch.body(), batch.count)
        with self._lock:
            self._count(spooled=batch.count, dropped=dropped)
            self._settled += dropped  # lost for good: nothing to wait for

    def _drain_spool(self) -> None:
        for _ in range(_DRAIN_PER_STEP):
            item = self._spool.oldest()
            if item is None:
                self._outage = False
                log.info("sink %s is back; spool drained", self._sink.description)
                return
            entry, body = item
            result = self._sink.send(body)
            if result.outcome is Outcome.RETRY:
                self._probe_failures += 1
                self._next_probe = self._clock() + self._backoff.delay(self._probe_failures)
                return
            self._spool.remove(entry)
            self._account(result, entry.count)
            if self._stopping.is_set():
                return
        self._next_probe = self._clock()  # more to drain: carry on at the next step

    # Shutdown.

    def close(self, timeout: float = 10.0) -> None:
        """Flush: send what is queued, spool what cannot be sent, within `timeout` seconds.
        Once: a second call (the fleet drains before saving sessions, then the app's
        shutdown) does nothing."""
        with self._lock:
            if self._stopping.is_set():
                return
            self._stopping.set()
            self._wake.notify_all()
        if self._thread is None:
            self.pump(final=True)
        else:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._spool_leftovers()
                return
        self._sink.close()

    def _spool_leftovers(self) -> None:
        # The worker is stuck in a send. Its batch may yet arrive; spooling it anyway can
        # only duplicate it, and IngestFunction stores a duplicate once.
        with self._lock:
            self._abandoned = self._closed = True
            leftovers = [*self._taken, *self._ready, *self._batcher.drain()]
            self._taken.clear()
            self._ready.clear()
        log.warning(
            "shutdown deadline reached during a send; spooling %d batches",
            len(leftovers),
        )
        for batch in leftovers:
            self._to_spool(batch)
        self._log_health("stuck")
