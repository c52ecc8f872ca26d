"""Discord's REST rate limits, known ahead: the state `X-RateLimit-*` headers describe.

Discord limits each route per *bucket* (the `X-RateLimit-Bucket` hash, shared by similar
routes) and per top-level resource in the path (a channel, a guild, a webhook and its
token), and every bot globally (50 requests a second; a 429 with `global: true` stops all
of them). A 429 is an invalid request: 10,000 of them in 10 minutes get the IP banned by
Cloudflare. So the client asks `RateLimits.reserve` before each request and waits when it
knows the answer would be a 429, and tells `RateLimits.learn` every answer's headers.

What a header cannot say is not guessed: a missing or malformed `Remaining` or
`Reset-After` teaches nothing (the client then sends, and reacts to a 429 as before); a
missing or malformed bucket hash keeps the state under the route itself.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

# (method and route template, top-level resource): "POST /channels/{channel_id}/messages",
# "channels/123". Discord keys its limits by the route and that resource.
RouteKey = tuple[str, str]

GLOBAL_PER_SECOND = 50  # Discord's global limit for a bot, requests a second
_WINDOW_SECONDS = 1.0
# A reset further away than a day is not a rate limit this process can wait for.
_MAX_RESET_SECONDS = 86_400.0
# Past this many buckets known, the ones already reset are forgotten (a warm sandbox may
# post in many channels).
_PRUNE_ABOVE = 1_000
_BUCKET = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_COUNT = re.compile(r"^[0-9]{1,6}$")
_ID = re.compile(r"^[0-9]{1,21}$")
_MAJOR = {"channels": "channel_id", "guilds": "guild_id"}


def route_key(method: str, path: str) -> RouteKey:
    """The route template and top-level resource of a request path: ids become
    placeholders, the first channel, guild or webhook is the resource. A webhook's token
    is kept only as a digest (this state must hold no credential)."""
    parts = path.strip("/").split("/")
    template: list[str] = []
    major = ""
    i = 0
    while i < len(parts):
        part = parts[i]
        template.append(part)
        following = parts[i + 1] if i + 1 < len(parts) else None
        if not major and following is not None and part == "webhooks":
            token = parts[i + 2] if i + 2 < len(parts) else ""
            major = f"webhooks/{following}/{_digest(token)}" if token else f"webhooks/{following}"
            template += ["{webhook_id}", "{webhook_token}"] if token else ["{webhook_id}"]
            i += 3 if token else 2
            continue
        if not major and following is not None and part in _MAJOR and _ID.match(following):
            major = f"{part}/{following}"
            template.append("{" + _MAJOR[part] + "}")
            i += 2
            continue
        if _ID.match(part):
            template[-1] = "{id}"
        i += 1
    return f"{method.upper()} /" + "/".join(template), major


@dataclass(frozen=True)
class Wait:
    """How long to hold a request back, and which limit holds it."""

    seconds: float
    limit: str  # "global", "bucket <hash or route>", "global pace"


@dataclass
class _Bucket:
    remaining: int
    reset_at: float  # on the monotonic clock


class RateLimits:
    """What one process knows of its rate limits; thread-safe, shared by its clients."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        per_second: int = GLOBAL_PER_SECOND,
    ) -> None:
        self._clock = clock
        self._wall = wall
        self._per_second = per_second
        self._lock = threading.Lock()
        self._bucket_of: dict[str, str] = {}  # route template -> Discord's bucket hash
        self._buckets: dict[tuple[str, str], _Bucket] = {}  # (bucket, resource) -> state
        self._global_until = 0.0
        self._sent: deque[float] = deque()  # when the last requests went, oldest first

    def now(self) -> float:
        return self._clock()

    def reserve(self, key: RouteKey) -> Wait | None:
        """None when the request may go now (it is then counted against its bucket and
        the global pace), else how long it must wait first."""
        with self._lock:
            now = self._clock()
            waits: list[Wait] = []
            if self._global_until > now:
                waits.append(Wait(self._global_until - now, "global"))
            state_key = self._state_key(key)
            bucket = self._buckets.get(state_key)
            if bucket is not None and bucket.reset_at <= now:
                del self._buckets[state_key]  # reset: unknown until the next answer says
                bucket = None
            if bucket is not None and bucket.remaining <= 0:
                waits.append(Wait(bucket.reset_at - now, f"bucket {state_key[0]}"))
            while self._sent and self._sent[0] <= now - _WINDOW_SECONDS:
                self._sent.popleft()
            if len(self._sent) >= self._per_second:
                waits.append(Wait(self._sent[0] + _WINDOW_SECONDS - now, "global pace"))
            if waits:
                return max(waits, key=lambda w: w.seconds)
            if bucket is not None:
                bucket.remaining -= 1
            self._sent.append(now)
            return None

    def bucket_wait(self, key: RouteKey) -> float:
        """How long this route's bucket holds the next request back (0 when it has requests
        left or nothing is known), without reserving one: a worker that hands the next
        page to a queue delays that message by it."""
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(self._state_key(key))
            if bucket is None or bucket.remaining > 0 or bucket.reset_at <= now:
                return max(self._global_until - now, 0.0)
            return max(bucket.reset_at - now, self._global_until - now)

    def waited(self, until: float) -> None:
        """A wait that was to last until `until` is over: what it waited for has reset,
        whatever the clock says (a test's clock may not move while it "sleeps")."""
        with self._lock:
            if self._global_until <= until:
                self._global_until = 0.0
            for state_key, bucket in list(self._buckets.items()):
                if bucket.remaining <= 0 and bucket.reset_at <= until:
                    del self._buckets[state_key]
            while self._sent and self._sent[0] <= until - _WINDOW_SECONDS:
                self._sent.popleft()

    def learn(self, key: RouteKey, response: httpx.Response, refused_for: float | None) -> None:
        """Take in an answer's rate-limit headers; `refused_for` is the wait a 429 asked."""
        headers = response.headers
        bucket_hash = headers.get("X-RateLimit-Bucket", "").strip()
        with self._lock:
            now = self._clock()
            if _BUCKET.match(bucket_hash):
                self._bucket_of[key[0]] = bucket_hash
            state_key = self._state_key(key)
            if refused_for is not None and is_global(response):
                self._global_until = max(self._global_until, now + refused_for)
                return
            remaining = _count(headers.get("X-RateLimit-Remaining"))
            reset_after = _reset_after(headers, self._wall)
            if refused_for is not None:
                remaining, reset_after = 0, max(refused_for, reset_after or 0.0)
            if remaining is not None and reset_after is not None:
                self._buckets[state_key] = _Bucket(remaining, now + reset_after)
            if len(self._buckets) > _PRUNE_ABOVE:
                self._buckets = {k: b for k, b in self._buckets.items() if b.reset_at > now}

    def _state_key(self, key: RouteKey) -> tuple[str, str]:
        # Routes sharing a bucket hash share its state, per top-level resource (the hash
        # itself does not depend on the resource).
        return self._bucket_of.get(key[0], key[0]), key[1]


def is_global(response: httpx.Response) -> bool:
    """A 429 of the global limit: the body's `global: true`, or the headers say so."""
    payload = _json(response)
    if isinstance(payload, dict) and payload.get("global") is True:
        return True
    flag: str = response.headers.get("X-RateLimit-Global", "")
    scope: str = response.headers.get("X-RateLimit-Scope", "")
    return flag.strip().lower() == "true" or scope.strip().lower() == "global"


def retry_after(response: httpx.Response, wall: Callable[[], float] = time.time) -> float | None:
    """Seconds a 429 asks to wait: the body's `retry_after` (precise), else `Retry-After`
    (seconds, or an HTTP-date), else `X-RateLimit-Reset-After`; None when none is readable."""
    payload = _json(response)
    if isinstance(payload, dict):
        seconds = _seconds(payload.get("retry_after"))
        if seconds is not None:
            return seconds
    header = response.headers.get("Retry-After")
    seconds = _seconds(header)
    if seconds is None and header:
        seconds = _seconds_until_date(header, response.headers.get("Date"), wall)
    if seconds is not None:
        return seconds
    return _seconds(response.headers.get("X-RateLimit-Reset-After"))


def _seconds(raw: Any) -> float | None:
    if raw is None or isinstance(raw, bool):
        return None
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _seconds_until_date(value: str, date: str | None, wall: Callable[[], float]) -> float | None:
    """An HTTP-date's distance from the answer's own `Date` (the server's clock, so no skew
    between the two), else from this machine's clock; a date past is no wait."""
    at = _timestamp(value)
    if at is None:
        return None
    reference = _timestamp(date) if date else None
    return max(at - (wall() if reference is None else reference), 0.0)


def _timestamp(value: str) -> float | None:
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # HTTP-dates are GMT
    return moment.timestamp()


def _count(raw: str | None) -> int | None:
    text = (raw or "").strip()
    return int(text) if _COUNT.match(text) else None


def _reset_after(headers: httpx.Headers, wall: Callable[[], float]) -> float | None:
    """Seconds until the bucket resets: `Reset-After` (relative, so no clock skew), else
    the epoch `Reset` against this machine's clock."""
    seconds = _seconds(headers.get("X-RateLimit-Reset-After"))
    if seconds is None:
        at = _seconds(headers.get("X-RateLimit-Reset"))
        seconds = None if at is None else max(at - wall(), 0.0)
    return seconds if seconds is not None and seconds <= _MAX_RESET_SECONDS else None


def _json(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]
