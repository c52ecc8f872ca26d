"""What the relay sends is what IngestFunction accepts: every forwarded event parses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botmemory.ingest.observe import events_from
from botmemory.records import ObservationKind
from botmemory.services import MemoryServices
from localrun import gateway as gw
from relay.sinks import LambdaSink
from tests.relay.helpers import Clock, FakeLambda, make_forwarder, recorder

T0 = 1_767_225_600_000
ROOT = Path(__file__).resolve().parents[2]


def relayed_payloads(events: list[dict[str, Any]], tmp_path: Path, **bounds: Any) -> list[Any]:
    """The Invoke payloads the relay produces for these events."""
    client = FakeLambda()
    forwarder = make_forwarder(LambdaSink(client, "IngestFunction"), tmp_path, Clock(), **bounds)
    for event in events:
        forwarder.submit(event["t"], event["d"])
    forwarder.pump(final=True)
    return [json.loads(call["Payload"]) for call in client.accepted]


def test_every_forwarded_event_parses_as_an_observation(tmp_path: Path) -> None:
    events = gw.every_event_type(T0) + gw.every_event_type(T0 + 60_000)
    payloads = relayed_payloads(events, tmp_path, max_events=5)
    assert len(payloads) == 5
    parser = recorder()
    parsed = [parser.parse(event) for payload in payloads for event in events_from(payload)]
    assert len(parsed) == len(events)
    kinds = [p.kind for p in parsed[:4]]
    assert kinds == [ObservationKind.MESSAGE] * 3 + [ObservationKind.ANSWER]  # the bot's own


def test_a_relayed_batch_is_stored_whole_by_the_recorder(
    tmp_path: Path, services: MemoryServices
) -> None:
    events = gw.every_event_type(T0)
    (payload,) = relayed_payloads(events, tmp_path)
    result = services.recorder.record(events_from(payload))
    assert result.rejected == [] and result.ignored == []
    assert result.stored == len(events)
    # A batch sent twice (at-least-once delivery) is stored once.
    again = services.recorder.record(events_from(payload))
    assert (again.stored, again.duplicates) == (0, len(events))


def test_the_sample_ingest_event_survives_a_trip_through_the_relay(tmp_path: Path) -> None:
    sample = json.loads((ROOT / "events" / "ingest" / "gateway-batch.json").read_text())
    (payload,) = relayed_payloads(sample["events"], tmp_path)
    assert payload == sample
