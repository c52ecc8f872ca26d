"""The backfill commands (`/memory-staff backfill start [channel] [days]`, `status`,
`cancel`, `on-join days`): a server's past imported by staff's choice
(botmemory.catchup.backfill), read by CatchUpFunction page by page; here it is only started,
shown and cancelled, and what the bot's joining the server again imports is chosen
(botmemory.catchup.on_join)."""

from __future__ import annotations

import logging
from typing import Any

from botmemory.catchup.backfill import DEFAULT_DAYS, MAX_DAYS, Backfiller, describe
from botmemory.catchup.on_join import describe_on_join
from botmemory.catchup.tasks import TaskQueue
from botmemory.commands import specs as spec
from botmemory.commands.context import CommandContext
from botmemory.commands.invocation import CommandError, Invocation, ephemeral_reply
from botmemory.storage.catchup import CatchUpStore

log = logging.getLogger(__name__)


class BackfillCommands:
    def __init__(self, context: CommandContext) -> None:
        self._services = context.services

    def _backfiller(self) -> Backfiller:
        url = self._services.settings.catchup_queue_url
        if not url:
            raise CommandError("Backfill is not set up on this bot (it has no catch-up queue).")
        repository = self._services.repository
        return Backfiller(CatchUpStore(repository.client, repository.table_name), TaskQueue(url))

    @staticmethod
    def _guild(invocation: Invocation) -> str:
        if invocation.guild_id is None:  # staff commands are for servers (`is_staff`)
            raise CommandError("This command works in a server only.")
        return invocation.guild_id

    def start(self, invocation: Invocation) -> dict[str, Any]:
        guild = self._guild(invocation)
        days = invocation.options.get(spec.OPTION_DAYS, DEFAULT_DAYS)
        if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= MAX_DAYS:
            raise CommandError(f"Days go from 1 to {MAX_DAYS}.")
        channel = invocation.options.get(spec.OPTION_CHANNEL)
        if channel is not None and (
            not isinstance(channel, str)
            or not channel.isdigit()
            or len(channel) > 20
            or not self._services.repository.channel_of_guild(guild, channel)
        ):
            raise CommandError("That is not a channel of this server that I know of.")
        now = self._services.clock.now_ms()
        started = self._backfiller().start(guild, channel, days, now)
        log.info(
            "backfill asked",
            extra={"started": started.started, "channels": started.run.channels, "days": days},
        )
        if not started.started:
            return ephemeral_reply(
                "A backfill is already under way here; one runs at a time. " + describe(started.run)
            )
        where = f"<#{channel}>" if channel else f"{started.run.channels} channels"
        return ephemeral_reply(
            f"Backfill started: the last {started.run.days} days of {where}, at most "
            f"{started.run.cap:,} messages, with every memory rule of this server (channels "
            "with memory off, consent, paused and opted-out members, what was erased). "
            "`/memory-staff backfill status` shows how far it is; `cancel` stops it."
        )

    def status(self, invocation: Invocation) -> dict[str, Any]:
        guild = self._guild(invocation)
        run = self._backfiller().status(guild)
        own = self._services.repository.guild_controls(guild).backfill_on_join_days
        on_join = describe_on_join(own, self._services.settings)
        if run is None:
            return ephemeral_reply(f"No backfill has run in this server. {on_join}")
        return ephemeral_reply(f"{describe(run)} {on_join}")

    def on_join(self, invocation: Invocation) -> dict[str, Any]:
        """The days the bot's joining this server again imports (0: never). Staff run it
        with the bot here, so it is for a removal and a return within the purge's grace
        period (which keeps this choice with the server's other items)."""
        guild = self._guild(invocation)
        days = invocation.options.get(spec.OPTION_DAYS)
        if not isinstance(days, int) or isinstance(days, bool) or not 0 <= days <= MAX_DAYS:
            raise CommandError(f"Days go from 0 (never) to {MAX_DAYS}.")
        now = self._services.clock.now_ms()
        self._services.repository.set_backfill_on_join(
            guild, days, staff_id=invocation.user_id, now_ms=now
        )
        log.info("backfill on join set", extra={"days": days})
        return ephemeral_reply(
            describe_on_join(days, self._services.settings)
            + " This matters if the bot is removed and added back within "
            f"{self._services.settings.server_purge_days} days (after that, what it kept of "
            "this server, this choice included, is purged); nothing is read now."
        )

    def cancel(self, invocation: Invocation) -> dict[str, Any]:
        run = self._backfiller().cancel(self._guild(invocation))
        if run is None:
            return ephemeral_reply("No backfill is under way here.")
        return ephemeral_reply(
            f"Backfill cancelled after {run.messages:,} messages; what it imported is kept."
        )
