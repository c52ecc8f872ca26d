"""The local run: `make demo` end to end, `make dev`'s endpoints, and their failures."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from botmemory.discord.interactions import InteractionResponseType
from localrun.motoserver import free_port

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
# A hang guard, not a speed figure: a subprocess still running after this is stuck.
HANG_GUARD_SECONDS = 300


def run_module(
    module: str, *args: str, timeout: float = HANG_GUARD_SECONDS
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_environment(),
    )


def clean_environment() -> dict[str, str]:
    """What a newcomer's shell has: no AWS settings at all."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MEMORY_", "DISCORD_"))
    }


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers; its state in /proc says whether it is really running.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def moto_pid(output: str) -> int:
    match = re.search(r"pid (\d+)\)", output)
    assert match, output
    return int(match.group(1))


# Enough of the conversation for several consolidations, episodes and facts through every
# function, the stream and the schedule; `make demo` replays all of it (the same code).
DEMO_MESSAGES = 200


def test_the_demo_runs_end_to_end() -> None:
    done = run_module("localrun.demo", "--limit", str(DEMO_MESSAGES))

    assert done.returncode == 0, done.stderr
    out = done.stdout
    counts = dict(
        re.findall(r"^  (observations|consolidations|episodes|discarded facts)\s+(\d+)", out, re.M)
    )
    assert 0 < int(counts["observations"]) <= DEMO_MESSAGES and int(counts["consolidations"]) > 0
    assert int(counts["episodes"]) > 0
    assert re.search(r"^  facts\s+[1-9]\d* \(", out, re.M)
    assert "<memory>" in out and "About the people in this conversation:" in out
    assert re.search(r"Staff listing for .+\nFacts about <@\d+> \(\d+\):", out)
    assert not pid_alive(moto_pid(out))


def test_the_demo_refuses_a_port_already_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        done = run_module("localrun.demo", "--port", str(port))

    assert done.returncode == 2
    assert f"port {port} on 127.0.0.1 is already taken" in done.stderr


def test_the_demo_names_a_missing_dataset(tmp_path: Path) -> None:
    done = run_module("localrun.demo", "--dataset", str(tmp_path / "nowhere.json"))

    assert done.returncode == 2
    assert "no conversation at" in done.stderr and "nowhere.json" in done.stderr


def test_the_demo_stops_cleanly_when_its_dynamodb_dies() -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "localrun.demo"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_environment(),
    )
    try:
        assert demo.stdout is not None
        line = ""
        while "pid " not in line:
            line = demo.stdout.readline()
            assert line, "the demo ended before starting its DynamoDB"
        pid = moto_pid(line)
        os.kill(pid, signal.SIGKILL)
        _, stderr = demo.communicate(timeout=90)
    finally:
        if demo.poll() is None:
            demo.kill()

    assert demo.returncode != 0
    assert "the local DynamoDB stopped" in stderr


def request(url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    data = (
        body
        if isinstance(body, bytes)
        else (json.dumps(body).encode() if body is not None else None)
    )
    req = urllib.request.Request(
        url, data=data, headers=headers or {}, method="POST" if data else "GET"
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_dev_refuses_a_dynamodb_port_already_taken_in_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        done = run_module(
            "localrun.dev", "--port", str(port), "--http-port", str(free_port()), timeout=60
        )

    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"make dev: port {port} on 127.0.0.1 for the local DynamoDB")
    assert "--port N" in line and "events/env.json expects 8000" in line


def test_dev_serves_ingest_recall_and_interactions_and_stops_on_ctrl_c() -> None:
    http_port = free_port()
    # Not the default DynamoDB port (8000): the test must not depend on it being free.
    dev = subprocess.Popen(
        [
            sys.executable,
            *("-m", "localrun.dev", "--http-port", str(http_port)),
            *("--port", str(free_port())),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_environment(),
    )
    try:
        assert dev.stdout is not None
        lines = []
        while not lines or not lines[-1].startswith("Ready:"):
            line = dev.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        pid = moto_pid("".join(lines))
        base = f"http://127.0.0.1:{http_port}"

        status, body = request(
            f"{base}/ingest", json.loads((EVENTS / "ingest/gateway-batch.json").read_text())
        )
        assert status == 200 and json.loads(body)["stored"] == 14
        status, body = request(
            f"{base}/recall", json.loads((EVENTS / "recall/request.json").read_text())
        )
        assert status == 200 and json.loads(body)["enabled"] is True
        status, body = request(f"{base}/recall", {"channel_id": "1"})
        assert status == 400 and json.loads(body)["fields"] == ["user_id"]
        status, body = request(f"{base}/ingest", b"{not json")
        assert status == 400

        ping = json.loads((EVENTS / "interactions/ping.json").read_text())
        status, body = request(f"{base}/interactions", ping["body"].encode(), ping["headers"])
        assert (status, json.loads(body)) == (200, {"type": InteractionResponseType.PONG})
        forged = {**ping["headers"], "x-signature-ed25519": "00" * 64}
        status, _ = request(f"{base}/interactions", ping["body"].encode(), forged)
        assert status == 401

        # A message mentioning the bot is answered: the reply it would post is printed.
        bot = "1399999999999999999"  # DISCORD_APPLICATION_ID unset: the sample bot id
        mention = json.loads((EVENTS / "ingest/gateway-batch.json").read_text())["events"][0]
        mention["d"].update(
            id=str(int(mention["d"]["id"]) + 7),
            content=f"<@{bot}> do you remember me?",
            mentions=[{"id": bot, "username": "memorybot", "bot": True}],
        )
        status, body = request(f"{base}/ingest", {"events": [mention]})
        assert status == 200 and json.loads(body)["stored"] == 1

        dev.send_signal(signal.SIGINT)
        output, _ = dev.communicate(timeout=20)
        assert dev.returncode == 0
        replies = [line for line in output.splitlines() if line.startswith("[bot -> channel")]
        assert replies and f"in reply to {mention['d']['id']}" in replies[0], output[-2000:]
    finally:
        if dev.poll() is None:
            dev.kill()
    assert not pid_alive(pid)
