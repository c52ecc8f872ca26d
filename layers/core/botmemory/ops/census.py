"""The census of servers, once, when upgrading from a version that did not track them.

    python -m botmemory.ops.census            # what it would do: nothing is written
    python -m botmemory.ops.census --apply    # record it, and schedule the purges
        (TABLE_NAME, MEMORY_SERVER_PURGE_DAYS, and the bot token: DISCORD_BOT_TOKEN or
        DISCORD_BOT_TOKEN_SECRET, from the environment)

Before the servers' lifecycle was tracked (botmemory.people.server_removal), the relay did
not forward GUILD_DELETE and the deployment kept no list of the servers it knows, so a
server the bot was removed from back then still has its data, and a READY cannot reveal it
(it compares with that list, empty after the upgrade). The census compares two lists:

- the servers the table holds items of (one paginated Scan of keys, as
  `ops.purge_server` does: botmemory.storage.server_purge);
- the guilds the bot is in, from Discord's REST API (`GET /users/@me/guilds`, paged: the
  authoritative list, whatever the gateway missed; botmemory.discord.guilds).

With `--apply`, every guild the bot is in is recorded among the servers the deployment knows,
and every server holding items that the bot is not in has its purge scheduled
`MEMORY_SERVER_PURGE_DAYS` from now, exactly as a GUILD_DELETE would: the hourly
ServerPurgeFunction purges it by key when that is over, and the bot's return (its
GUILD_CREATE) cancels it. A server already scheduled keeps its date. Running it again
changes nothing more. Needs the table's Scan, GetItem and PutItem: the operator's rights,
not a function's. Exit codes: 0 done, 1 a configuration, Discord or AWS error (nothing is
written before both lists are read whole).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError

from botmemory.clock import DAY_MS, SystemClock
from botmemory.discord.errors import DiscordApiError, DiscordConfigError
from botmemory.discord.guilds import GuildsApi
from botmemory.discord.rest import api_base_from_environment, bot_token_from_environment
from botmemory.settings.config import ConfigError, get_settings
from botmemory.storage.repository import MemoryRepository, open_repository


@dataclass
class Census:
    """The two lists compared, and what applying them does."""

    bot_in: set[str]
    with_items: set[str]
    already_scheduled: list[str] = field(default_factory=list)
    to_schedule: list[str] = field(default_factory=list)  # items kept, the bot not there


def take_census(repository: MemoryRepository, bot_guilds: Callable[[], Iterable[str]]) -> Census:
    """Both lists read whole, compared; nothing written."""
    census = Census(bot_in=set(bot_guilds()), with_items=repository.servers_with_items())
    for guild in sorted(census.with_items - census.bot_in, key=int):
        if repository.server_purge_state(guild)[0] is not None:
            census.already_scheduled.append(guild)
        else:
            census.to_schedule.append(guild)
    return census


def apply_census(repository: MemoryRepository, census: Census, now_ms: int, days: int) -> None:
    """The bot's guilds known, the others' purges scheduled (module docstring)."""
    for guild in sorted(census.bot_in, key=int):
        repository.know_server(guild, now_ms)
    for guild in census.to_schedule:
        repository.schedule_server_purge(guild, now_ms, now_ms + days * DAY_MS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m botmemory.ops.census",
        description=(
            "Compare the servers the table holds data of with the guilds the bot is in; "
            "with --apply, schedule the purge of those the bot has left."
        ),
    )
    parser.add_argument("--apply", action="store_true", help="write (default: only report)")
    args = parser.parse_args(argv)
    try:
        settings = get_settings()
        repository = open_repository(settings.table_name)
        api = GuildsApi(bot_token_from_environment(), base_url=api_base_from_environment())
        try:
            census = take_census(repository, api.all_guild_ids)
        finally:
            api.close()
        print(_report(census, settings.server_purge_days, applied=args.apply))
        if args.apply:
            apply_census(repository, census, SystemClock().now_ms(), settings.server_purge_days)
    except (ConfigError, DiscordConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except DiscordApiError as exc:
        print(f"error: Discord refused the guild list: {exc}; nothing written", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError) as exc:
        print(f"error: AWS request failed: {exc}; run it again", file=sys.stderr)
        return 1
    return 0


def _report(census: Census, days: int, *, applied: bool) -> str:
    will = "scheduled" if applied else "would be scheduled (run with --apply)"
    lines = [
        f"the bot is in {len(census.bot_in)} servers; the table holds items of "
        f"{len(census.with_items)}",
        f"{len(census.to_schedule)} servers the bot is no longer in: purge {will} in {days} "
        "days (cancelled if the bot comes back)",
    ]
    lines += [f"  {guild}" for guild in census.to_schedule]
    if census.already_scheduled:
        lines.append(f"{len(census.already_scheduled)} already scheduled: their dates stay")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
