"""Batch bounds (count, bytes, age), order, and what never enters a batch."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from localrun import gateway as gw
from relay.batch import ENVELOPE_BYTES, encode_event
from relay.events import MESSAGE_EVENTS
from tests.relay.helpers import Clock, RecordingSink, make_forwarder

T0 = 1_767_225_600_000
OTHER_CHANNEL = "200000000000000002"
THIRD_CHANNEL = "200000000000000003"


def messages(count: int, *, channel: str = gw.CHANNEL, text: str = "hello") -> list[dict]:
    return [gw.message(gw.ALICE, f"{text} {i}", T0 + i, channel=channel) for i in range(count)]


def test_a_batch_holds_at_most_max_events(tmp_path: Path) -> None:
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock, max_events=3)
    for event in messages(7):
        assert forwarder.submit(event["t"], event["d"])
    forwarder.pump()
    assert [len(batch) for batch in sink.batches] == [3, 3]  # the 7th waits for its time
    clock.advance(2.0)
    forwarder.pump()
    assert [len(batch) for batch in sink.batches] == [3, 3, 1]


def test_a_batch_body_never_exceeds_max_bytes(tmp_path: Path) -> None:
    events = messages(9, text="x" * 300)
    size = len(encode_event(events[0]["t"], events[0]["d"]))
    # Room for two events and their separator, not three.
    max_bytes = ENVELOPE_BYTES + 2 * size + 1 + size // 2
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock, max_bytes=max_bytes)
    for event in events:
        forwarder.submit(event["t"], event["d"])
    forwarder.pump(final=True)
    assert [len(batch) for batch in sink.batches] == [2, 2, 2, 2, 1]
    assert all(len(body) <= max_bytes for body in sink.bodies)
    assert sink.events == events


def test_a_batch_leaves_when_its_first_event_is_max_seconds_old(tmp_path: Path) -> None:
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock, max_seconds=2.0)
    first, second = messages(2)
    forwarder.submit(first["t"], first["d"])
    clock.advance(1.5)
    forwarder.submit(second["t"], second["d"])
    forwarder.pump()
    assert sink.bodies == []
    clock.advance(0.49)
    forwarder.pump()
    assert sink.bodies == []
    clock.advance(0.01)
    forwarder.pump()
    assert sink.events == [first, second]


def test_the_worker_thread_sends_on_time_without_being_asked(tmp_path: Path) -> None:
    sink = RecordingSink()
    forwarder = make_forwarder(sink, tmp_path, time.monotonic, max_seconds=0.05)
    forwarder.start()
    try:
        event = messages(1)[0]
        forwarder.submit(event["t"], event["d"])
        deadline = time.monotonic() + 5
        while not sink.bodies and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sink.events == [event]
    finally:
        forwarder.close(timeout=5)
    assert sink.closed


def test_events_leave_in_arrival_order_so_each_channel_keeps_its_order(tmp_path: Path) -> None:
    channels = [gw.CHANNEL, OTHER_CHANNEL, THIRD_CHANNEL]
    events = [gw.message(gw.BOB, f"m{i}", T0 + i, channel=channels[(i * 7) % 3]) for i in range(50)]
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock, max_events=4)
    for i, event in enumerate(events):
        forwarder.submit(event["t"], event["d"])
        if i % 5 == 0:
            clock.advance(2.0)
            forwarder.pump()
    forwarder.pump(final=True)
    assert sink.events == events
    for channel in channels:
        sent = [e["d"]["content"] for e in sink.events if e["d"]["channel_id"] == channel]
        assert sent == [e["d"]["content"] for e in events if e["d"]["channel_id"] == channel]


def test_all_eight_types_and_the_bots_own_message_are_forwarded_raw(tmp_path: Path) -> None:
    events = gw.every_event_type(T0)
    assert {e["t"] for e in events} == MESSAGE_EVENTS
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock)
    for event in events:
        assert forwarder.submit(event["t"], event["d"])
    forwarder.pump(final=True)
    assert sink.events == events  # byte-for-byte the payloads Discord sent
    assert any(e["d"].get("author", {}).get("id") == gw.BOT for e in sink.events)


def test_other_dispatch_types_are_ignored_and_counted(tmp_path: Path) -> None:
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock)
    assert not forwarder.submit("TYPING_START", {"channel_id": gw.CHANNEL})
    assert not forwarder.submit("PRESENCE_UPDATE", {})
    assert not forwarder.submit("TYPING_START", {"channel_id": gw.CHANNEL})
    forwarder.pump(final=True)
    assert sink.bodies == []
    assert forwarder.stats.ignored == 3
    assert forwarder.ignored_types == {"TYPING_START": 2, "PRESENCE_UPDATE": 1}


def test_an_oversized_event_loses_only_fields_ingest_never_reads(tmp_path: Path) -> None:
    event = messages(1)[0]
    event["d"]["embeds"] = [{"description": "e" * 5_000}]
    event["d"]["referenced_message"] = {"content": "r" * 5_000}
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock, max_bytes=4_000)
    assert forwarder.submit(event["t"], event["d"])
    forwarder.pump(final=True)
    (sent,) = sink.events
    assert "embeds" not in sent["d"] and "referenced_message" not in sent["d"]
    assert sent["d"]["content"] == event["d"]["content"]
    assert sent["d"]["author"] == event["d"]["author"]


def test_an_oversized_event_keeps_the_alt_text_of_its_attachments(tmp_path: Path) -> None:
    event = gw.message(gw.ALICE, "my kiln", T0, attachments=[gw.image("a kiln"), gw.image(None)])
    event["d"]["embeds"] = [{"description": "e" * 5_000}]
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock, max_bytes=4_000)
    assert forwarder.submit(event["t"], event["d"])
    forwarder.pump(final=True)
    (sent,) = sink.events
    assert "embeds" not in sent["d"]
    assert sent["d"]["attachments"] == [{"content_type": "image/png", "description": "a kiln"}]


def test_an_event_too_large_even_slimmed_is_dropped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    huge = gw.message(gw.ALICE, "y" * 5_000, T0)
    small = gw.message(gw.ALICE, "fine", T0 + 1)
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock, max_bytes=4_000)
    with caplog.at_level(logging.WARNING):
        assert not forwarder.submit(huge["t"], huge["d"])
        assert forwarder.submit(small["t"], small["d"])
    forwarder.pump(final=True)
    assert sink.events == [small]
    assert forwarder.stats.dropped == 1
    assert "over the 4000-byte batch bound" in caplog.text


def test_text_that_is_not_utf8_is_dropped_not_sent(tmp_path: Path) -> None:
    bad = gw.message(gw.ALICE, "broken \ud800 surrogate", T0)
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock)
    assert not forwarder.submit(bad["t"], bad["d"])
    assert not forwarder.submit("MESSAGE_CREATE", "not an object")
    forwarder.pump(final=True)
    assert sink.bodies == []
    assert forwarder.stats.dropped == 2


def test_bodies_are_compact_utf8_json_in_the_ingest_contract(tmp_path: Path) -> None:
    event = gw.message(gw.ALICE, "naïve café 👍", T0)
    sink, clock = RecordingSink(), Clock()
    forwarder = make_forwarder(sink, tmp_path, clock)
    forwarder.submit(event["t"], event["d"])
    forwarder.pump(final=True)
    (body,) = sink.bodies
    assert json.loads(body) == {"events": [event]}
    assert "👍".encode() in body  # not \\u escapes: smaller bodies
