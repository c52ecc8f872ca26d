"""Discord's interaction protocol: request signatures, response shapes, and the protocol's
numbers by name.

Only PyNaCl, the standard library and botmemory.clock (itself standard library only) are
imported here, so the interactions function answers PING without loading pydantic, boto3
or the memory core (tests/stack/test_interactions_cold_start.py holds it to that).

The enumerations carry Discord's documented values and only the members this bot uses.
They are `int`s, so `json.dumps` writes them as plain numbers and they compare equal to
the numbers a request carries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import Enum, IntEnum, IntFlag
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from botmemory.clock import Clock
from botmemory.settings.environment import ConfigError, required_env


class InteractionType(IntEnum):
    """What a request is: an interaction's `type`."""

    PING = 1
    APPLICATION_COMMAND = 2
    MESSAGE_COMPONENT = 3
    APPLICATION_COMMAND_AUTOCOMPLETE = 4
    MODAL_SUBMIT = 5


class InteractionResponseType(IntEnum):
    """How an answer responds: an interaction response's `type` (Discord's "callback type")."""

    PONG = 1
    CHANNEL_MESSAGE_WITH_SOURCE = 4
    DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE = 5  # "thinking…", edited later through the webhook
    DEFERRED_UPDATE_MESSAGE = 6  # components only: acknowledged, the message edited later
    UPDATE_MESSAGE = 7  # components only: edit the message the component is on
    APPLICATION_COMMAND_AUTOCOMPLETE_RESULT = 8


class MessageFlag(IntFlag):
    """A message's `flags` bits."""

    EPHEMERAL = 1 << 6  # only the invoking user sees it


class Permissions(IntFlag):
    """Permission bits, as in `member.permissions` and `default_member_permissions` (which
    Discord writes as decimal strings)."""

    ADMINISTRATOR = 1 << 3
    MANAGE_GUILD = 1 << 5  # "Manage Server" in the client
    VIEW_CHANNEL = 1 << 10  # "View Channel": who can see a channel (botmemory.ingest.channels)


class ApplicationCommandType(IntEnum):
    """An application command's `type`."""

    CHAT_INPUT = 1  # a slash command


class OptionType(IntEnum):
    """An application command option's `type`; a subcommand is an option too."""

    SUB_COMMAND = 1
    SUB_COMMAND_GROUP = 2  # holds subcommands only, one level down
    STRING = 3
    INTEGER = 4
    USER = 6
    CHANNEL = 7


class InteractionContextType(IntEnum):
    """Where a command can be used: its `contexts`."""

    GUILD = 0
    BOT_DM = 1  # a DM with the bot itself


class ApplicationIntegrationType(IntEnum):
    """How the app must be installed for a command to be offered: its `integration_types`."""

    GUILD_INSTALL = 0


class ComponentType(IntEnum):
    """A message component's `type`."""

    ACTION_ROW = 1
    BUTTON = 2


class ButtonStyle(IntEnum):
    """A button's `style`."""

    SECONDARY = 2  # grey
    DANGER = 4  # red


MAX_CONTENT = 2000


PUBLIC_KEY_ENV = "DISCORD_PUBLIC_KEY"


def public_key_from_environment(env: Mapping[str, str]) -> str:
    """The application's Ed25519 public key: 64 hexadecimal characters (Developer Portal >
    General Information). ConfigError, in one line naming the variable, otherwise."""
    value = required_env(PUBLIC_KEY_ENV, env)
    if len(value) != 64 or not all(c in "0123456789abcdefABCDEF" for c in value):
        raise ConfigError(f"{PUBLIC_KEY_ENV} must be 64 hexadecimal characters")
    return value


# How far a signed request's timestamp may be from now, either way, before it is refused as
# a replay (or as a clock gone wrong): Discord sends each request as it happens.
DEFAULT_TIMESTAMP_TOLERANCE_SECONDS = 300
# Unix seconds as Discord writes them: plain ASCII digits (12 reach past the year 30000).
_MAX_TIMESTAMP_DIGITS = 12


class Refusal(Enum):
    """Why a request is not taken as Discord's."""

    SIGNATURE = "signature"  # missing, malformed, or not made by the application's key
    TIMESTAMP = "timestamp"  # signed, but its timestamp is not unix seconds close to now


class SignatureVerifier:
    """Checks `X-Signature-Ed25519` over `X-Signature-Timestamp + raw body`, and that the
    timestamp (unix seconds) lies within `tolerance_seconds` of the clock's now, in either
    direction, so a request captured and sent again later is refused like a forged one."""

    def __init__(
        self,
        public_key_hex: str,
        clock: Clock,
        tolerance_seconds: int = DEFAULT_TIMESTAMP_TOLERANCE_SECONDS,
    ) -> None:
        if tolerance_seconds < 0:
            raise ValueError("the timestamp tolerance must not be negative")
        self._key = VerifyKey(bytes.fromhex(public_key_hex))
        self._clock = clock
        self._tolerance_ms = tolerance_seconds * 1000

    def refusal(
        self, signature_hex: str | None, timestamp: str | None, body: bytes
    ) -> Refusal | None:
        """None when Discord signed this request just now; otherwise why it is refused."""
        if not signature_hex or not timestamp:
            return Refusal.SIGNATURE
        try:
            signature = bytes.fromhex(signature_hex)
        except ValueError:
            return Refusal.SIGNATURE
        if len(signature) != 64:
            return Refusal.SIGNATURE
        try:
            self._key.verify(timestamp.encode() + body, signature)
        except BadSignatureError:
            return Refusal.SIGNATURE
        if not self._is_recent(timestamp):
            return Refusal.TIMESTAMP
        return None

    def verify(self, signature_hex: str | None, timestamp: str | None, body: bytes) -> bool:
        return self.refusal(signature_hex, timestamp, body) is None

    def _is_recent(self, timestamp: str) -> bool:
        # Not int(): it also takes signs, spaces, underscores and non-ASCII digits.
        if (
            not (timestamp.isascii() and timestamp.isdigit())
            or len(timestamp) > _MAX_TIMESTAMP_DIGITS
        ):
            return False
        return abs(int(timestamp) * 1000 - self._clock.now_ms()) <= self._tolerance_ms


# Deeper than any interaction Discord sends (a subcommand group's option sits 8 levels down),
# far shallower than what breaks code that walks a payload recursively (copy.deepcopy in
# the idempotency layer gives out a few hundred levels down).
MAX_NESTING = 64


def parse_interaction(body: bytes) -> tuple[dict[str, Any], int] | None:
    """A signed body as an interaction and its `type`; None for anything else: bytes that are
    not UTF-8, JSON that does not parse (or nests too deep to), a value that is not an
    object, an object nested deeper than MAX_NESTING, a `type` that is not an integer."""
    try:
        payload = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    if not isinstance(payload, dict) or not _nests_within(payload, MAX_NESTING):
        return None
    kind = payload.get("type")
    if not isinstance(kind, int) or isinstance(kind, bool):
        return None
    return payload, kind


def _nests_within(value: Any, limit: int) -> bool:
    """Whether no object or array in `value` lies more than `limit` levels deep (no recursion)."""
    waiting: list[tuple[Any, int]] = [(value, 1)]
    while waiting:
        item, depth = waiting.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        for child in children:
            if isinstance(child, dict | list):
                if depth >= limit:
                    return False
                waiting.append((child, depth + 1))
    return True


def ephemeral_message(content: str) -> dict[str, Any]:
    """An answer only the caller sees, which can never ping anyone."""
    if len(content) > MAX_CONTENT:
        content = content[: MAX_CONTENT - 1] + "…"
    return {
        "type": InteractionResponseType.CHANNEL_MESSAGE_WITH_SOURCE,
        "data": {
            "content": content,
            "flags": MessageFlag.EPHEMERAL,
            "allowed_mentions": {"parse": []},
        },
    }


def invoking_user(interaction: dict[str, Any]) -> dict[str, Any]:
    """The member's user in a guild, the user in a DM."""
    member = interaction.get("member")
    if isinstance(member, dict) and isinstance(member.get("user"), dict):
        member_user: dict[str, Any] = member["user"]
        return member_user
    user = interaction.get("user")
    return user if isinstance(user, dict) else {}
