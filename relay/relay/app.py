"""Wiring: settings to sink, spool and forwarder; the gateway mode and the replay mode."""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import IO, Any

from relay.backoff import Backoff
from relay.batch import BatchLimits
from relay.config import RelayConfig
from relay.forwarder import Forwarder
from relay.logs import formatter
from relay.sinks import HttpSink, LambdaSink, Sink, lambda_client
from relay.spool import Spool

log = logging.getLogger("relay")

LEDGER_FILE = "identify.json"
SPOOL_SUBDIR = "batches"
LOCK_FILE = "relay.lock"


def lock_state_dir(directory: Path, poll_seconds: float = 1.0) -> IO[str]:
    """Hold the spool directory alone: two relays on one spool would overwrite each other.

    A second relay (an overlapping deploy) waits here until the first has flushed and
    exited. The lock goes with the process, however it ends.
    """
    directory.mkdir(parents=True, exist_ok=True)
    handle = open(directory / LOCK_FILE, "a")  # noqa: SIM115 - held for the process's life
    announced = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if not announced:
                log.warning("another relay is using %s; waiting for it to exit", directory)
                announced = True
            time.sleep(poll_seconds)


def configure_logging(config: RelayConfig) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(log_formatter(config))
    level = config.log_level
    logging.basicConfig(level=level, handlers=[handler])
    numeric = logging.getLevelName(level)
    # discord.py at DEBUG logs every frame, message text included: never below INFO.
    logging.getLogger("discord").setLevel(max(logging.INFO, numeric))
    # httpx logs every request at INFO: one line per batch is noise beside the health line.
    logging.getLogger("httpx").setLevel(numeric if numeric <= logging.DEBUG else logging.WARNING)


def log_formatter(config: RelayConfig) -> logging.Formatter:
    """RELAY_LOG_FORMAT's formatter; in JSON every line names the shard, if there is one."""
    shard = config.shard
    static = {} if shard is None else {"shard": shard.id, "shard_count": shard.count}
    return formatter(config.log_format, static)


def build_sink(config: RelayConfig) -> Sink:
    if config.ingest_url:
        return HttpSink(config.ingest_url, config.http_timeout_seconds)
    assert config.ingest_function_name is not None  # nosec B101 # RelayConfig validates that one sink is named; narrows the type for mypy
    client = lambda_client(timeout_seconds=config.http_timeout_seconds)
    return LambdaSink(client, config.ingest_function_name)


def build_forwarder(config: RelayConfig, sink: Sink | None = None) -> Forwarder:
    return Forwarder(
        sink or build_sink(config),
        Spool(config.state_dir / SPOOL_SUBDIR, config.spool_max_bytes),
        BatchLimits(
            max_events=config.batch_max_events,
            max_bytes=config.batch_max_bytes,
            max_seconds=config.batch_max_seconds,
        ),
        attempts=config.send_attempts,
        backoff=Backoff(base=config.retry_base_seconds, cap=config.retry_max_seconds),
        health_seconds=config.health_seconds,
    )


def run_gateway(config: RelayConfig, forwarder: Forwarder, token: str) -> int:
    if config.fleet:
        # Shard ranges over tasks, RESUME across processes (relay.fleet).
        from relay.runner import run_fleet

        return run_fleet(config, forwarder, token)
    return run_single(config, forwarder, token)


def run_single(config: RelayConfig, forwarder: Forwarder, token: str) -> int:
    """Without a table (`make dev`, a one-off run): discord.py's client, one shard, a
    per-process IDENTIFY ledger; no RESUME across restarts."""
    # Imported here so the replay mode and the tests of the core never load discord.py.
    from relay.gateway import (
        IDENTIFY_SPACING_SECONDS,
        GatewayRunner,
        RelayClient,
        use_discord_endpoints,
    )
    from relay.identify import IdentifyLedger

    use_discord_endpoints(config.discord_api_base, config.discord_gateway_url)

    ledger = IdentifyLedger(config.state_dir / LEDGER_FILE, config.identify_max_per_day)
    shard = config.shard

    async def session() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        runner = GatewayRunner(
            token,
            lambda: RelayClient(
                forwarder, ledger, shard=shard, members=config.guild_members_intent
            ),
            ledger,
            first_delay=0.0 if shard is None else shard.id * IDENTIFY_SPACING_SECONDS,
        )
        return await runner.run(stop)

    forwarder.start()
    try:
        code = asyncio.run(session())
    finally:
        log.info("shutting down: flushing")
        forwarder.close(config.shutdown_seconds)
    return code


class _Shutdown(Exception):
    pass


def _raise_shutdown(signum: int, frame: FrameType | None) -> None:
    raise _Shutdown(signal.Signals(signum).name)


def run_replay(config: RelayConfig, forwarder: Forwarder, source: str) -> int:
    """Forward events read as JSON lines, without Discord: for development and tests.

    Each line is one event `{"t": ..., "d": {...}}` or a batch `{"events": [...]}`.
    SIGTERM or SIGINT flushes and exits, like the gateway mode.
    """
    signal.signal(signal.SIGTERM, _raise_shutdown)
    signal.signal(signal.SIGINT, _raise_shutdown)
    forwarder.start()
    try:
        if source == "-":
            _replay_lines(sys.stdin, forwarder)
        else:
            with open(source, encoding="utf-8") as handle:
                _replay_lines(handle, forwarder)
        log.info("replay: end of input; flushing")
    except _Shutdown as why:
        log.info("%s: flushing", why)
    finally:
        forwarder.close(config.shutdown_seconds)
    return 0


def _replay_lines(lines: Iterable[str], forwarder: Forwarder) -> None:
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value: Any = json.loads(line)
        except ValueError:
            log.warning("replay: line %d is not JSON; skipped", number)
            continue
        events = value.get("events") if isinstance(value, dict) and "events" in value else [value]
        for event in events if isinstance(events, list) else []:
            if isinstance(event, dict) and isinstance(event.get("t"), str):
                forwarder.submit(event["t"], event.get("d"))
            else:
                log.warning("replay: line %d holds something that is not an event", number)
