"""A small client for the parts of Discord's REST API the bot uses.

Command registration (bulk overwrite, list) and posting in a channel (a message, the
typing indicator) authenticate with the bot token; editing an interaction's original
response goes through the interaction webhook, whose token in the path is the credential,
so no bot token is sent there.

Rate limits are kept ahead (botmemory.discord.limits): the client reads every answer's
`X-RateLimit-*` headers and holds a request back while its bucket has none left, the
global limit is in force or the bot's 50 a second are spent, so it never sends a request
it knows Discord will refuse (each 429 counts toward Discord's invalid-request ban).

Every request is retried a bounded number of times: on 429 the client waits as long as
Discord asks (`retry_after` in the JSON body, else the `Retry-After` header, in seconds or
as an HTTP-date), on 5xx and on transport failures it backs off exponentially. A wait
longer than `max_retry_wait`, or than the invocation has left (`time_left_ms`), is not
shortened and retried early (that only earns another 429): the call fails at once with a
`DiscordApiError` of status 429 (`DiscordRateLimited` when nothing was sent). Any other
4xx fails at once too, carrying Discord's message and code (a 403, `forbidden`: the bot
may not see or post in that channel). Error text never contains the bot token or an
interaction token.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from botmemory.discord.errors import (
    DiscordApiError,
    DiscordConfigError,
    DiscordRateLimited,
    JsonErrorCode,
    api_error,
    redact,
)
from botmemory.discord.limits import RateLimits, RouteKey, route_key
from botmemory.discord.limits import retry_after as retry_after_of
from botmemory.settings.secrets import value_or_secret
from botmemory.text import DISCORD_MESSAGE_CHARS
from botmemory.text import split_message as split_message

DEFAULT_API_BASE = "https://discord.com/api/v10"
API_BASE_ENV = "DISCORD_API_BASE"
BOT_TOKEN_ENV = "DISCORD_BOT_TOKEN"  # nosec B105 # the name of an environment variable, not a token
BOT_TOKEN_SECRET_ENV = "DISCORD_BOT_TOKEN_SECRET"  # nosec B105 # the name of an environment variable, not a token

# Discord asks bots to identify themselves this way ("DiscordBot (url, version)").
USER_AGENT = "DiscordBot (discord-memory-bot, 0.1.0)"
# What one message may carry in attachments where nothing raises it (a DM, a server without
# boosts): 10 MiB since 2024. The export's parts stay far under it.
MAX_ATTACHMENT_BYTES = 10 * 1024 * 1024

_SNOWFLAKE = re.compile(r"^[0-9]{1,21}$")
_BACKOFF_BASE_SECONDS = 0.5
_BACKOFF_CAP_SECONDS = 8.0
_JITTER_SECONDS = 0.25
# Discord's limits on a message: the users one may ping, the length of its nonce.
_MAX_ALLOWED_USERS = 100
_NONCE_CHARS = 25
# A wait must leave this much of the invocation for the request itself and the answer.
_BUDGET_MARGIN_SECONDS = 2.0
# Waits in a row for one request's turn before it gives up (limits that keep moving).
_MAX_TURN_WAITS = 8

logger = logging.getLogger(__name__)


class DiscordApi:
    """Synchronous Discord REST client; the HTTP connection pool is created on first use.

    `time_left_ms` (the invocation's remaining milliseconds, None when unbounded) bounds
    every wait; `rate_limits` may be shared by the clients of one process.
    """

    def __init__(
        self,
        bot_token: str | None = None,
        *,
        base_url: str = DEFAULT_API_BASE,
        timeout_seconds: float = 10.0,
        max_attempts: int = 4,
        max_retry_wait: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
        time_left_ms: Callable[[], int | None] | None = None,
        rate_limits: RateLimits | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._token = bot_token
        self._base_url = base_url.rstrip("/")
        self._timeout_seconds = timeout_seconds
        self._max_attempts = max_attempts
        self._max_retry_wait = max_retry_wait
        self._sleep = sleep
        self._transport = transport
        self._time_left_ms = time_left_ms
        self._limits = rate_limits or RateLimits()
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:
        # Never the token: reprs end up in logs and tracebacks.
        token = "set" if self._token else "none"
        return f"DiscordApi(base_url={self._base_url!r}, bot_token={token})"

    def __enter__(self) -> DiscordApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- application commands ------------------------------------------------------------------

    def bulk_overwrite_commands(
        self,
        application_id: str,
        commands: list[dict[str, Any]],
        guild_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Replace every command of the application (globally, or in one guild) with `commands`.

        Discord matches by name and type: missing ones are deleted, the rest updated or
        created. Returns the commands as Discord now holds them.
        """
        path = _commands_path(application_id, guild_id)
        answer = self._request("PUT", path, json_body=commands, bot_auth=True)
        return _command_list(answer, path)

    def list_commands(
        self, application_id: str, guild_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The application's commands as Discord holds them (global, or one guild's)."""
        path = _commands_path(application_id, guild_id)
        answer = self._request("GET", path, bot_auth=True)
        return _command_list(answer, path)

    # -- guild members -------------------------------------------------------------------------

    def guild_member_present(self, guild_id: str, user_id: str) -> bool | None:
        """Whether a user is a member of a guild: True, False (404 Unknown Member), or None
        when Discord's answer says neither (another error, the bot not in the guild)."""
        _require_snowflake(guild_id, "guild id")
        _require_snowflake(user_id, "user id")
        try:
            self._request("GET", f"/guilds/{guild_id}/members/{user_id}", bot_auth=True)
        except DiscordApiError as error:
            if error.status == 404 and error.code == JsonErrorCode.UNKNOWN_MEMBER:
                return False
            logger.warning("member check answered neither way: %s", error)
            return None
        return True

    # -- interaction webhook -------------------------------------------------------------------

    def edit_original_response(
        self, application_id: str, interaction_token: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Finish a deferred answer: replace the interaction's original response with `body`.

        `allowed_mentions` is always forced to mention nobody, whatever `body` says: the
        content quotes stored text, which must never ping anyone.
        """
        _require_snowflake(application_id, "application id")
        if not interaction_token:
            raise ValueError("interaction token is empty")
        path = f"/webhooks/{application_id}/{quote(interaction_token, safe='')}/messages/@original"
        label = f"/webhooks/{application_id}/<interaction token>/messages/@original"
        payload = {**body, "allowed_mentions": {"parse": []}}
        answer = self._request(
            "PATCH", path, json_body=payload, route_label=label, secret=interaction_token
        )
        return answer if isinstance(answer, dict) else {}

    # -- channel messages ----------------------------------------------------------------------

    def create_message(
        self,
        channel_id: str,
        content: str,
        *,
        reply_to: str | None = None,
        allowed_users: Sequence[str] | None = None,
        reply_to_author: str | None = None,
        nonce: str | None = None,
    ) -> dict[str, Any]:
        """Post `content` (1 to 2,000 characters: `split_message` first) in a channel.

        It pings nobody but `allowed_users` (whatever the content holds: @everyone, roles
        and every other user are text), and with `reply_to` it answers that message; the
        replied-to person is pinged only when `reply_to_author` names them and they are in
        `allowed_users`. A reply to a message deleted meanwhile is posted as a plain message.

        The post carries a nonce that Discord enforces, so a retry after an answer lost on
        the way never posts twice; pass the same `nonce` (at most 25 characters) to make the
        caller's own retries safe too. Returns Discord's message object.
        """
        _require_snowflake(channel_id, "channel id")
        body = _message_body(content, reply_to, allowed_users or (), reply_to_author)
        body["nonce"] = _nonce(nonce)
        body["enforce_nonce"] = True
        answer = self._request(
            "POST", f"/channels/{channel_id}/messages", json_body=body, bot_auth=True
        )
        return answer if isinstance(answer, dict) else {}

    def open_dm(self, user_id: str) -> str:
        """The id of the bot's direct message channel with this user (made if need be)."""
        _require_snowflake(user_id, "user id")
        answer = self._request(
            "POST",
            "/users/@me/channels",
            json_body={"recipient_id": user_id},
            bot_auth=True,
            route_label="/users/@me/channels",
        )
        channel = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(channel, str) or not channel.isdigit():
            raise DiscordApiError(
                None, "no DM channel in the answer", route="POST /users/@me/channels"
            )
        return channel

    def send_files(
        self, channel_id: str, content: str, files: Sequence[tuple[str, bytes]], *, nonce: str
    ) -> dict[str, Any]:
        """Post `content` with files attached (multipart: `payload_json` and `files[n]`),
        pinging nobody; the enforced `nonce` makes a retry post once."""
        _require_snowflake(channel_id, "channel id")
        body = {
            "content": content,
            "allowed_mentions": {"parse": []},
            "attachments": [{"id": n, "filename": name} for n, (name, _) in enumerate(files)],
            "nonce": _nonce(nonce),
            "enforce_nonce": True,
        }
        answer = self._request(
            "POST",
            f"/channels/{channel_id}/messages",
            json_body=body,
            bot_auth=True,
            files=files,
        )
        return answer if isinstance(answer, dict) else {}

    def trigger_typing(self, channel_id: str) -> None:
        """Show "typing…" in the channel, for up to 10 s or until the bot's next message."""
        _require_snowflake(channel_id, "channel id")
        self._request("POST", f"/channels/{channel_id}/typing", bot_auth=True)

    # -- plumbing ------------------------------------------------------------------------------

    def _http(self) -> httpx.Client:
        # Built on first use: a Lambda that never calls Discord should not pay for it.
        if self._client is None:
            self._client = httpx.Client(
                base_url=self._base_url,
                timeout=self._timeout_seconds,
                transport=self._transport,
                headers={"User-Agent": USER_AGENT},
            )
        return self._client

    def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        bot_auth: bool = False,
        route_label: str | None = None,
        secret: str | None = None,
        files: Sequence[tuple[str, bytes]] = (),
    ) -> Any:
        route = f"{method} {route_label or path}"
        headers: dict[str, str] = {}
        if bot_auth:
            if not self._token:
                raise DiscordConfigError(f"{route} needs the bot token, and none was given")
            headers["Authorization"] = f"Bot {self._token}"
        secrets = [s for s in (self._token, secret) if s]
        key = route_key(method, path.partition("?")[0])  # a query is no part of the route

        last_problem = "no attempt made"
        for attempt in range(self._max_attempts):
            is_last = attempt == self._max_attempts - 1
            self._await_turn(key, route)
            try:
                if files:  # multipart: the JSON body as payload_json, then each file
                    response = self._http().request(
                        method,
                        path,
                        data={"payload_json": json.dumps(json_body)},
                        files=[
                            (f"files[{n}]", (name, data, "application/json"))
                            for n, (name, data) in enumerate(files)
                        ],
                        headers=headers,
                    )
                else:
                    response = self._http().request(method, path, json=json_body, headers=headers)
            except httpx.TransportError as exc:
                # All calls here are idempotent (GET, PUT of the full set, PATCH of one
                # message, typing, a new message with an enforced nonce), so repeating one
                # after a lost answer is safe.
                last_problem = redact(f"{type(exc).__name__}: {exc}", secrets)
                if is_last:
                    break
                wait = _backoff(attempt)
                logger.warning(
                    "Discord %s failed (%s); retrying in %.2f s", route, last_problem, wait
                )
                self._pause(wait)
                continue

            status = response.status_code
            refused_for = self._refused_for(response, attempt) if status == 429 else None
            self._limits.learn(key, response, refused_for)
            if status < 300:
                return _json_or_none(response)
            if status >= 500:
                last_problem = f"HTTP {status}"
            self._pause(
                self._retry_wait(response, route, secrets, attempt, refused_for, is_last=is_last)
            )
        raise DiscordApiError(
            None,
            f"no answer after {self._max_attempts} attempts ({last_problem})",
            route=route,
        )

    def _await_turn(self, key: RouteKey, route: str) -> None:
        """Hold the request back while a limit the client knows of would refuse it; raise
        `DiscordRateLimited` rather than wait longer than it may."""
        for turn in range(_MAX_TURN_WAITS + 1):
            wait = self._limits.reserve(key)
            if wait is None:
                return
            bound, why = self._wait_bound()
            if turn == _MAX_TURN_WAITS:  # limits that keep moving: give up, unsent
                bound, why = 0.0, f"{_MAX_TURN_WAITS} waits in a row"
            if wait.seconds > bound:
                raise DiscordRateLimited(route, wait.seconds, wait.limit, why)
            logger.info(
                "Discord %s waits %.2f s for the %s rate limit", route, wait.seconds, wait.limit
            )
            self._pause(wait.seconds)

    def _wait_bound(self) -> tuple[float, str]:
        """The longest wait allowed now, and what sets it."""
        left_ms = self._time_left_ms() if self._time_left_ms is not None else None
        if left_ms is not None:
            left = left_ms / 1000 - _BUDGET_MARGIN_SECONDS
            if left < self._max_retry_wait:
                return left, f"the invocation's remaining {left_ms / 1000:.2f} s allow"
        return self._max_retry_wait, f"the longest wait allowed ({self._max_retry_wait:g} s)"

    def _pause(self, wait: float) -> None:
        until = self._limits.now() + wait
        self._sleep(wait)
        self._limits.waited(until)

    @staticmethod
    def _refused_for(response: httpx.Response, attempt: int) -> float:
        """How long a 429 asks to wait (backing off when it does not say)."""
        asked = retry_after_of(response)
        return _backoff(attempt) if asked is None else asked

    def _retry_wait(
        self,
        response: httpx.Response,
        route: str,
        secrets: list[str],
        attempt: int,
        refused_for: float | None,
        *,
        is_last: bool,
    ) -> float:
        """Seconds to wait before retrying an unsuccessful answer; raises the answer's error
        when it is not worth retrying."""
        status = response.status_code
        if refused_for is not None:
            if is_last or refused_for > self._wait_bound()[0]:
                raise api_error(response, route, secrets, retry_after=refused_for)
            logger.warning("Discord rate-limited %s; retrying in %.2f s", route, refused_for)
            return refused_for
        if status >= 500:
            if is_last:
                raise api_error(response, route, secrets)
            wait = _backoff(attempt)
            logger.warning("Discord answered %s to %s; retrying in %.2f s", status, route, wait)
            return wait
        # Any other 4xx: the request itself is wrong (auth, permissions, body).
        raise api_error(response, route, secrets)


def api_base_from_environment(environ: Mapping[str, str] | None = None) -> str:
    """`DISCORD_API_BASE` when set (a local fake, a proxy), else Discord's v10 API."""
    env = os.environ if environ is None else environ
    return env.get(API_BASE_ENV, "").strip() or DEFAULT_API_BASE


def bot_token_from_environment(environ: Mapping[str, str] | None = None) -> str:
    """The bot token, by the one rule the relay follows too (relay/relay/credentials.py;
    tests/botmemory/discord/test_bot_token_rule.py holds both to it):

    - exactly one of `DISCORD_BOT_TOKEN` (the token) and `DISCORD_BOT_TOKEN_SECRET` (the
      name or ARN of a Secrets Manager secret holding it) is set; both or neither is an error;
    - the secret is the token as a plain string, or a JSON object with a `token` string;
      anything else (empty, JSON without `token`, broken JSON) is an error.
    """
    env = os.environ if environ is None else environ
    direct = env.get(BOT_TOKEN_ENV, "").strip()
    secret_name = env.get(BOT_TOKEN_SECRET_ENV, "").strip()
    # The pair rule (both set, an unreadable or empty secret) is botmemory.settings.secrets'.
    token = value_or_secret(
        BOT_TOKEN_ENV, direct, secret_name, what="bot token", error=DiscordConfigError
    )
    if token is None:
        raise DiscordConfigError(
            f"no bot token: set {BOT_TOKEN_ENV}, or {BOT_TOKEN_SECRET_ENV} to the name of "
            "the Secrets Manager secret that holds it"
        )
    return token if direct else _token_from_secret(token, secret_name)


def _token_from_secret(value: str, secret_name: str) -> str:
    """A plain-string secret is the token; a JSON object holds it under "token"."""
    text = value.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(token, str):
            raise DiscordConfigError(f'secret {secret_name!r} is JSON without a "token" string')
        text = token.strip()
    if not text:
        raise DiscordConfigError(f"secret {secret_name!r} holds no bot token")
    return text


def _message_body(
    content: str,
    reply_to: str | None,
    allowed_users: Sequence[str],
    reply_to_author: str | None,
) -> dict[str, Any]:
    if not content.strip():
        raise ValueError("a message needs content")
    if len(content) > DISCORD_MESSAGE_CHARS:
        raise ValueError(
            f"content of {len(content)} characters is over Discord's {DISCORD_MESSAGE_CHARS}: "
            "split it (split_message)"
        )
    users = list(dict.fromkeys(allowed_users))
    for user_id in users:
        _require_snowflake(user_id, "allowed user id")
    if len(users) > _MAX_ALLOWED_USERS:
        raise ValueError(f"at most {_MAX_ALLOWED_USERS} users may be pinged, got {len(users)}")
    body: dict[str, Any] = {
        "content": content,
        "allowed_mentions": {
            "parse": [],
            "users": users,
            "replied_user": reply_to is not None and reply_to_author in users,
        },
    }
    if reply_to is not None:
        _require_snowflake(reply_to, "message id")
        body["message_reference"] = {"message_id": reply_to, "fail_if_not_exists": False}
    return body


def _nonce(nonce: str | None) -> str:
    if nonce is None:
        return uuid.uuid4().hex[:_NONCE_CHARS]
    if not 1 <= len(nonce) <= _NONCE_CHARS or not nonce.isascii() or not nonce.isprintable():
        raise ValueError(f"a nonce is 1 to {_NONCE_CHARS} printable ASCII characters")
    return nonce


def _commands_path(application_id: str, guild_id: str | None) -> str:
    _require_snowflake(application_id, "application id")
    if guild_id is None:
        return f"/applications/{application_id}/commands"
    _require_snowflake(guild_id, "guild id")
    return f"/applications/{application_id}/guilds/{guild_id}/commands"


def _require_snowflake(value: str, what: str) -> None:
    # Ids go into the URL path: only digits, so nothing can redirect the request.
    if not isinstance(value, str) or not _SNOWFLAKE.match(value):
        raise ValueError(f"{what} must be a Discord snowflake (digits only), got {value!r}")


def _command_list(answer: Any, path: str) -> list[dict[str, Any]]:
    if not isinstance(answer, list):
        raise DiscordApiError(None, "expected a list of commands in the answer", route=path)
    return [c for c in answer if isinstance(c, dict)]


def _json_or_none(response: httpx.Response) -> Any:
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _backoff(attempt: int) -> float:
    # Jitter keeps concurrent Lambdas from retrying in lockstep.
    # An int power is typed Any (a negative exponent makes it a float).
    backoff: float = min(_BACKOFF_BASE_SECONDS * 2**attempt, _BACKOFF_CAP_SECONDS)
    return backoff + random.uniform(0, _JITTER_SECONDS)  # nosec B311 # retry jitter, not a secret
