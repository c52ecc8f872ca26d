"""The discord.py client that holds the gateway session and feeds the forwarder.

Raw frames: with `enable_debug_events=True` discord.py dispatches `on_socket_raw_receive`
with every decompressed gateway frame as text, before its own parsing. The relay forwards
the `d` of the message dispatch types exactly as Discord sent it, not a re-serialised
model, and the guild, channel, role and thread events trimmed (relay.events). Handlers
are scheduled as tasks in arrival order and this one never awaits, so events reach the
forwarder in gateway order.

Sessions: the library RESUMEs by itself (op 7 RECONNECT, dropped connections, missed
heartbeat ACKs, INVALID_SESSION with d=true) using the READY's session_id, the last
sequence and resume_gateway_url; it IDENTIFYs only at start and after a session Discord
declared invalid. Every IDENTIFY passes `before_identify_hook`, where the ledger and
Discord's own session_start_limit decide whether it may happen at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable

import discord
import yarl
from discord.gateway import DiscordWebSocket, KeepAliveHandler
from discord.http import Route

from relay.backoff import Backoff
from relay.config import Shard
from relay.forwarder import Forwarder
from relay.identify import IdentifyLedger
from relay.logs import REFUSED_EVENT, fields
from relay.protocol import FATAL_ADVICE, FATAL_CLOSE_CODES, LOGIN_REFUSED, CloseCode

log = logging.getLogger(__name__)


# Keep this many of Discord's daily session starts untouched (shared with any other
# process using the same token, such as the bot itself).
SESSION_START_RESERVE = 100
# Discord takes one IDENTIFY per 5 seconds per bucket (max_concurrency 1 for all but the
# largest bots): between IDENTIFYs of one client, and between shards starting together.
IDENTIFY_SPACING_SECONDS = 5.0


def use_discord_endpoints(api_base: str | None, gateway_url: str | None) -> None:
    """Point discord.py at other endpoints than Discord's (DISCORD_API_BASE,
    DISCORD_GATEWAY_URL): an unsharded client connects straight to the class attribute
    `DiscordWebSocket.DEFAULT_GATEWAY` and sends REST to `Route.BASE`."""
    if api_base:
        Route.BASE = api_base.rstrip("/")
    if gateway_url:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)


def relay_intents(members: bool = False) -> discord.Intents:
    intents = discord.Intents.none()
    # Privileged (RELAY_GUILD_MEMBERS_INTENT): members leaving, GUILD_MEMBER_REMOVE.
    intents.members = members
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.guild_reactions = True
    intents.dm_reactions = True
    intents.message_content = True  # privileged: enable it for the bot in the Developer Portal
    return intents


class IdentifyDeferred(Exception):
    """A new session may not start now; the runner waits `seconds` and tries again."""

    def __init__(self, seconds: float, reason: str) -> None:
        super().__init__(f"{reason}; next IDENTIFY in {seconds:.0f}s")
        self.seconds = seconds


class RelayClient(discord.Client):
    def __init__(
        self,
        forwarder: Forwarder,
        ledger: IdentifyLedger,
        *,
        shard: Shard | None = None,
        members: bool = False,
        identify_spacing: float = IDENTIFY_SPACING_SECONDS,
        session_reserve: int = SESSION_START_RESERVE,
    ) -> None:
        # One shard per process: discord.py's plain Client sends [shard_id, shard_count] in
        # IDENTIFY and otherwise behaves as unsharded (AutoShardedClient would run every
        # shard in one process, behind one spool and one ledger).
        super().__init__(
            intents=relay_intents(members),
            enable_debug_events=True,
            # The relay reads raw frames: no message cache, no member cache, no chunking.
            max_messages=None,
            member_cache_flags=discord.MemberCacheFlags.none(),
            chunk_guilds_at_startup=False,
            shard_id=None if shard is None else shard.id,
            shard_count=None if shard is None else shard.count,
        )
        self._forwarder = forwarder
        self._ledger = ledger
        self._identify_spacing = identify_spacing
        self._session_reserve = session_reserve
        self.resumes = 0

    async def on_socket_raw_receive(self, frame: str) -> None:
        # Every frame is parsed, and the dispatch's name decides, never a substring of the
        # text: a message frame costs one parse, as before; the few others (guild,
        # channel, role and thread events, READY, heartbeat ACKs) cost one parse each.
        try:
            message = json.loads(frame)
        except ValueError:
            return
        if isinstance(message, dict) and message.get("op") == 0:
            name = message.get("t")
            if isinstance(name, str):
                # Forwarded or counted as ignored, by name (Forwarder.submit).
                self._forwarder.submit(name, message.get("d"))

    async def on_ready(self) -> None:
        log.info("gateway session ready as %s (%s)", self.user, getattr(self.user, "id", "?"))

    async def on_resumed(self) -> None:
        self.resumes += 1
        log.info("gateway session resumed")

    async def setup_hook(self) -> None:
        # Runs after login, before the websocket opens: a start that may not IDENTIFY
        # stops here, without a half-open connection to clean up.
        await self._check_identify_budget()

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        if not initial:
            # A new session inside a running client (Discord invalidated the old one).
            await self._check_identify_budget()
            if self._identify_spacing:
                await asyncio.sleep(self._identify_spacing)  # the library's own spacing, kept
        self._ledger.record()
        log.info("IDENTIFY: starting a new session (%d in the last 24 h)", self._ledger.count())

    async def _check_identify_budget(self) -> None:
        wait = self._ledger.wait_seconds()
        if wait > 0:
            raise IdentifyDeferred(wait, f"{self._ledger.count()} IDENTIFYs in the last 24 h")
        remaining = await self._session_starts_remaining()
        if remaining is not None and remaining[0] <= self._session_reserve:
            raise IdentifyDeferred(
                max(remaining[1], 60.0),
                f"Discord reports {remaining[0]} session starts left today",
            )

    async def _session_starts_remaining(self) -> tuple[int, float] | None:
        """Discord's session_start_limit: (remaining, seconds until reset), or None if unknown."""
        try:
            data = await self.http.request(Route("GET", "/gateway/bot"))
            limit = data["session_start_limit"]
            return int(limit["remaining"]), float(limit["reset_after"]) / 1000
        except Exception as error:  # the local ledger still guards; never block on this
            log.warning("could not read session_start_limit: %r", error)
            return None


def fatal_close_code(error: BaseException) -> CloseCode | None:
    """The close code of a session Discord ended for good, or None."""
    if isinstance(error, discord.PrivilegedIntentsRequired):
        return CloseCode.DISALLOWED_INTENTS
    if isinstance(error, discord.ConnectionClosed) and error.code in FATAL_CLOSE_CODES:
        return CloseCode(error.code)
    return None


def is_fatal(error: BaseException) -> bool:
    return isinstance(error, discord.LoginFailure) or fatal_close_code(error) is not None


def refusal(error: BaseException) -> str:
    """One line for a fatal error: the close code or the error, and what to do about it."""
    code = fatal_close_code(error)
    if code is None:
        return f"{error!r}: {LOGIN_REFUSED}"
    shard = getattr(error, "shard_id", None)
    where = "" if shard is None else f" (shard {shard})"
    return f"close code {int(code)}{where}, {FATAL_ADVICE[code]}"


class GatewayRunner:
    """Keeps one client running; restarts it after failures with growing, jittered waits.

    The library already reconnects and resumes inside a session; a restart here (a new
    client, a new IDENTIFY) happens only when it gives up, and each restart waits longer.
    """

    def __init__(
        self,
        token: str,
        client_factory: Callable[[], RelayClient],
        ledger: IdentifyLedger,
        *,
        backoff: Backoff | None = None,
        stable_seconds: float = 600.0,
        first_delay: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._token = token
        self._first_delay = first_delay
        self._factory = client_factory
        self._ledger = ledger
        self._backoff = backoff or Backoff(base=5.0, cap=900.0)
        self._stable_seconds = stable_seconds
        self._clock = clock
        self.waits: list[float] = []  # every wait decided, for the log and the tests

    async def run(self, stop: asyncio.Event) -> int:
        """Until `stop` is set: 0. A fatal error (bad token, intents not allowed): 2."""
        failures = 0
        if await self._wait_for_lower_shards(stop):
            return 0
        while not stop.is_set():
            wait = self._ledger.wait_seconds()
            if wait > 0:
                log.error(
                    "%d IDENTIFYs in the last 24 h, the configured bound; waiting %.0fs",
                    self._ledger.count(),
                    wait,
                )
                if await _sleep_or_stop(stop, wait):
                    return 0
                continue
            started = self._clock()
            error = await self._one_client(stop)
            if stop.is_set():
                return 0
            if error is not None and is_fatal(error):
                code = fatal_close_code(error)
                log.error(
                    "gateway refused the relay, not retrying: %s",
                    refusal(error),
                    extra=fields(
                        REFUSED_EVENT, {"close_code": None if code is None else int(code)}
                    ),
                )
                return 2
            if isinstance(error, IdentifyDeferred):
                log.error("new session deferred: %s", error)
                wait = error.seconds
            else:
                if self._clock() - started >= self._stable_seconds:
                    failures = 0
                failures += 1
                wait = self._backoff.delay(failures - 1)
                log.warning(
                    "gateway client stopped (%r); restart %d in %.1fs", error, failures, wait
                )
            self.waits.append(wait)
            if await _sleep_or_stop(stop, wait):
                return 0
        return 0

    async def _wait_for_lower_shards(self, stop: asyncio.Event) -> bool:
        """Shards started together (one deploy) IDENTIFY one after another; True if stopped."""
        if self._first_delay <= 0:
            return False
        log.info("first IDENTIFY in %.0fs, after the lower shards'", self._first_delay)
        return await _sleep_or_stop(stop, self._first_delay)

    async def _one_client(self, stop: asyncio.Event) -> BaseException | None:
        client = self._factory()
        session = asyncio.create_task(client.start(self._token))
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({session, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            await client.close()
            if not session.done():
                session.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await session
            _stop_orphan_heartbeats(client)
        if session.cancelled():
            return None
        return session.exception()


def _stop_orphan_heartbeats(client: discord.Client) -> None:
    """Stop heartbeat threads left by a connection the client never got to keep.

    A deferred IDENTIFY aborts a connection between HELLO and IDENTIFY; discord.py had
    already started that connection's heartbeat thread and holds no reference to close
    it. The thread would stop at its next beat anyway (the socket is gone); stopping it
    now keeps it from waking after the event loop has closed.
    """
    state = getattr(client, "_connection", None)
    for thread in threading.enumerate():
        if (
            isinstance(thread, KeepAliveHandler)
            and getattr(thread.ws, "_connection", None) is state
        ):
            thread.stop()


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep, or return True as soon as `stop` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return stop.is_set()
