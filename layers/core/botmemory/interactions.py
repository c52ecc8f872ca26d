"""Discord's interaction protocol: request signatures, response shapes, and the protocol's
numbers by name.

Only PyNaCl and the standard library are imported here, so the interactions function
answers PING without loading pydantic, boto3 or the memory core
(tests/test_interactions_cold_start.py holds it to that).

The enumerations carry Discord's documented values and only the members this bot uses.
They are `int`s, so `json.dumps` writes them as plain numbers and they compare equal to
the numbers a request carries.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey


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


class ApplicationCommandType(IntEnum):
    """An application command's `type`."""

    CHAT_INPUT = 1  # a slash command


class OptionType(IntEnum):
    """An application command option's `type`; a subcommand is an option too."""

    SUB_COMMAND = 1
    STRING = 3
    USER = 6


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


class SignatureVerifier:
    """Checks `X-Signature-Ed25519` over `X-Signature-Timestamp + raw body`."""

    def __init__(self, public_key_hex: str) -> None:
        self._key = VerifyKey(bytes.fromhex(public_key_hex))

    def verify(self, signature_hex: str | None, timestamp: str | None, body: bytes) -> bool:
        if not signature_hex or not timestamp:
            return False
        try:
            signature = bytes.fromhex(signature_hex)
        except ValueError:
            return False
        if len(signature) != 64:
            return False
        try:
            self._key.verify(timestamp.encode() + body, signature)
        except BadSignatureError:
            return False
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
