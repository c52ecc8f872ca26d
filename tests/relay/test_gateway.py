"""The discord.py client against a fake gateway on 127.0.0.1, and the IDENTIFY guards.

discord.py 2.x connects a non-sharded client straight to `DiscordWebSocket.DEFAULT_GATEWAY`
(it asks REST for /gateway/bot only when sharding automatically) and sends REST requests to
`Route.BASE`; both are class attributes, pointed here at the fake for the test's duration.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import discord
import pytest
import yarl
from discord.gateway import DiscordWebSocket, KeepAliveHandler
from discord.http import Route

from localrun import gateway as gw
from relay.backoff import Backoff
from relay.config import Shard
from relay.forwarder import Forwarder
from relay.gateway import GatewayRunner, RelayClient, relay_intents
from relay.identify import IdentifyLedger
from tests.relay.fake_discord import FakeGateway
from tests.relay.helpers import Clock, RecordingSink, make_forwarder

TOKEN = "fake.bot.token"
# guilds, guild messages and reactions, direct messages and reactions, message content.
EXPECTED_INTENTS = (1 << 0) | (1 << 9) | (1 << 10) | (1 << 12) | (1 << 13) | (1 << 15)


@pytest.fixture(autouse=True)
def no_heartbeat_thread_outlives_its_test() -> Iterator[None]:
    yield
    leftovers = [t for t in threading.enumerate() if isinstance(t, KeepAliveHandler)]
    for thread in leftovers:
        thread.join(timeout=2)
    assert not [t for t in leftovers if t.is_alive()], "a gateway heartbeat thread was left running"


class Session:
    def __init__(
        self,
        tmp_path: Path,
        fake: FakeGateway,
        identify_bound: int = 10,
        shard: Shard | None = None,
    ) -> None:
        self.fake = fake
        self.shard = shard
        self.sink = RecordingSink()
        self.forwarder: Forwarder = make_forwarder(self.sink, tmp_path / "spool", Clock())
        self.ledger = IdentifyLedger(tmp_path / "identify.json", identify_bound)
        self.clients: list[RelayClient] = []
        self.stop = asyncio.Event()

    def client(self) -> RelayClient:
        client = RelayClient(self.forwarder, self.ledger, shard=self.shard, identify_spacing=0)
        self.clients.append(client)
        return client

    def runner(self) -> GatewayRunner:
        return GatewayRunner(TOKEN, self.client, self.ledger, backoff=Backoff(0.01, 0.05))


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        await asyncio.sleep(0.01)


def run_against_fake(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeGateway,
    scenario: Callable[[], Awaitable[Any]],
) -> Any:
    async def main() -> Any:
        await fake.start()
        monkeypatch.setattr(Route, "BASE", fake.api_base)
        monkeypatch.setattr(DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(fake.gateway_url))
        try:
            return await asyncio.wait_for(scenario(), timeout=15)
        finally:
            await fake.stop()

    return asyncio.run(main())


def test_a_session_identifies_once_resumes_on_reconnect_and_forwards_raw_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeGateway(script="reconnect")
    session = Session(tmp_path, fake)

    async def scenario() -> int:
        task = asyncio.create_task(session.runner().run(session.stop))
        await asyncio.wait_for(fake.done.wait(), 10)
        await until(lambda: session.forwarder.stats.received == 5)  # READY and 4 messages
        session.stop.set()
        return await task

    assert run_against_fake(monkeypatch, fake, scenario) == 0

    # REST: the token as a bot token, and Discord's session_start_limit read before IDENTIFY.
    assert ("/api/v10/users/@me", f"Bot {TOKEN}") in fake.rest
    assert ("/api/v10/gateway/bot", f"Bot {TOKEN}") in fake.rest
    # One IDENTIFY, with the relay's intents; the reconnect request was answered by RESUME.
    (identify,) = fake.ops(2)
    assert identify[0] == "/#1"
    assert identify[1]["d"]["token"] == TOKEN
    assert identify[1]["d"]["intents"] == EXPECTED_INTENTS == relay_intents().value
    (resume,) = fake.ops(6)
    assert resume[0] == "/resume#2"
    assert resume[1]["d"] == {"token": TOKEN, "session_id": "session-1", "seq": 4}
    assert fake.connections == ["/#1", "/resume#2"]
    # Heartbeats were sent on both connections and acknowledged.
    assert {conn for conn, _ in fake.ops(1)} == {"/#1", "/resume#2"}
    assert fake.acks >= 2
    assert session.clients[0].resumes == 1
    assert session.ledger.count() == 1

    # Forwarded: the message dispatches, raw and in order, the bot's own message included.
    session.forwarder.pump(final=True)
    # READY trimmed to its guilds' ids (ingest compares them with the servers it knows).
    ready = {"t": "READY", "d": {"guilds": []}}
    assert session.sink.events == [ready] + [{"t": e["t"], "d": e["d"]} for e in fake.forwardable]
    assert session.sink.events[3]["d"]["author"]["id"] == gw.BOT
    stats = session.forwarder.stats
    assert stats.ignored == 2  # TYPING_START, RESUMED
    assert set(session.forwarder.ignored_types) == {"TYPING_START", "RESUMED"}


def test_an_invalidated_session_identifies_again_and_the_ledger_counts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeGateway(script="invalidate")
    session = Session(tmp_path, fake)

    async def scenario() -> int:
        task = asyncio.create_task(session.runner().run(session.stop))
        await asyncio.wait_for(fake.done.wait(), 10)
        await until(lambda: session.forwarder.stats.received == 6)  # 2 READYs, 4 messages
        session.stop.set()
        return await task

    assert run_against_fake(monkeypatch, fake, scenario) == 0
    assert len(fake.ops(2)) == 2
    assert fake.ops(6) == []
    assert session.ledger.count() == 2
    # The ledger is on disk: a restarted relay knows about both.
    assert IdentifyLedger(tmp_path / "identify.json", 10).count() == 2


def test_a_second_identify_beyond_the_bound_is_deferred_not_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeGateway(script="invalidate")
    session = Session(tmp_path, fake, identify_bound=1)

    async def scenario() -> int:
        task = asyncio.create_task(session.runner().run(session.stop))
        await until(lambda: any("deferred" in r.getMessage() for r in caplog.records))
        session.stop.set()
        return await task

    with caplog.at_level(logging.ERROR):
        assert run_against_fake(monkeypatch, fake, scenario) == 0
    assert len(fake.ops(2)) == 1
    assert session.ledger.count() == 1
    assert "1 IDENTIFYs in the last 24 h; next IDENTIFY in" in caplog.text


def test_a_full_ledger_keeps_the_relay_from_connecting_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeGateway()
    session = Session(tmp_path, fake, identify_bound=2)
    session.ledger.record()
    session.ledger.record()

    async def scenario() -> int:
        task = asyncio.create_task(session.runner().run(session.stop))
        await asyncio.sleep(0.3)
        session.stop.set()
        return await task

    with caplog.at_level(logging.ERROR):
        assert run_against_fake(monkeypatch, fake, scenario) == 0
    assert fake.connections == [] and fake.rest == []
    assert "2 IDENTIFYs in the last 24 h, the configured bound" in caplog.text


def test_low_session_starts_at_discord_defer_the_identify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeGateway(session_starts_remaining=40)
    session = Session(tmp_path, fake)

    async def scenario() -> int:
        task = asyncio.create_task(session.runner().run(session.stop))
        await until(lambda: any("deferred" in r.getMessage() for r in caplog.records))
        session.stop.set()
        return await task

    with caplog.at_level(logging.ERROR):
        assert run_against_fake(monkeypatch, fake, scenario) == 0
    assert fake.connections == []  # checked after login, before the websocket opens
    assert ("/api/v10/gateway/bot", f"Bot {TOKEN}") in fake.rest
    assert session.ledger.count() == 0
    assert "Discord reports 40 session starts left today" in caplog.text


class FailingClient:
    """Stands in for RelayClient: `start` fails the way the test says."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def start(self, token: str) -> None:
        raise self.error

    async def close(self) -> None:
        pass


def test_restarts_back_off_and_fatal_errors_stop_the_relay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    errors: list[BaseException] = [
        OSError("network down"),
        OSError("network down"),
        OSError("network down"),
        discord.LoginFailure("Improper token has been passed."),
    ]
    ledger = IdentifyLedger(tmp_path / "identify.json", 10)
    runner = GatewayRunner(
        TOKEN,
        lambda: FailingClient(errors.pop(0)),  # type: ignore[arg-type, return-value]
        ledger,
        backoff=Backoff(base=0.01, cap=0.04, random=lambda: 0.0),
    )
    with caplog.at_level(logging.WARNING):
        assert asyncio.run(runner.run(asyncio.Event())) == 2
    assert runner.waits == [0.005, 0.01, 0.02]  # doubling; none after the fatal error
    assert "restart 3 in 0.0s" in caplog.text
    assert "gateway refused the relay, not retrying: LoginFailure" in caplog.text


def run_until_the_fake_is_done(
    monkeypatch: pytest.MonkeyPatch, fake: FakeGateway, session: Session
) -> int:
    """Run the session until the fake gateway's script ends, then stop it; its exit code."""

    async def scenario() -> int:
        task = asyncio.create_task(session.runner().run(session.stop))
        await asyncio.wait_for(fake.done.wait(), 10)
        session.stop.set()
        return await task

    return run_against_fake(monkeypatch, fake, scenario)


def test_a_sharded_relay_identifies_as_its_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeGateway(script="reconnect")
    session = Session(tmp_path, fake, shard=Shard(1, 2))

    assert run_until_the_fake_is_done(monkeypatch, fake, session) == 0
    (identify,) = fake.ops(2)
    assert identify[1]["d"]["shard"] == [1, 2]
    # RESUME carries no shard: the session already is one.
    (resume,) = fake.ops(6)
    assert "shard" not in resume[1]["d"]


def test_an_unsharded_relay_sends_no_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGateway(script="reconnect")
    session = Session(tmp_path, fake)

    assert run_until_the_fake_is_done(monkeypatch, fake, session) == 0
    (identify,) = fake.ops(2)
    assert "shard" not in identify[1]["d"]


def test_sharding_required_stops_the_relay_with_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeGateway(script="sharding_required")
    session = Session(tmp_path, fake)

    with caplog.at_level(logging.WARNING, logger="relay"):
        assert run_against_fake(monkeypatch, fake, lambda: session.runner().run(session.stop)) == 2
    assert len(fake.ops(2)) == 1  # one IDENTIFY, no retry
    (refused,) = [r for r in caplog.records if r.name == "relay.gateway"]
    assert refused.levelno == logging.ERROR
    message = refused.getMessage()
    assert "\n" not in message
    assert message.startswith("gateway refused the relay, not retrying: close code 4011, ")
    assert "sharding required" in message and "2,500 guilds" in message
    assert "run more shards" in message


def test_the_first_identify_of_a_higher_shard_waits_for_the_lower_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = IdentifyLedger(tmp_path / "identify.json", 10)
    started: list[float] = []

    def factory() -> FailingClient:
        started.append(time.monotonic())
        return FailingClient(discord.LoginFailure("stop here"))

    runner = GatewayRunner(TOKEN, factory, ledger, first_delay=0.2)  # type: ignore[arg-type]
    begun = time.monotonic()
    with caplog.at_level(logging.INFO, logger="relay"):
        assert asyncio.run(runner.run(asyncio.Event())) == 2
    assert started[0] - begun >= 0.2
    assert "first IDENTIFY in 0s, after the lower shards'" in caplog.text

    stop = asyncio.Event()
    stop.set()  # a SIGTERM during the wait ends it at once
    assert asyncio.run(GatewayRunner(TOKEN, factory, ledger, first_delay=60).run(stop)) == 0  # type: ignore[arg-type]
    assert len(started) == 1
