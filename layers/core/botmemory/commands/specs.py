"""The bot's slash commands as data: the JSON Discord's bulk-overwrite endpoint takes.

Layout, and why there are two `/memory...` commands:

    /memory show | remember text | forget what | optout | optin     every member
    /memory-staff user member | forget-fact id | restore-fact member id | pin where text
                  | unpin id | quarantine | history id              Manage Server by default
    /memory-staff persona set id name prompt [where] | list | remove id | purge id
                  | teach id text                                   (a subcommand group)
    /memory-staff notes set text | show | clear                     (a subcommand group)
    /memory-staff channel off | on | status | forget [channel]      (a subcommand group)
    /memory-staff consent mode                                      (botmemory.commands.controls)
    /memory-staff retention facts|messages|episodes|leavers days | status   (commands.retention)
    /memory privacy | pause duration | forget-recent minutes | export   every member
    /memory-staff timezone [zone]
    /memory-staff backfill start [channel] [days] | status | cancel (a subcommand group)
    /forgetme                                                       every member
    /ask question                                                   every member

Discord attaches permissions to a top-level command only. `default_member_permissions`
is a field of the application command object; the option object (which is what a
subcommand is, option type SUB_COMMAND) has no permission field, and the per-guild
overwrites staff edit under Server Settings > Integrations also target a whole command.
So there is no way to let every member run `/memory show` while only staff see
`/memory pin`. The staff subcommands therefore live under a second top-level command,
`memory-staff`, registered with `default_member_permissions` = MANAGE_GUILD ("32"):
Discord hides it from members without Manage Server, and server admins can still widen
or narrow it per role. The interactions handler re-checks `member.permissions`
server-side anyway, because admins can override the default and a request's own claims
decide nothing.

Discord's numbers (command, option, context and integration types, permission bits) are
the enumerations of `botmemory.discord.interactions`.

A subcommand group (option type SUB_COMMAND_GROUP) holds subcommands only, one level down:
`/memory-staff persona set` arrives as `data.options[0]` (the group) whose `options[0]` is the
subcommand, whose `options` are the values. Groups and plain subcommands may sit side by side
under one command (Discord's rule: at most 25 of them, and a group nests no further).

Member commands work in servers and in a DM with the bot (scope `dm`); the staff command
only in servers. `contexts` and `integration_types` apply to global commands only, so
`command_definitions(guild_scoped=True)` leaves them out for guild registration.

Routing uses the names exported here (`MEMBER_COMMAND`, `SHOW`, `OPTION_TEXT`, ...), so a
rename happens in one place.
"""

from __future__ import annotations

from typing import Any

from botmemory.commands.server_specs import (
    BACKFILL_CANCEL as BACKFILL_CANCEL,
)
from botmemory.commands.server_specs import (
    BACKFILL_GROUP as BACKFILL_GROUP,
)
from botmemory.commands.server_specs import (
    BACKFILL_START as BACKFILL_START,
)
from botmemory.commands.server_specs import (
    BACKFILL_STATUS as BACKFILL_STATUS,
)
from botmemory.commands.server_specs import (
    MAX_BACKFILL_DAYS as MAX_BACKFILL_DAYS,
)
from botmemory.commands.server_specs import (
    MAX_LEAVERS_DAYS as MAX_LEAVERS_DAYS,
)
from botmemory.commands.server_specs import (
    OPTION_CHANNEL as OPTION_CHANNEL,
)
from botmemory.commands.server_specs import (
    OPTION_DAYS as OPTION_DAYS,
)
from botmemory.commands.server_specs import (
    RETENTION_EPISODES as RETENTION_EPISODES,
)
from botmemory.commands.server_specs import (
    RETENTION_FACTS as RETENTION_FACTS,
)
from botmemory.commands.server_specs import (
    RETENTION_GROUP as RETENTION_GROUP,
)
from botmemory.commands.server_specs import (
    RETENTION_KINDS as RETENTION_KINDS,
)
from botmemory.commands.server_specs import (
    RETENTION_LEAVERS as RETENTION_LEAVERS,
)
from botmemory.commands.server_specs import (
    RETENTION_MESSAGES as RETENTION_MESSAGES,
)
from botmemory.commands.server_specs import (
    RETENTION_STATUS as RETENTION_STATUS,
)
from botmemory.commands.server_specs import (
    backfill_group,
    retention_group,
)
from botmemory.commands.spec_parts import subcommand as _subcommand
from botmemory.discord.interactions import (
    ApplicationCommandType,
    ApplicationIntegrationType,
    InteractionContextType,
    OptionType,
    Permissions,
)
from botmemory.memory.notes import MAX_SERVER_NOTES_CHARS
from botmemory.memory.personas import MAX_NAME_CHARS, MAX_PROMPT_CHARS, MEMORY_PLACEHOLDER
from botmemory.when.zones import MAX_ZONE_NAME_CHARS

# Top-level command names, as `data.name` arrives in an interaction.
MEMBER_COMMAND = "memory"
STAFF_COMMAND = "memory-staff"
FORGETME_COMMAND = "forgetme"
ASK_COMMAND = "ask"

# Member subcommands of /memory.
SHOW = "show"
REMEMBER = "remember"
FORGET = "forget"
OPTOUT = "optout"
OPTIN = "optin"
# Members' controls over what is kept (botmemory.commands.controls).
PRIVACY = "privacy"
PAUSE = "pause"
FORGET_RECENT = "forget-recent"
EXPORT = "export"
MEMBER_SUBCOMMANDS = (
    SHOW,
    REMEMBER,
    FORGET,
    OPTOUT,
    OPTIN,
    PRIVACY,
    PAUSE,
    EXPORT,
    FORGET_RECENT,
)

# Staff subcommands of /memory-staff.
USER = "user"
FORGET_FACT = "forget-fact"
RESTORE_FACT = "restore-fact"
PIN = "pin"
UNPIN = "unpin"
QUARANTINE = "quarantine"
HISTORY = "history"
RESET_SUMMARY = "reset-summary"
# The server's time zone (botmemory.when): every date the bot reads and writes here.
TIMEZONE = "timezone"
STAFF_SUBCOMMANDS = (
    USER,
    FORGET_FACT,
    RESTORE_FACT,
    PIN,
    UNPIN,
    QUARANTINE,
    HISTORY,
    RESET_SUMMARY,
    TIMEZONE,
)

# The persona subcommand group of /memory-staff (botmemory.memory.personas).
PERSONA_GROUP = "persona"
PERSONA_SET = "set"
PERSONA_LIST = "list"
PERSONA_REMOVE = "remove"
PERSONA_PURGE = "purge"
PERSONA_TEACH = "teach"
PERSONA_SUBCOMMANDS = (PERSONA_SET, PERSONA_LIST, PERSONA_REMOVE, PERSONA_PURGE, PERSONA_TEACH)

# The notes subcommand group of /memory-staff (botmemory.memory.notes): the server's notes for
# direct messages.
NOTES_GROUP = "notes"
NOTES_SET = "set"
NOTES_SHOW = "show"
NOTES_CLEAR = "clear"
NOTES_SUBCOMMANDS = (NOTES_SET, NOTES_SHOW, NOTES_CLEAR)

# Staff's controls over what is kept (botmemory.commands.controls): a channel's memory switch
# (a subcommand group), and the server's consent mode.
CHANNEL_GROUP = "channel"
CHANNEL_OFF = "off"
CHANNEL_ON = "on"
CHANNEL_STATUS = "status"
CHANNEL_FORGET = "forget"
CHANNEL_SUBCOMMANDS = (CHANNEL_OFF, CHANNEL_ON, CHANNEL_STATUS, CHANNEL_FORGET)
# The backfill subcommand group of /memory-staff (botmemory.commands.backfill).
CONSENT = "consent"
MODE_OPT_IN = "opt-in"
MODE_OPT_OUT = "opt-out"
# The server's retention (botmemory.commands.retention), within the deployment's maximums.

# Option names, as they arrive in `data.options[0].options[*].name` (one level deeper in a
# group).
OPTION_TEXT = "text"  # remember, pin
OPTION_WHAT = "what"  # forget: a fact id or words of the fact (autocomplete)
OPTION_MEMBER = "member"  # user, restore-fact
OPTION_ID = "id"  # forget-fact, restore-fact, unpin, history, persona * (autocomplete)
OPTION_WHERE = "where"  # pin, persona set
OPTION_NAME = "name"  # persona set
OPTION_PROMPT = "prompt"  # persona set
WHERE_GLOBAL = "global"
WHERE_CHANNEL = "channel"
OPTION_QUESTION = "question"  # ask
OPTION_MODE = "mode"  # consent
OPTION_DURATION = "duration"  # pause
OPTION_MINUTES = "minutes"  # forget-recent
# A pause lasts at most this long (`/memory optout` is for longer), forget-recent reaches back
# at most this far (a week; `/forgetme` erases everything).
MAX_PAUSE_DAYS = 30
MAX_FORGET_RECENT_MINUTES = 7 * 24 * 60
OPTION_ZONE = "zone"  # timezone

# A fact or pin typed by hand: long enough for a sentence, short enough for the prompt budget.
MAX_TEXT_LENGTH = 240
# A question to the bot: what one Discord message holds.
MAX_QUESTION_LENGTH = 2000
# The longest value Discord lets a string option carry.
MAX_STRING_OPTION_LENGTH = 6000
# A persona's prompt as a command option: the persona rule's limit, within Discord's.
MAX_PROMPT_OPTION_LENGTH = min(MAX_PROMPT_CHARS, MAX_STRING_OPTION_LENGTH)

# Fields Discord honours only on global commands.
GLOBAL_ONLY_FIELDS = ("contexts", "integration_types")


def command_definitions(*, guild_scoped: bool = False) -> list[dict[str, Any]]:
    """Every command the bot has, fresh on each call so a caller may change its copy.

    `guild_scoped` drops the fields that only global commands carry.
    """
    commands = [_memory_command(), _staff_command(), _forgetme_command(), _ask_command()]
    if guild_scoped:
        for command in commands:
            for field in GLOBAL_ONLY_FIELDS:
                command.pop(field, None)
    return commands


def _memory_command() -> dict[str, Any]:
    return {
        "name": MEMBER_COMMAND,
        "type": ApplicationCommandType.CHAT_INPUT,
        "description": "See and control what the bot remembers about you",
        # null, sent explicitly: it also lifts a restriction an earlier registration set.
        "default_member_permissions": None,
        "contexts": [InteractionContextType.GUILD, InteractionContextType.BOT_DM],
        "integration_types": [ApplicationIntegrationType.GUILD_INSTALL],
        "options": [
            _subcommand(SHOW, "Show what the bot remembers about you here, with ids"),
            _subcommand(
                REMEMBER,
                "Ask the bot to remember something about you",
                [
                    _string(
                        OPTION_TEXT,
                        f"What to remember, in your words (up to {MAX_TEXT_LENGTH} characters)",
                        max_length=MAX_TEXT_LENGTH,
                    )
                ],
            ),
            _subcommand(
                FORGET,
                "Make the bot forget one thing it remembers about you",
                [_string(OPTION_WHAT, "A fact id or words of the fact", autocomplete=True)],
            ),
            _subcommand(
                OPTOUT, "Stop remembering you: erases what is kept and records nothing new"
            ),
            _subcommand(
                OPTIN, "Let the bot remember things about you again (and here, in an opt-in server)"
            ),
            _subcommand(
                PRIVACY, "What the bot keeps in this server, for how long, and your controls"
            ),
            _subcommand(
                PAUSE,
                "Stop the bot recording you for a while, everywhere",
                [
                    _string(
                        OPTION_DURATION,
                        f"How long: 30m, 2h, 3d (up to {MAX_PAUSE_DAYS}d), or `off` to resume",
                        max_length=16,
                    )
                ],
            ),
            _subcommand(
                EXPORT, "Get everything the bot keeps about you, as files in a direct message"
            ),
            _subcommand(
                FORGET_RECENT,
                "Erase what you said in the last minutes, everywhere",
                [
                    {
                        "type": OptionType.INTEGER,
                        "name": OPTION_MINUTES,
                        "description": f"How many minutes back (1 to {MAX_FORGET_RECENT_MINUTES:,})",
                        "required": True,
                        "min_value": 1,
                        "max_value": MAX_FORGET_RECENT_MINUTES,
                    }
                ],
            ),
        ],
    }


def _staff_command() -> dict[str, Any]:
    return {
        "name": STAFF_COMMAND,
        "type": ApplicationCommandType.CHAT_INPUT,
        "description": "Staff: review and correct what the bot remembers in this server",
        # Discord's permission strings are decimal bit sets.
        "default_member_permissions": str(Permissions.MANAGE_GUILD.value),
        "contexts": [InteractionContextType.GUILD],
        "integration_types": [ApplicationIntegrationType.GUILD_INSTALL],
        "options": [
            _subcommand(
                USER,
                "Show everything the bot keeps about a member",
                [
                    {
                        "type": OptionType.USER,
                        "name": OPTION_MEMBER,
                        "description": "The member to review",
                        "required": True,
                    }
                ],
            ),
            _subcommand(
                FORGET_FACT,
                "Delete one fact about anyone, by its id",
                [
                    _string(
                        OPTION_ID, "The fact id, as listed by /memory-staff user", autocomplete=True
                    )
                ],
            ),
            _subcommand(
                RESTORE_FACT,
                "Make a member's demoted fact active again, so the bot recalls it",
                [
                    {
                        "type": OptionType.USER,
                        "name": OPTION_MEMBER,
                        "description": "The member the fact is about",
                        "required": True,
                    },
                    _string(
                        OPTION_ID,
                        "The fact id, listed [demoted] by /memory-staff user",
                        autocomplete=True,
                    ),
                ],
            ),
            _subcommand(
                PIN,
                "Pin a note the bot always keeps in mind here",
                [
                    {
                        **_string(
                            OPTION_WHERE, "Everywhere in this server, or only in this channel"
                        ),
                        "choices": [
                            {"name": "Whole server", "value": WHERE_GLOBAL},
                            {"name": "This channel", "value": WHERE_CHANNEL},
                        ],
                    },
                    _string(
                        OPTION_TEXT,
                        f"The note (up to {MAX_TEXT_LENGTH} characters)",
                        max_length=MAX_TEXT_LENGTH,
                    ),
                ],
            ),
            _subcommand(
                UNPIN,
                "Remove a pinned note, by its id",
                [_string(OPTION_ID, "The pin id", autocomplete=True)],
            ),
            _subcommand(
                QUARANTINE,
                "List messages in this channel the memory model kept failing on (not remembered)",
            ),
            _subcommand(
                HISTORY,
                "Show every change to one fact of this server, oldest first",
                [_string(OPTION_ID, "The fact id", autocomplete=True)],
            ),
            _subcommand(
                RESET_SUMMARY,
                "Clear this channel's running summary (the next batches start a new one)",
            ),
            _timezone_subcommand(),
            _persona_group(),
            _notes_group(),
            _channel_group(),
            backfill_group(),
            retention_group(),
            _subcommand(
                CONSENT,
                "Record every member (opt-out) or only those who ran /memory optin here (opt-in)",
                [
                    {
                        **_string(OPTION_MODE, "Who the bot records in this server"),
                        "choices": [
                            {"name": "Everyone, unless they opt out", "value": MODE_OPT_OUT},
                            {"name": "Only members who opt in", "value": MODE_OPT_IN},
                        ],
                    }
                ],
            ),
        ],
    }


def _channel_group() -> dict[str, Any]:
    """`/memory-staff channel ...`: whether the bot keeps what is said in a channel."""
    target = {
        "type": OptionType.CHANNEL,
        "name": OPTION_CHANNEL,
        "description": "The channel (this one when left out)",
        "required": False,
    }
    return {
        "type": OptionType.SUB_COMMAND_GROUP,
        "name": CHANNEL_GROUP,
        "description": "Whether the bot keeps what is said in a channel (it still answers there)",
        "options": [
            _subcommand(CHANNEL_OFF, "Keep nothing said in a channel from now on", [target]),
            _subcommand(CHANNEL_ON, "Keep what is said in a channel again", [target]),
            _subcommand(
                CHANNEL_STATUS, "Whether a channel's memory is on, and every channel off", [target]
            ),
            _subcommand(
                CHANNEL_FORGET,
                "Erase everything kept from a channel (asks you to confirm first)",
                [target],
            ),
        ],
    }


def _timezone_subcommand() -> dict[str, Any]:
    """`/memory-staff timezone [zone]`: the server's time zone, shown or set."""
    return _subcommand(
        TIMEZONE,
        "Show or set this server's time zone, for every date the bot reads and writes here",
        [
            _string(
                OPTION_ZONE,
                "An IANA time zone name, such as Europe/Paris or America/New_York (UTC resets)",
                max_length=MAX_ZONE_NAME_CHARS,
                required=False,
            )
        ],
    )


def _notes_group() -> dict[str, Any]:
    """`/memory-staff notes ...`: what the bot keeps in mind in this server's members' DMs."""
    return {
        "type": OptionType.SUB_COMMAND_GROUP,
        "name": NOTES_GROUP,
        "description": "Notes the bot keeps in mind in direct messages with this server's members",
        "options": [
            _subcommand(
                NOTES_SET,
                "Write this server's notes for direct messages (replaces them; about no member)",
                [
                    _string(
                        OPTION_TEXT,
                        f"The notes (up to {MAX_SERVER_NOTES_CHARS:,} characters)",
                        max_length=MAX_SERVER_NOTES_CHARS,
                    )
                ],
            ),
            _subcommand(NOTES_SHOW, "Show this server's notes for direct messages"),
            _subcommand(NOTES_CLEAR, "Delete this server's notes for direct messages"),
        ],
    }


def _persona_group() -> dict[str, Any]:
    """`/memory-staff persona ...`: the characters the bot answers as in this server."""
    persona_id = "The persona's id: lower-case letters, digits, - or _ (up to 32)"
    return {
        "type": OptionType.SUB_COMMAND_GROUP,
        "name": PERSONA_GROUP,
        "description": "Personas: characters the bot answers as, each with memories of its own",
        "options": [
            _subcommand(
                PERSONA_SET,
                "Create a persona, or change one (its memories stay with it)",
                [
                    _string(OPTION_ID, persona_id, max_length=32, autocomplete=True),
                    _string(
                        OPTION_NAME,
                        f"The name it goes by (up to {MAX_NAME_CHARS} characters)",
                        max_length=MAX_NAME_CHARS,
                    ),
                    _string(
                        OPTION_PROMPT,
                        f"Its system prompt, with {MEMORY_PLACEHOLDER} once where memory goes "
                        f"(up to {MAX_PROMPT_OPTION_LENGTH:,} characters)",
                        max_length=MAX_PROMPT_OPTION_LENGTH,
                    ),
                    {
                        **_string(
                            OPTION_WHERE,
                            "Where it answers (new: this channel; a change keeps where it was)",
                            required=False,
                        ),
                        "choices": [
                            {
                                "name": "This channel (added to where it answers)",
                                "value": WHERE_CHANNEL,
                            },
                            {"name": "The whole server", "value": WHERE_GLOBAL},
                        ],
                    },
                ],
            ),
            _subcommand(PERSONA_LIST, "List this server's personas and where each answers"),
            _subcommand(
                PERSONA_REMOVE,
                "Stop a persona answering anywhere (its memories are kept until purged)",
                [_string(OPTION_ID, "The persona's id", autocomplete=True)],
            ),
            _subcommand(
                PERSONA_PURGE,
                "Delete a removed persona and all it remembers (asks you to confirm first)",
                [_string(OPTION_ID, "The removed persona's id", autocomplete=True)],
            ),
            _subcommand(
                PERSONA_TEACH,
                "Teach a persona something it knows for everyone (about no member)",
                [
                    _string(OPTION_ID, "The persona's id", autocomplete=True),
                    _string(
                        OPTION_TEXT,
                        f"What it should know (up to {MAX_TEXT_LENGTH} characters)",
                        max_length=MAX_TEXT_LENGTH,
                    ),
                ],
            ),
        ],
    }


def _forgetme_command() -> dict[str, Any]:
    return {
        "name": FORGETME_COMMAND,
        "type": ApplicationCommandType.CHAT_INPUT,
        "description": "Erase everything the bot keeps about you (asks you to confirm first)",
        "default_member_permissions": None,
        "contexts": [InteractionContextType.GUILD, InteractionContextType.BOT_DM],
        "integration_types": [ApplicationIntegrationType.GUILD_INSTALL],
    }


def _ask_command() -> dict[str, Any]:
    return {
        "name": ASK_COMMAND,
        "type": ApplicationCommandType.CHAT_INPUT,
        "description": "Ask the bot a question; it answers in the channel, with what it remembers",
        "default_member_permissions": None,
        "contexts": [InteractionContextType.GUILD, InteractionContextType.BOT_DM],
        "integration_types": [ApplicationIntegrationType.GUILD_INSTALL],
        "options": [
            _string(OPTION_QUESTION, "Your question", max_length=MAX_QUESTION_LENGTH),
        ],
    }


def _string(
    name: str,
    description: str,
    *,
    max_length: int | None = None,
    autocomplete: bool = False,
    required: bool = True,
) -> dict[str, Any]:
    option: dict[str, Any] = {
        "type": OptionType.STRING,
        "name": name,
        "description": description,
        "required": required,
    }
    if max_length is not None:
        option["max_length"] = max_length
    if autocomplete:
        option["autocomplete"] = True
    return option
