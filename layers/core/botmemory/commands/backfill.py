"""The backfill commands (`/memory-staff backfill start [channel] [days]`, `status`,
`cancel`): a server's past imported by staff's choice (botmemory.catchup.backfill), read by
CatchUpFunction page by page; here it is only started, shown and cancelled."""

from __future__ import annotations

import logging
from typing import Any

from botmemory.catchup.backfill import DEFAULT_DAYS, MAX_DAYS, Backfiller, describe
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
        run = self._backfiller().status(self._guild(invocation))
        if run is None:
            return ephemeral_reply("No backfill has run in this server.")
        return ephemeral_reply(describe(run))

    def cancel(self, invocation: Invocation) -> dict[str, Any]:
        run = self._backfiller().cancel(self._guild(invocation))
        if run is None:
            return ephemeral_reply("No backfill is under way here.")
        return ephemeral_reply(
            f"Backfill cancelled after {run.messages:,} messages; what it imported is kept."
        )
