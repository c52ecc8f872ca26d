"""The fleet mode's wiring (RELAY_TABLE_NAME set): ask Discord for the shard count and the
session starts, align the table's counters with them, and run this task's fleet until
SIGTERM or SIGINT, which hands its shards over (relay.fleet)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import uuid
from typing import Any

import aiohttp

from relay.backoff import Backoff
from relay.config import RelayConfig
from relay.fleet import Fleet, FleetSettings
from relay.forwarder import Forwarder
from relay.health import ALIVE_FILE
from relay.identify_gate import IdentifyGate, in_thread
from relay.logs import REFUSED_EVENT, fields
from relay.protocol import FATAL_ADVICE, GATEWAY_VERSION, CloseCode
from relay.shard_client import ShardSettings
from relay.shards import GatewayInfo, GatewayInfoError, shard_count
from relay.store import Store
from relay.websocket import AiohttpConnector

log = logging.getLogger("relay")

DISCORD_API = f"https://discord.com/api/v{GATEWAY_VERSION}"


async def gateway_info(api_base: str, token: str, stop: asyncio.Event) -> GatewayInfo | None:
    """`GET /gateway/bot`, retried with backoff until it answers (None if stopped first)."""
    backoff = Backoff(base=1.0, cap=60.0)
    attempt = 0
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            try:
                async with session.get(
                    f"{api_base.rstrip('/')}/gateway/bot",
                    headers={"Authorization": f"Bot {token}"},
                    timeout=aiohttp.ClientTimeout(total=30),
                ) as answer:
                    if answer.status == 401:
                        raise GatewayInfoError(FATAL_ADVICE[CloseCode.AUTHENTICATION_FAILED])
                    answer.raise_for_status()
                    return GatewayInfo.parse(await answer.json())
            except (aiohttp.ClientError, TimeoutError, ValueError) as error:
                if isinstance(error, GatewayInfoError) and "authentication" in str(error):
                    raise
                wait = backoff.delay(attempt)
                attempt += 1
                log.warning("GET /gateway/bot failed (%r); again in %.0fs", error, wait)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
    return None


def dynamodb_client() -> Any:
    import boto3

    return boto3.client("dynamodb")


def run_fleet(config: RelayConfig, forwarder: Forwarder, token: str, client: Any = None) -> int:
    assert config.table_name is not None  # nosec B101 # only called in the fleet mode; narrows the type
    store = Store(client or dynamodb_client(), config.table_name)
    owner = f"task-{uuid.uuid4()}"

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            info = await gateway_info(config.discord_api_base or DISCORD_API, token, stop)
        except GatewayInfoError as error:
            log.error(
                "gateway refused the relay, not retrying: %s",
                error,
                extra=fields(REFUSED_EVENT, {"close_code": None}),
            )
            return 2
        if info is None:
            return 0
        count = shard_count(info.shards, info.max_concurrency, config.shard_count)
        if config.shard_count is not None:
            await asyncio.to_thread(store.set_shard_count, count)
        else:
            count = await asyncio.to_thread(store.pin_shard_count, count)
        await asyncio.to_thread(
            store.align_identifies, info.total - info.remaining, info.reset_after_seconds
        )
        log.info(
            "fleet: %d shards over %d tasks, max_concurrency %d; %d session starts left today",
            count,
            config.task_count,
            info.max_concurrency,
            info.remaining,
        )
        connector = AiohttpConnector()
        fleet = Fleet(
            FleetSettings(
                count,
                config.task_count,
                lease_seconds=config.lease_seconds,
                save_seconds=config.save_seconds,
                poll_seconds=config.poll_seconds,
            ),
            ShardSettings(
                token,
                config.discord_gateway_url or info.url,
                owner,
                members=config.guild_members_intent,
            ),
            store=store,
            gate=IdentifyGate(store, info.max_concurrency, config.identify_max_per_day),
            connect=connector.connect,
            forwarder=forwarder,
            # Logged by the client as a relay_gap line, and kept in the table.
            on_gap=lambda shard, start, end, guilds: store.record_gap(
                shard, count, start, end, guilds
            ),
            offload=in_thread,
            drain=lambda: forwarder.close(config.shutdown_seconds),
            alive_file=config.spool_dir / ALIVE_FILE,
        )
        try:
            code = await fleet.run(stop)
        finally:
            await connector.close()
        if code == 2 and fleet.fatal_code is not None:
            advice = FATAL_ADVICE.get(CloseCode(fleet.fatal_code), "")
            log.error(
                "gateway refused the relay, not retrying: close code %d, %s",
                fleet.fatal_code,
                advice,
                extra=fields(REFUSED_EVENT, {"close_code": fleet.fatal_code}),
            )
        return code

    forwarder.start()
    try:
        return asyncio.run(main())
    finally:
        forwarder.close(config.shutdown_seconds)
