"""Discord's refusals as the REST client raises them (botmemory.discord.rest): the errors,
the JSON error codes callers act on, and the text of an error built from an answer, never
holding a credential (the bot token, an interaction token in the URL).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any
from urllib.parse import quote

import httpx

_MAX_FIELD_ERRORS = 5
_EXCERPT_CHARS = 200


class JsonErrorCode(IntEnum):
    """Discord's JSON error codes that callers act on (the `code` of a DiscordApiError)."""

    UNKNOWN_CHANNEL = 10003
    UNKNOWN_MEMBER = 10007  # not (or no longer) a member of the guild
    UNKNOWN_MESSAGE = 10008
    MISSING_ACCESS = 50001  # the bot cannot see the channel
    CANNOT_SEND_IN_DM = 50007
    MISSING_PERMISSIONS = 50013  # it sees the channel, and may not do this there
    INVALID_FORM_BODY = 50035


class DiscordConfigError(RuntimeError):
    """The bot token (or another setting the client needs) is missing or unreadable."""


class DiscordApiError(RuntimeError):
    """Discord refused a request, or could not be reached after the allowed attempts.

    `status` is the HTTP status (None when no answer came), `code` Discord's JSON error
    code when it sent one, `field_errors` the flattened `errors` of an invalid form body.
    """

    def __init__(
        self,
        status: int | None,
        message: str,
        *,
        code: int | None = None,
        route: str = "",
        field_errors: tuple[str, ...] = (),
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.message = message
        self.code = code
        self.route = route
        self.field_errors = field_errors
        self.retry_after = retry_after
        super().__init__(self._describe())

    @property
    def forbidden(self) -> bool:
        """Discord will not let the bot do this here (403: no access, no permission): asking
        again changes nothing, and repeated refusals count against the bot's invalid
        requests, which Cloudflare bans for."""
        return self.status == 403

    def _describe(self) -> str:
        where = f" to {self.route}" if self.route else ""
        head = f"Discord answered {self.status}{where}" if self.status else f"Discord{where}"
        text = f"{head}: {self.message}"
        if self.code:
            text += f" (code {self.code})"
        if self.field_errors:
            text += "; " + "; ".join(self.field_errors)
        return text


class DiscordRateLimited(DiscordApiError):
    """Not sent: a rate limit the client knows of resets later than it may wait (past
    `max_retry_wait`, or past the invocation's remaining time). Status 429, as Discord
    would have answered; `retry_after` is the wait it would have taken."""

    def __init__(self, route: str, wait: float, limit: str, bound: str) -> None:
        super().__init__(
            429,
            f"not sent: the {limit} rate limit resets in {wait:.2f} s, later than {bound}",
            route=route,
            retry_after=wait,
        )


def api_error(
    response: httpx.Response,
    route: str,
    secrets: list[str],
    *,
    retry_after: float | None = None,
) -> DiscordApiError:
    """Discord's refusal as an error: its message, code and form errors, no credential."""
    message = ""
    code: int | None = None
    field_errors: tuple[str, ...] = ()
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        if isinstance(payload.get("message"), str):
            message = payload["message"]
        if isinstance(payload.get("code"), int) and not isinstance(payload.get("code"), bool):
            code = payload["code"]
        if isinstance(payload.get("errors"), dict):
            field_errors = tuple(_flatten_errors(payload["errors"]))[:_MAX_FIELD_ERRORS]
    if not message:
        message = response.reason_phrase or "error"
        excerpt = response.text.strip()[:_EXCERPT_CHARS] if response.content else ""
        if excerpt:
            message += f": {excerpt}"
    if retry_after is not None:
        message += f" (retry after {retry_after:g} s)"
    return DiscordApiError(
        response.status_code,
        redact(message, secrets),
        code=code,
        route=redact(route, secrets),
        field_errors=tuple(redact(e, secrets) for e in field_errors),
        retry_after=retry_after,
    )


def _flatten_errors(errors: dict[str, Any], prefix: str = "") -> list[str]:
    """Discord's nested form errors as `options.0.description: message` lines."""
    lines: list[str] = []
    for key, value in errors.items():
        if key == "_errors" and isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    text = item.get("message") or item.get("code") or "invalid"
                    lines.append(f"{prefix or 'body'}: {text}")
        elif isinstance(value, dict):
            lines += _flatten_errors(value, f"{prefix}.{key}" if prefix else str(key))
    return lines


def redact(text: str, secrets: list[str]) -> str:
    """The text with every credential in it replaced."""
    # Discord never echoes tokens, but transport errors may quote the URL, which holds an
    # interaction token: strip every credential from any text that leaves this module.
    for secret in secrets:
        if secret:
            text = text.replace(secret, "<redacted>")
            text = text.replace(quote(secret, safe=""), "<redacted>")
    return text
