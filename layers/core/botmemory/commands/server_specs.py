"""The option specs of `/memory-staff backfill` and `/memory-staff retention`: a server's past
read again and how long it keeps each kind of memory (their handlers: botmemory.commands.backfill
and botmemory.commands.retention). botmemory.commands.specs puts them in the staff command and
names every constant here again for its callers."""

from __future__ import annotations

from typing import Any

from botmemory.commands.spec_parts import subcommand
from botmemory.discord.interactions import OptionType
from botmemory.settings.config import MAX_BACKFILL_DAYS as MAX_BACKFILL_DAYS

OPTION_CHANNEL = "channel"  # channel *, backfill start (this channel when left out)
OPTION_DAYS = "days"  # backfill start, retention *

BACKFILL_GROUP = "backfill"
BACKFILL_START = "start"
BACKFILL_STATUS = "status"
BACKFILL_CANCEL = "cancel"
# Days imported when the bot joins this server again (0: never; botmemory.catchup.on_join).
BACKFILL_ON_JOIN = "on-join"

RETENTION_GROUP = "retention"
RETENTION_FACTS = "facts"
RETENTION_MESSAGES = "messages"
RETENTION_EPISODES = "episodes"
RETENTION_STATUS = "status"
RETENTION_LEAVERS = "leavers"  # members who left: erased after these days (0: never)
MAX_LEAVERS_DAYS = 365
RETENTION_KINDS = (RETENTION_FACTS, RETENTION_MESSAGES, RETENTION_EPISODES)


def backfill_group() -> dict[str, Any]:
    """`/memory-staff backfill ...`: this server's past imported, by staff's choice."""
    channel = {
        "type": OptionType.CHANNEL,
        "name": OPTION_CHANNEL,
        "description": "One channel (every channel the bot knows here when left out)",
        "required": False,
    }
    days = {
        "type": OptionType.INTEGER,
        "name": OPTION_DAYS,
        "description": f"How many days back (1 to {MAX_BACKFILL_DAYS}; 7 when left out)",
        "required": False,
        "min_value": 1,
        "max_value": MAX_BACKFILL_DAYS,
    }
    on_join = {
        **days,
        "description": f"Days read when the bot is added here again (0 to {MAX_BACKFILL_DAYS}; 0: never)",
        "required": True,
        "min_value": 0,
    }
    return {
        "type": OptionType.SUB_COMMAND_GROUP,
        "name": BACKFILL_GROUP,
        "description": "Import what was said here before the bot joined (every memory rule applies)",
        "options": [
            subcommand(BACKFILL_START, "Import the last days of messages", [channel, days]),
            subcommand(BACKFILL_STATUS, "How far the import is, and what it costs"),
            subcommand(BACKFILL_CANCEL, "Stop the import under way"),
            subcommand(
                BACKFILL_ON_JOIN,
                "Days of history to import if the bot is removed and added back here",
                [on_join],
            ),
        ],
    }


def retention_group() -> dict[str, Any]:
    """`/memory-staff retention ...`: how long this server keeps each kind of memory."""
    days = {
        "type": OptionType.INTEGER,
        "name": OPTION_DAYS,
        "description": "Days (at most the deployment's; the deployment's restores it)",
        "required": True,
        "min_value": 1,
        "max_value": 3650,
    }
    what = {
        RETENTION_FACTS: "How long facts about members are kept here",
        RETENTION_MESSAGES: "How long recorded messages are kept here",
        RETENTION_EPISODES: "How long channel summaries are kept here",
    }
    leavers = {
        **days,
        "description": f"Days after a member leaves (0 to {MAX_LEAVERS_DAYS}; 0: never)",
        "min_value": 0,
        "max_value": MAX_LEAVERS_DAYS,
    }
    return {
        "type": OptionType.SUB_COMMAND_GROUP,
        "name": RETENTION_GROUP,
        "description": "How long this server keeps memory (within the deployment's maximums)",
        "options": [subcommand(kind, what[kind], [days]) for kind in RETENTION_KINDS]
        + [
            subcommand(
                RETENTION_LEAVERS, "Erase what was kept of members who leave, days later", [leavers]
            ),
            subcommand(RETENTION_STATUS, "This server's retention and the deployment's"),
        ],
    }
