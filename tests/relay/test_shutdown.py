"""SIGTERM flushes: a real relay process, a real signal, a real HTTP sink on loopback.

The process runs `python -m relay --replay -`, the forwarding core fed from stdin instead
of Discord. Its batch time bound is five minutes, so only the shutdown flush can have
sent (or spooled) what it holds when the signal arrives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from localrun import gateway as gw
from tests.relay.helpers import IngestServer
from tests.relay.processes import RelayProcess, relay_environment

T0 = 1_767_225_600_000


@pytest.fixture
def server() -> Iterator[IngestServer]:
    peer = IngestServer()
    yield peer
    peer.down()


class Relay(RelayProcess):
    """`python -m relay --replay -`: events written to its stdin, as JSON lines."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(env, "--replay", "-", stdin=True)

    def send_events(self, events: list[dict]) -> None:
        self.send("".join(json.dumps(event) + "\n" for event in events))


def environment(tmp_path: Path, url: str) -> dict[str, str]:
    return relay_environment(
        INGEST_URL=url,
        RELAY_SPOOL_DIR=str(tmp_path),
        RELAY_BATCH_MAX_SECONDS="300",
        RELAY_HEALTH_SECONDS="0.05",
        RELAY_SEND_ATTEMPTS="1",
    )


def test_sigterm_sends_what_the_relay_holds(tmp_path: Path, server: IngestServer) -> None:
    events = [gw.message(gw.ALICE, f"before shutdown {i}", T0 + i) for i in range(5)]
    relay = Relay(environment(tmp_path, server.url))
    relay.send_events(events)
    relay.wait_for("in=5 ")
    assert server.events == []  # held: the time bound is far away
    assert relay.terminate() == 0
    assert server.batches == [events]
    assert "SIGTERM: flushing" in "".join(relay.log)
    assert list((tmp_path / "batches").iterdir()) == []


def test_sigterm_with_the_sink_down_leaves_the_events_in_the_spool(
    tmp_path: Path, server: IngestServer
) -> None:
    server.down()
    events = [gw.message(gw.BOB, f"kept {i}", T0 + i) for i in range(3)]
    relay = Relay(environment(tmp_path, server.url))
    relay.send_events(events)
    relay.wait_for("in=3 ")
    assert relay.terminate() == 0
    (spooled,) = (tmp_path / "batches").iterdir()
    assert spooled.name == "0000000000000001-3.json"
    assert json.loads(spooled.read_bytes()) == {"events": events}


def test_the_log_names_the_sink_once_at_start_and_in_an_outage(
    tmp_path: Path, server: IngestServer
) -> None:
    server.down()
    relay = Relay(environment(tmp_path, server.url))
    relay.send_events([gw.message(gw.BOB, "during the outage", T0)])
    relay.wait_for("in=1 ")
    assert relay.terminate() == 0
    said = "".join(relay.log)

    start = next(line for line in relay.log if "relay starting" in line)
    assert f"relay starting; sink {server.url}; unsharded; replaying -" in start
    assert f"sink {server.url} unavailable" in said
    assert "http:http" not in said and said.count("sink http") == said.count(server.url)
