"""Retries, the spool during a sink outage, draining in order, and refusals."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from localrun import gateway as gw
from relay.backoff import Backoff
from relay.batch import body_of, encode_event
from relay.forwarder import Forwarder
from relay.sinks import HttpSink, LambdaSink, Outcome, SendResult
from relay.spool import Spool
from tests.relay.helpers import (
    Clock,
    FakeLambda,
    IngestServer,
    RecordingSink,
    make_forwarder,
    throttled,
    unreachable,
)

T0 = 1_767_225_600_000
RETRY = SendResult(Outcome.RETRY, "connection refused")


def conversation(count: int, start: int = 0) -> list[dict]:
    channels = [gw.CHANNEL, "200000000000000002"]
    return [
        gw.message(gw.ALICE, f"message {i}", T0 + i, channel=channels[i % 2])
        for i in range(start, start + count)
    ]


def submit_all(forwarder: Forwarder, events: list[dict]) -> None:
    for event in events:
        forwarder.submit(event["t"], event["d"])


@pytest.fixture
def server() -> Iterator[IngestServer]:
    peer = IngestServer()
    yield peer
    peer.down()


def test_backoff_grows_exponentially_with_jitter_up_to_its_cap() -> None:
    low = Backoff(base=0.5, cap=8.0, random=lambda: 0.0)
    high = Backoff(base=0.5, cap=8.0, random=lambda: 0.999999)
    assert [low.delay(n) for n in range(6)] == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0]
    assert [round(high.delay(n), 3) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert low.delay(10_000) == 4.0  # no overflow


def test_a_failed_send_is_retried_with_growing_waits_then_delivered(tmp_path: Path) -> None:
    sink, clock, sleeps = RecordingSink(RETRY, RETRY), Clock(), list[float]()
    forwarder = make_forwarder(sink, tmp_path, clock, attempts=4, sleeps=sleeps)
    events = conversation(3)
    submit_all(forwarder, events)
    forwarder.pump(final=True)
    assert len(sink.bodies) == 3 and sink.bodies[0] == sink.bodies[2]
    assert sleeps == [0.375, 0.75]  # base 0.5 * 2**n, half fixed, half jitter
    assert forwarder.stats.forwarded == 3
    assert list(tmp_path.iterdir()) == []


def test_sink_outage_spools_to_disk_then_drains_in_order(
    tmp_path: Path, server: IngestServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    sink = HttpSink(server.url, timeout_seconds=2)
    forwarder = make_forwarder(sink, tmp_path, clock, max_events=4, attempts=2)
    before, during, after = conversation(4), conversation(10, 4), conversation(3, 14)

    submit_all(forwarder, before)
    forwarder.pump()
    assert server.events == before

    server.down()
    with caplog.at_level(logging.WARNING):
        submit_all(forwarder, during)
        forwarder.pump()
        clock.advance(2.0)
        forwarder.pump()  # the time-sealed remainder goes to the spool too
    assert "unavailable" in caplog.text
    spooled = sorted(tmp_path.iterdir())
    assert [p.name for p in spooled] == [
        "0000000000000001-4.json",
        "0000000000000002-4.json",
        "0000000000000003-2.json",
    ]
    assert forwarder.stats.spooled == 10
    assert forwarder.stats.backlog == 10

    server.up()
    submit_all(forwarder, after)  # joins the spool's tail: nothing overtakes the backlog
    clock.advance(60)
    forwarder.pump()
    assert server.events == before + during + after
    assert list(tmp_path.iterdir()) == []
    stats = forwarder.stats
    assert (stats.received, stats.forwarded, stats.dropped, stats.backlog) == (17, 17, 0, 0)


def test_while_down_probes_back_off_instead_of_hammering(tmp_path: Path) -> None:
    sink, clock = RecordingSink(*[RETRY] * 10), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock, attempts=1)
    submit_all(forwarder, conversation(1))
    forwarder.pump(final=False)
    clock.advance(2.0)
    forwarder.pump()
    sends = len(sink.bodies)
    for _ in range(20):  # 20 steps at 0.1 s: the growing probe interval allows only a few
        clock.advance(0.1)
        forwarder.pump()
    assert len(sink.bodies) - sends <= 3


def test_the_lambda_path_retries_throttling_and_spools_when_unreachable(tmp_path: Path) -> None:
    client, clock = FakeLambda(), Clock()
    client.failures = [throttled(), None, unreachable(), unreachable(), unreachable()]
    forwarder = make_forwarder(
        LambdaSink(client, "IngestFunction"), tmp_path, clock, max_events=2, attempts=2
    )
    events = conversation(4)
    submit_all(forwarder, events[:2])
    forwarder.pump()  # throttled once, then delivered
    submit_all(forwarder, events[2:])
    forwarder.pump()  # unreachable twice: spooled
    assert client.events == events[:2]
    assert forwarder.stats.backlog == 2
    clock.advance(1.0)
    forwarder.pump()  # a probe, still unreachable
    clock.advance(60)
    forwarder.pump()  # back
    assert client.events == events[:2] + events[2:]
    assert all(call["InvocationType"] == "Event" for call in client.calls)
    assert all(call["FunctionName"] == "IngestFunction" for call in client.calls)


def test_a_backlog_left_by_an_earlier_run_goes_before_new_events(
    tmp_path: Path, server: IngestServer
) -> None:
    clock = Clock()
    server.down()
    first = make_forwarder(HttpSink(server.url), tmp_path, clock, attempts=1)
    old = conversation(5)
    submit_all(first, old)
    first.close()  # sink down: the flush spools
    assert first.stats.backlog == 5

    server.up()
    second = make_forwarder(HttpSink(server.url), tmp_path, clock)
    new = conversation(2, 5)
    submit_all(second, new)
    clock.advance(2.0)
    second.pump()
    assert server.events == old + new


def test_a_full_spool_drops_the_oldest_batches_and_logs_the_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    events = conversation(12)
    batch_size = len(body_of([encode_event(e["t"], e["d"]) for e in events[:3]]))
    sink, clock = RecordingSink(*[RETRY] * 100), Clock()
    forwarder = make_forwarder(
        sink, tmp_path, clock, max_events=3, attempts=1, spool_bytes=int(batch_size * 2.5)
    )
    with caplog.at_level(logging.WARNING):
        submit_all(forwarder, events)
        forwarder.pump()
    assert "dropped the 1 oldest batches, 3 events" in caplog.text
    assert forwarder.stats.dropped == 6  # four batches, room for two
    assert forwarder.stats.backlog == 6
    sink.script.clear()
    clock.advance(60)
    forwarder.pump()
    assert sink.events[-6:] == events[6:]


def test_a_corrupt_spool_file_is_skipped_with_a_warning(
    tmp_path: Path, server: IngestServer, caplog: pytest.LogCaptureFixture
) -> None:
    good = conversation(2)
    (tmp_path / "0000000000000001-3.json").write_bytes(b'{"events": [truncated')
    (tmp_path / "0000000000000002-1.json").write_bytes(b'{"events": [{"t": 1}]}')
    (tmp_path / "0000000000000003-2.json").write_bytes(
        body_of([encode_event(e["t"], e["d"]) for e in good])
    )
    (tmp_path / "0000000000000004-1.json.tmp").write_bytes(b"half a wri")
    clock = Clock()
    with caplog.at_level(logging.WARNING):
        forwarder = make_forwarder(HttpSink(server.url), tmp_path, clock)
        forwarder.pump()
    assert server.events == good
    assert "skipping corrupt spool file 0000000000000001-3.json" in caplog.text
    assert "skipping corrupt spool file 0000000000000002-1.json" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "0000000000000001-3.json.corrupt",
        "0000000000000002-1.json.corrupt",
    ]
    # The next run is not bothered by them either.
    again = make_forwarder(HttpSink(server.url), tmp_path, clock)
    again.pump()
    assert again.stats.backlog == 0


def test_a_batch_the_endpoint_rejects_is_logged_and_not_retried(
    tmp_path: Path, server: IngestServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.mode = "reject"
    clock = Clock()
    forwarder = make_forwarder(HttpSink(server.url), tmp_path, clock, attempts=5)
    submit_all(forwarder, conversation(3))
    with caplog.at_level(logging.WARNING):
        forwarder.pump(final=True)
    assert server.requests == 1
    assert "sink rejected a batch of 3 events, not retried: HTTP 400: the body must be JSON" in (
        caplog.text
    )
    assert forwarder.stats.rejected == 3
    assert list(tmp_path.iterdir()) == []


def test_events_ingest_rejects_are_logged_with_their_reason(
    tmp_path: Path, server: IngestServer, caplog: pytest.LogCaptureFixture
) -> None:
    good = gw.message(gw.ALICE, "fine", T0)
    bad = gw.message(gw.BOB, "no author", T0 + 1)
    del bad["d"]["author"]
    forwarder = make_forwarder(HttpSink(server.url), tmp_path, Clock())
    submit_all(forwarder, [good, bad])
    with caplog.at_level(logging.WARNING):
        forwarder.pump(final=True)
    assert "sink rejected event 1 (MESSAGE_CREATE)" in caplog.text
    assert "author" in caplog.text
    stats = forwarder.stats
    assert (stats.forwarded, stats.rejected) == (1, 1)


def test_5xx_answers_are_retried_not_rejected(tmp_path: Path, server: IngestServer) -> None:
    server.mode = "unwell"
    forwarder = make_forwarder(HttpSink(server.url), tmp_path, Clock(), attempts=3)
    submit_all(forwarder, conversation(1))
    forwarder.pump(final=True)
    assert server.requests == 3
    assert forwarder.stats.backlog == 1


def test_one_health_line_a_minute(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    forwarder = make_forwarder(RecordingSink(), tmp_path, clock)
    forwarder.submit("TYPING_START", {})
    submit_all(forwarder, conversation(2))
    with caplog.at_level(logging.INFO, logger="relay"):
        for _ in range(12):
            clock.advance(10)
            forwarder.pump()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("health:")]
    assert len(lines) == 2
    assert lines[-1] == (
        "health: in=2 forwarded=2 spooled=0 dropped=0 ignored=1 rejected=0 backlog=0 sink=up"
    )


def test_shutdown_sends_what_is_queued(tmp_path: Path, server: IngestServer) -> None:
    forwarder = make_forwarder(HttpSink(server.url), tmp_path, Clock(), max_seconds=300)
    forwarder.start()
    events = conversation(5)
    submit_all(forwarder, events)
    forwarder.close(timeout=5)
    assert server.events == events
    assert not forwarder.submit(events[0]["t"], events[0]["d"])  # closed: counted as dropped


def test_shutdown_spools_when_a_send_hangs_past_the_deadline(tmp_path: Path) -> None:
    release = threading.Event()
    entered = threading.Event()

    class Hanging(RecordingSink):
        def send(self, body: bytes) -> SendResult:
            entered.set()
            release.wait(5)
            return super().send(body)

    forwarder = make_forwarder(Hanging(), tmp_path, Clock(), max_events=2)
    forwarder.start()
    events = conversation(3)
    submit_all(forwarder, events)
    assert entered.wait(5)
    forwarder.close(timeout=0.2)
    release.set()
    spool = Spool(tmp_path, 10_000_000)
    assert spool.backlog_events == 3  # the one in flight (maybe sent twice) and the rest
