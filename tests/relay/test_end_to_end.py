"""The relay process as an operator starts it (`python -m relay`), connected to the fake
gateway on 127.0.0.1 and forwarding to `make dev`'s ingest endpoint; then recall is asked
what crossed channels. Nothing is handed to ingest directly: every event takes the frame
path a deployment runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from botmemory.discord.interactions import OptionType
from localrun import gateway as gw
from localrun.motoserver import free_port
from scripts.make_events import TEST_SEED, command
from tests.botmemory.commands.test_commands import STAFF
from tests.relay import guild_events as ge
from tests.relay.fake_discord import FakeGateway, complete
from tests.relay.fake_model import KNOWLEDGE, FakeModel
from tests.support.fake_providers import serving

ROOT = Path(__file__).resolve().parents[2]
ELSEWHERE_HEADING = "Lately in this server's other channels:"


def clean_environment() -> dict[str, str]:
    """What a newcomer's shell has: no AWS, memory or Discord settings."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "MEMORY_", "DISCORD_", "RELAY_", "INGEST_", "SHARD_"))
    }


def code_path() -> str:
    return os.pathsep.join(str(ROOT / part) for part in ("relay", "layers/core", "."))


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def wait_or_explain(
    condition: Callable[[], bool], what: str, relay: subprocess.Popen[str], dev: Dev
) -> None:
    """Wait up to a minute (the stream's next read and a consolidation come first); on
    timeout, fail with what the relay and make dev printed."""
    try:
        wait_for(condition, 60, what)
    except AssertionError as error:
        relay.send_signal(signal.SIGTERM)
        said = relay.communicate(timeout=30)[0]
        raise AssertionError(
            f"{error}\n{said[-3000:]}\n---\n{''.join(dev.output)[-5000:]}"
        ) from None


class GatewayThread:
    """The fake gateway served from its own event loop, in a thread of the test process."""

    def __init__(self, fake: FakeGateway) -> None:
        self.fake = fake
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> GatewayThread:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.start(), self.loop).result(10)
        return self

    def send(self, events: list[dict[str, Any]]) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.send(events), self.loop).result(10)

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class Dev:
    def __init__(self, url: str) -> None:
        self.url = url
        self.output: list[str] = []  # what it printed, for a failure's message


@contextlib.contextmanager
def make_dev(settings: dict[str, str] | None = None) -> Iterator[Dev]:
    """`make dev` (localrun.dev), as tests/localrun/test_localrun.py starts it, with these settings
    in its shell; without the stream's batching window, which is not what these tests are
    about (the README's walkthrough runs make dev with the template's)."""
    http_port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "localrun.dev", "--http-port", str(http_port)]
        + ["--port", str(free_port()), "--batch-window", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # This checkout's code, not whichever the virtualenv's editable install points at.
        env={**clean_environment(), "PYTHONPATH": code_path(), **(settings or {})},
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].startswith("Ready:"):
            line = process.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        running = Dev(f"http://127.0.0.1:{http_port}")
        # Keep reading its output so that it never blocks on a full pipe.
        threading.Thread(
            target=lambda: running.output.extend(iter(process.stdout.readline, "")),  # type: ignore[union-attr]
            daemon=True,
        ).start()
        yield running
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def start_relay(fake: FakeGateway, ingest_url: str, state: Path) -> subprocess.Popen[str]:
    environment = {
        **clean_environment(),
        "PYTHONPATH": code_path(),
        "INGEST_URL": ingest_url,
        "DISCORD_BOT_TOKEN": "fake.bot.token",
        "DISCORD_API_BASE": fake.api_base,
        "DISCORD_GATEWAY_URL": fake.gateway_url,
        "RELAY_SPOOL_DIR": str(state),
        "RELAY_BATCH_MAX_SECONDS": "0.2",
        "RELAY_HEALTH_SECONDS": "0.5",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "relay"],
        cwd=ROOT / "relay",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
    )


def dev_talk(now_ms: int) -> list[dict[str, Any]]:
    """Twenty messages in #dev (one consolidation's worth, ConsolidateEvery's default),
    Alice's last one about the login bug (short-term entries show a person's latest)."""
    lines = [f"status update {i}" for i in range(19)]
    lines += ["The login bug is in the token refresh, I'm rewriting auth.py"]
    return [
        complete(gw.message(gw.ALICE if i % 2 else gw.BOB, text, now_ms + i * 10, channel=ge.DEV))
        for i, text in enumerate(lines)
    ]


def test_the_relay_process_carries_visibility_from_the_gateway_into_recall(
    tmp_path: Path,
) -> None:
    with make_dev() as dev:
        visibility_reaches_recall(dev, tmp_path)


def visibility_reaches_recall(dev: Dev, tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    # Only the guild first: the channels' visibility must be known before anyone speaks.
    fake = FakeGateway(script="events", events=[ge.guild()])
    with GatewayThread(fake) as gateway:
        relay = start_relay(fake, f"{dev.url}/ingest", tmp_path / "relay-state")
        try:
            wait_for(fake.done.is_set, 30, "the relay's session")
            gateway.send(dev_talk(now_ms))

            def crossed() -> bool:
                status, answer = post(
                    f"{dev.url}/recall",
                    {
                        "guild_id": gw.GUILD,
                        "channel_id": ge.GENERAL,
                        "user_id": gw.ALICE,
                        "participants": [gw.ALICE],
                    },
                )
                assert status == 200, answer
                return "token refresh" in answer.get("memory", "")

            wait_or_explain(crossed, "the #dev message in #general's recall", relay, dev)
            _, answer = post(
                f"{dev.url}/recall",
                {
                    "guild_id": gw.GUILD,
                    "channel_id": ge.GENERAL,
                    "user_id": gw.ALICE,
                    "participants": [gw.ALICE],
                },
            )
            section = next(
                s for s in answer["memory"].split("\n\n") if s.startswith(ELSEWHERE_HEADING)
            )
            assert "token refresh" in section and f"<#{ge.DEV}>" in section
        finally:
            relay.send_signal(signal.SIGTERM)
            output, _ = relay.communicate(timeout=30)
    assert relay.returncode == 0, output[-3000:]
    health = [line for line in output.splitlines() if "health: in=" in line]
    # READY, the guild and the twenty messages were forwarded; nothing was ignored.
    assert "in=22 forwarded=22" in health[-1] and "ignored=0 " in health[-1], output[-3000:]


def signed(interaction: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """An interaction as Discord signs it, with the test key make dev checks against."""
    body = json.dumps(interaction)
    timestamp = str(int(time.time()))
    signature = SigningKey(TEST_SEED).sign((timestamp + body).encode()).signature.hex()
    return body.encode(), {
        "content-type": "application/json",
        "x-signature-ed25519": signature,
        "x-signature-timestamp": timestamp,
    }


def persona_set(persona_id: str, name: str, prompt: str) -> dict[str, Any]:
    """`/memory-staff persona set` from the server's owner, for the whole server."""
    interaction = command("1710000000000000001", "memory-staff", "", None, STAFF, gw.CAROL)
    values = [
        {"name": k, "type": OptionType.STRING, "value": v}
        for k, v in {"id": persona_id, "name": name, "prompt": prompt}.items()
    ]
    interaction["data"]["options"] = [
        {
            "name": "persona",
            "type": OptionType.SUB_COMMAND_GROUP,
            "options": [{"name": "set", "type": OptionType.SUB_COMMAND, "options": values}],
        }
    ]
    interaction.update(channel_id=ge.GENERAL, guild_id=gw.GUILD, token="token-persona")
    return interaction


def test_a_member_made_staff_by_a_role_update_teaches_a_persona_alone(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    guild = ge.guild()
    guild["d"]["roles"][1]["permissions"] = str(ge.VIEW)  # the moderators are not staff yet
    # Alice alone says it, twice, as a moderator; the role gains Manage Server first.
    lines = ["Homework is due Friday.", "Every Friday, before noon."]
    lines += [f"ok {i}" for i in range(18)]
    talk = []
    for i, text in enumerate(lines):
        message = gw.message(gw.ALICE, text, now_ms + i * 10, channel=ge.GENERAL)
        message["d"]["member"]["roles"] = [ge.MODS]
        talk.append(complete(message))
    with serving(FakeModel()) as model:
        settings = {"MEMORY_MODEL": "openai:fake", "MEMORY_MODEL_BASE_URL": model.base_url}
        with make_dev(settings) as dev:
            body, headers = signed(persona_set("tutor", "Tutor", "You are Tutor.\n\n{memory}"))
            request = urllib.request.Request(f"{dev.url}/interactions", body, headers)
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200
                assert "Tutor" in response.read().decode()

            fake = FakeGateway(script="events", events=[guild])
            with GatewayThread(fake) as gateway:
                relay = start_relay(fake, f"{dev.url}/ingest", tmp_path / "relay-state")
                try:
                    wait_for(fake.done.is_set, 30, "the relay's session")
                    gateway.send([ge.role_event("GUILD_ROLE_UPDATE", ge.MODS, ge.MANAGE_GUILD)])
                    time.sleep(1.0)  # the role change lands before the words it qualifies
                    gateway.send(talk)

                    def taught() -> bool:
                        status, answer = post(
                            f"{dev.url}/recall",
                            {
                                "guild_id": gw.GUILD,
                                "channel_id": ge.GENERAL,
                                "user_id": gw.ALICE,
                                "persona_id": "tutor",
                            },
                        )
                        assert status == 200, answer
                        return KNOWLEDGE in answer.get("memory", "")

                    wait_or_explain(taught, "the persona's knowledge in recall", relay, dev)
                    assert model.calls >= 1
                finally:
                    if relay.poll() is None:
                        relay.send_signal(signal.SIGTERM)
                        relay.communicate(timeout=30)
