"""Discord's interaction protocol: request signatures and response shapes.

Only PyNaCl is imported here, so the interactions function answers PING without
loading pydantic, boto3 or the memory core.
"""

from __future__ import annotations

from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

# Interaction types.
PING = 1
APPLICATION_COMMAND = 2
MESSAGE_COMPONENT = 3
APPLICATION_COMMAND_AUTOCOMPLETE = 4

# Interaction callback types.
PONG = 1
CHANNEL_MESSAGE_WITH_SOURCE = 4
DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE = 5
APPLICATION_COMMAND_AUTOCOMPLETE_RESULT = 8

EPHEMERAL = 1 << 6
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
        "type": CHANNEL_MESSAGE_WITH_SOURCE,
        "data": {"content": content, "flags": EPHEMERAL, "allowed_mentions": {"parse": []}},
    }


def invoking_user(interaction: dict[str, Any]) -> dict[str, Any]:
    """The member's user in a guild, the user in a DM."""
    member = interaction.get("member")
    if isinstance(member, dict) and isinstance(member.get("user"), dict):
        return member["user"]
    user = interaction.get("user")
    return user if isinstance(user, dict) else {}
