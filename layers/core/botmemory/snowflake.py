"""Discord ids ("snowflakes") as the validated payload models take them.

A snowflake is an unsigned 64-bit integer that Discord writes as a decimal string, so it
has at most 20 digits. (discord_api.py, register.py and migrate.py check ids with plain
regular expressions of their own, because they must not load pydantic.)
"""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

Snowflake = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,20}$")]

# Discord's epoch: a snowflake's top 42 bits count milliseconds since this moment.
DISCORD_EPOCH_MS = 1_420_070_400_000


def snowflake_ms(snowflake: str) -> int:
    """When a snowflake was made, in epoch milliseconds."""
    return (int(snowflake) >> 22) + DISCORD_EPOCH_MS


def snowflake_at(at_ms: int) -> str:
    """The smallest snowflake of a millisecond: `after=` it finds what was made from then on."""
    return str(max(at_ms - DISCORD_EPOCH_MS, 0) << 22)
