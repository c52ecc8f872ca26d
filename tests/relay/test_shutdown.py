"""SIGTERM flushes: a real relay process, a real signal, a real HTTP sink on loopback.

The process runs `python -m relay --replay -`, the forwarding core fed from stdin instead
of Discord. Its batch time bound is five minutes, so only the shutdown flush can have
sent (or spooled) what it holds when the signal arrives.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localrun import gateway as gw
from tests.relay.helpers import IngestServer

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_767_225_600_000


@pytest.fixture
def server() -> Iterator[IngestServer]:
    peer = IngestServer()
    yield peer
    peer.down()


class Relay:
    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "relay", "--replay", "-"],
            cwd=ROOT / "relay",
            env=env,
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line)

    def send(self, events: list[dict]) -> None:
        assert self.process.stdin is not None
        for event in events:
            self.process.stdin.write(json.dumps(event) + "\n")
        self.process.stdin.flush()

    def wait_for(self, text: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.05)
            except queue.Empty:
                continue
            self.log.append(line)
            if text in line:
                return
        raise AssertionError(f"relay never logged {text!r}; it logged:\n{''.join(self.log)}")

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=10)
        while not self.lines.empty():
            self.log.append(self.lines.get())
        return code


def environment(tmp_path: Path, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "INGEST_"))}
    env.update(
        INGEST_URL=url,
        RELAY_SPOOL_DIR=str(tmp_path),
        RELAY_BATCH_MAX_SECONDS="300",
        RELAY_HEALTH_SECONDS="0.05",
        RELAY_SEND_ATTEMPTS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def test_sigterm_sends_what_the_relay_holds(tmp_path: Path, server: IngestServer) -> None:
    events = [gw.message(gw.ALICE, f"before shutdown {i}", T0 + i) for i in range(5)]
    relay = Relay(environment(tmp_path, server.url))
    relay.send(events)
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
    relay.send(events)
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
    relay.send([gw.message(gw.BOB, "during the outage", T0)])
    relay.wait_for("in=1 ")
    assert relay.terminate() == 0
    said = "".join(relay.log)

    start = next(line for line in relay.log if "relay starting" in line)
    assert f"relay starting; sink {server.url}; unsharded; replaying -" in start
    assert f"sink {server.url} unavailable" in said
    assert "http:http" not in said and said.count("sink http") == said.count(server.url)
