"""Register the bot's slash commands with Discord, and say what changed.

    python -m botmemory.ops.register [--guild GUILD_ID] [--dry-run]

Reads `DISCORD_APPLICATION_ID`, the bot token (`DISCORD_BOT_TOKEN`, or the Secrets
Manager secret named by `DISCORD_BOT_TOKEN_SECRET`, not both) and optionally `DISCORD_API_BASE`.
Global registration by default; `--guild` registers in one server, which is instant and
handy while developing. `--dry-run` fetches what Discord holds and prints what would
change, without sending anything.

Exit status: 0 done, 1 Discord refused or could not be reached, 2 missing configuration.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from botmemory.commands.specs import GLOBAL_ONLY_FIELDS, command_definitions
from botmemory.discord.errors import DiscordApiError, DiscordConfigError
from botmemory.discord.interactions import ApplicationCommandType
from botmemory.discord.rest import DiscordApi, api_base_from_environment, bot_token_from_environment

APPLICATION_ID_ENV = "DISCORD_APPLICATION_ID"
_SNOWFLAKE = re.compile(r"^[0-9]{15,21}$")

# What Discord assumes for a field left out, so "left out" and "sent as the default" compare
# equal. Fields outside these tables (ids, versions, localizations) are Discord's own.
_COMMAND_DEFAULTS: dict[str, Any] = {
    "type": ApplicationCommandType.CHAT_INPUT,
    "description": "",
    "options": [],
    "default_member_permissions": None,
    "nsfw": False,
}
_OPTION_DEFAULTS: dict[str, Any] = {
    "type": None,
    "name": None,
    "description": "",
    "required": False,
    "autocomplete": False,
    "choices": [],
    "options": [],
    "channel_types": [],
    "min_value": None,
    "max_value": None,
    "min_length": None,
    "max_length": None,
}


@dataclass
class CommandChanges:
    """Names of commands, by what a bulk overwrite does (or would do) to them."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def has_changes(self) -> bool:
        return bool(self.added or self.updated or self.removed)


def diff_commands(current: list[dict[str, Any]], desired: list[dict[str, Any]]) -> CommandChanges:
    """Compare what Discord holds with what we send, matching commands as Discord does
    (by name and type) and comparing the fields we send, with Discord's defaults filled in."""
    held = {_identity(c): c for c in current}
    changes = CommandChanges()
    for command in desired:
        key = _identity(command)
        before = held.pop(key, None)
        if before is None:
            changes.added.append(key[1])
        elif _comparable(command, command) == _comparable(before, command):
            changes.unchanged.append(key[1])
        else:
            changes.updated.append(key[1])
    changes.removed = sorted(name for _, name in held)
    return changes


def _identity(command: dict[str, Any]) -> tuple[int, str]:
    kind = command.get("type") or ApplicationCommandType.CHAT_INPUT  # Discord's default
    return int(kind), str(command.get("name", ""))


def _comparable(command: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
    # The fields we send decide what is compared: a guild registration sends no `contexts`,
    # so whatever Discord reports for them there is not a change.
    fields = set(_COMMAND_DEFAULTS) | {f for f in GLOBAL_ONLY_FIELDS if f in sent}
    view = {f: _field(command, f, _COMMAND_DEFAULTS.get(f)) for f in sorted(fields)}
    view["options"] = [_comparable_option(o) for o in view["options"]]
    return view


def _comparable_option(option: dict[str, Any]) -> dict[str, Any]:
    view = {f: _field(option, f, default) for f, default in _OPTION_DEFAULTS.items()}
    view["options"] = [_comparable_option(o) for o in view["options"]]
    view["choices"] = [{"name": c.get("name"), "value": c.get("value")} for c in view["choices"]]
    return view


def _field(item: dict[str, Any], name: str, default: Any) -> Any:
    # Discord writes some unset fields as null and leaves others out: both mean the default.
    value = item.get(name)
    return default if value is None else value


def report(changes: CommandChanges, out: TextIO) -> None:
    for label, names in (
        ("added", changes.added),
        ("updated", changes.updated),
        ("removed", changes.removed),
        ("unchanged", changes.unchanged),
    ):
        for name in names:
            print(f"  {label:<10} /{name}", file=out)
    print(
        f"{len(changes.added)} added, {len(changes.updated)} updated, "
        f"{len(changes.removed)} removed, {len(changes.unchanged)} unchanged",
        file=out,
    )


def register(
    api: DiscordApi,
    application_id: str,
    *,
    guild_id: str | None = None,
    dry_run: bool = False,
    out: TextIO = sys.stdout,
) -> CommandChanges:
    """Fetch the current commands, overwrite them with ours (unless a dry run), report."""
    desired = command_definitions(guild_scoped=guild_id is not None)
    where = f"guild {guild_id}" if guild_id else "globally"
    current = api.list_commands(application_id, guild_id)
    changes = diff_commands(current, desired)
    if dry_run:
        print(f"Dry run: {len(desired)} commands {where}; nothing sent.", file=out)
    else:
        api.bulk_overwrite_commands(application_id, desired, guild_id)
        print(f"Registered {len(desired)} commands {where}.", file=out)
    report(changes, out)
    return changes


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="python -m botmemory.ops.register",
        description="Register the bot's slash commands with Discord and print what changed.",
    )
    parser.add_argument("--guild", metavar="GUILD_ID", help="register in this server only")
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would change; send nothing"
    )
    args = parser.parse_args(argv)

    application_id = env.get(APPLICATION_ID_ENV, "").strip()
    if not application_id:
        print(f"error: {APPLICATION_ID_ENV} is not set (the application's id).", file=err)
        return 2
    if not _SNOWFLAKE.match(application_id):
        print(f"error: {APPLICATION_ID_ENV} must be a Discord id (digits).", file=err)
        return 2
    if args.guild is not None and not _SNOWFLAKE.match(args.guild):
        print("error: --guild must be a Discord server id (digits).", file=err)
        return 2
    try:
        token = bot_token_from_environment(env)
    except DiscordConfigError as exc:
        print(f"error: {exc}", file=err)
        return 2

    with DiscordApi(token, base_url=api_base_from_environment(env)) as api:
        try:
            register(api, application_id, guild_id=args.guild, dry_run=args.dry_run, out=out)
        except DiscordApiError as exc:
            print(f"error: {exc}", file=err)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
