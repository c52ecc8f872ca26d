"""The time zone command (`/memory-staff timezone [zone]`): the server's zone, shown or set.
Every date the bot reads and writes for the server is in it (botmemory.when): the memory
model's batch, the memory block and the answer prompt. UTC until staff choose one."""

from __future__ import annotations

import logging
from typing import Any

from botmemory.commands import specs as spec
from botmemory.commands.context import CommandContext
from botmemory.commands.invocation import CommandError, Invocation, ephemeral_reply
from botmemory.commands.listing import shown
from botmemory.when.zones import DEFAULT_ZONE, UnknownZone, today_line, zone_name

log = logging.getLogger(__name__)


class ZoneCommands:
    """The server's time zone, as staff see and set it."""

    def __init__(self, context: CommandContext) -> None:
        self._services = context.services

    def timezone(self, invocation: Invocation) -> dict[str, Any]:
        if invocation.guild_id is None:  # staff commands are for servers (`is_staff`)
            raise CommandError("This command works in a server only.")
        repository, now = self._services.repository, self._services.clock.now_ms()
        typed = invocation.options.get(spec.OPTION_ZONE)
        if not isinstance(typed, str) or not typed.strip():
            zone = repository.server_zone(invocation.scope) or DEFAULT_ZONE
            return ephemeral_reply(
                f"This server's time zone is `{zone}`: it is {today_line(now, zone)}. "
                "`/memory-staff timezone zone` changes it."
            )
        try:
            zone = zone_name(typed)
        except UnknownZone:
            # Nothing typed is echoed raw: `shown` quotes it as data.
            return ephemeral_reply(
                f"{shown(typed[:80])} is not a time zone I know: give an IANA name such as "
                "`Europe/Paris`, `America/New_York` or `UTC`. Nothing was changed."
            )
        repository.put_server_zone(invocation.scope, zone, now)
        log.info(
            "time zone set",
            extra={"guild_id": invocation.guild_id, "staff_id": invocation.user_id, "zone": zone},
        )
        return ephemeral_reply(
            f"This server's time zone is now `{zone}`: it is {today_line(now, zone)}. "
            "Dates the bot reads and writes here from now on are in it."
        )
