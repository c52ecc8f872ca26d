"""Whether what someone says may be kept: the one rule ingest and the answer path ask
(`RecordingGate.refusal`), from the controls members and staff set (botmemory.storage.controls).

Nothing is kept of a message, an edit or a reaction, nor of the bot's own answer there, when:

- its channel's memory is off (`/memory-staff channel off`; a thread follows its parent);
- the server records only members who agreed (`/memory-staff consent opt-in`) and its author
  did not run `/memory optin` there;
- its author paused being recorded (`/memory pause`), everywhere, until the pause ends.

Deletions and reaction clears are always kept: they make what was kept before go.

Switches take effect within a minute (`CACHE_MS`, the opt-out list's): a container reads a
server's controls once a minute (one Query of a few items), a member's consent in a server
once a minute (one GetItem), and the list of live pauses once a minute (one Query). The
container that ran the command sees its own switch at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from botmemory.clock import Clock
from botmemory.people.optout import CACHE_MS
from botmemory.storage.controls import GuildControls
from botmemory.storage.repository import MemoryRepository

CHANNEL_OFF = "memory is off in this channel"
NOT_CONSENTED = "the server records only members who opted in"
PAUSED = "the author paused memory"
# Members' consents and threads' parents cached per container, at most.
MAX_CACHED = 10_000


T = TypeVar("T")


@dataclass
class _Cached(Generic[T]):
    value: T
    read_ms: int


class RecordingGate:
    """The recording rule over cached controls; one per container (the recorder's)."""

    def __init__(
        self, repository: MemoryRepository, clock: Clock, hash_of: Callable[[str], str]
    ) -> None:
        self._repository = repository
        self._clock = clock
        self._hash_of = hash_of
        self._lock = threading.Lock()
        self._guilds: dict[str, _Cached[GuildControls]] = {}
        self._consents: dict[tuple[str, str], _Cached[bool]] = {}
        self._parents: dict[tuple[str, str], _Cached[str | None]] = {}
        self._pauses: _Cached[dict[str, int]] | None = None

    def refusal(self, guild_id: str | None, channel_id: str, person_id: str | None) -> str | None:
        """Why what `person_id` says in this channel may not be kept; None when it may.
        `person_id` None: nobody's words (only the channel's switch applies)."""
        if person_id and self.paused_until(person_id) is not None:
            return PAUSED
        if guild_id is None:
            return None
        controls = self.controls(guild_id)
        if controls.off_channels and self._channel_off(guild_id, channel_id, controls):
            return CHANNEL_OFF
        if controls.opt_in and person_id and not self._consented(guild_id, person_id):
            return NOT_CONSENTED
        return None

    def paused_until(self, person_id: str) -> int | None:
        """When this person's pause ends (epoch ms); None when they are not paused."""
        now = self._clock.now_ms()
        with self._lock:
            if self._pauses is None or now - self._pauses.read_ms >= CACHE_MS:
                self._pauses = _Cached(self._repository.pauses(now), now)
            until = self._pauses.value.get(self._hash_of(person_id))
        return until if until is not None and until > now else None

    def controls(self, guild_id: str) -> GuildControls:
        now = self._clock.now_ms()
        with self._lock:
            cached = self._guilds.get(guild_id)
        if cached is None or now - cached.read_ms >= CACHE_MS:
            cached = _Cached(self._repository.guild_controls(guild_id), now)
            with self._lock:
                self._guilds[guild_id] = cached
        return cached.value

    def _channel_off(self, guild_id: str, channel_id: str, controls: GuildControls) -> bool:
        if channel_id in controls.off_channels:
            return True
        parent = self._fresh(
            self._parents,
            (guild_id, channel_id),
            lambda: self._repository.thread_parent(guild_id, channel_id),
        )
        return parent is not None and parent in controls.off_channels

    def _consented(self, guild_id: str, person_id: str) -> bool:
        person = self._hash_of(person_id)
        return self._fresh(
            self._consents,
            (guild_id, person),
            lambda: self._repository.consented(guild_id, person),
        )

    def _fresh(
        self, cache: dict[tuple[str, str], _Cached[T]], at: tuple[str, str], read: Callable[[], T]
    ) -> T:
        now = self._clock.now_ms()
        with self._lock:
            cached = cache.get(at)
        if cached is None or now - cached.read_ms >= CACHE_MS:
            cached = _Cached(read(), now)
            with self._lock:
                if len(cache) >= MAX_CACHED:  # a long-lived container stays bounded
                    cache.clear()
                cache[at] = cached
        return cached.value

    # What the container that ran a command knows at once --------------------------------

    def forget(self, guild_id: str | None = None) -> None:
        """Drop what is cached (of one server, or of everything)."""
        with self._lock:
            if guild_id is None:
                self._guilds.clear()
                self._consents.clear()
                self._pauses = None
                return
            self._guilds.pop(guild_id, None)
            for cache in (self._consents, self._parents):
                for at in [a for a in cache if a[0] == guild_id]:
                    cache.pop(at, None)
