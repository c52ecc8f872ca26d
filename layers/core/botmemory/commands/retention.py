"""How long this server keeps memory (botmemory.people.retention):

    /memory-staff retention facts | messages | episodes <days>   shorten (or restore) one kind
    /memory-staff retention leavers <days>                       members who left, erased later
    /memory-staff retention status                               this server's and the maximums

Staff may shorten each kind, never lengthen it past the deployment's setting (the maximum):
a longer value is refused, naming the maximum; the maximum itself restores the deployment's.
Recall and what is written here follow a change within the controls' minute (at once in the
container that ran the command); what was stored before is brought in line by the
background job (botmemory.people.retention_job) within about an hour.

`leavers`: a member who leaves the server is erased from it (that server only) the given days
later, once Discord confirms they are gone (botmemory.people.departures); 0, the default,
never. Only with the deployment's GUILD_MEMBERS intent: without it Discord never says who
left, and the command says so.
"""

from __future__ import annotations

import logging
from typing import Any

from botmemory.commands import specs as spec
from botmemory.commands.context import CommandContext
from botmemory.commands.invocation import CommandError, Invocation, ephemeral_reply
from botmemory.people.optout import CACHE_MS
from botmemory.people.retention import Kept, Retention

log = logging.getLogger(__name__)

_WHAT = {Kept.FACTS: "facts", Kept.MESSAGES: "recorded messages", Kept.EPISODES: "summaries"}


def describe(retention: Retention, most: Retention) -> str:
    """One line: each kind's days here, and the maximum where it is shorter."""
    parts = []
    for kind in Kept:
        days = retention.days(kind)
        note = f" (deployment: {most.days(kind)})" if days < most.days(kind) else ""
        parts.append(f"{_WHAT[kind]} {days} days{note}")
    return ", ".join(parts)


class RetentionCommands:
    def __init__(self, context: CommandContext) -> None:
        self._services = context.services

    def _current(self, guild_id: str) -> Retention:
        chosen = self._services.repository.guild_controls(guild_id).retention
        return Retention.of(self._services.settings, chosen)

    def status(self, invocation: Invocation) -> dict[str, Any]:
        assert invocation.guild_id is not None  # nosec B101 # staff commands run in servers only
        settings = self._services.settings
        controls = self._services.repository.guild_controls(invocation.guild_id)
        kept = describe(Retention.of(settings, controls.retention), Retention.deployment(settings))
        return ephemeral_reply(
            f"This server keeps {kept}. Staff may shorten each with `/memory-staff retention "
            f"facts|messages|episodes <days>`, up to the deployment's. {leavers_line(settings.guild_members_intent, controls.leavers_days)}"
        )

    def leavers(self, invocation: Invocation) -> dict[str, Any]:
        assert invocation.guild_id is not None  # nosec B101 # staff commands run in servers only
        if not self._services.settings.guild_members_intent:
            return ephemeral_reply(
                "Not available on this bot: it does not have Discord's GUILD_MEMBERS intent, "
                "so it is never told who leaves. Members who leave can still erase themselves "
                "(`/forgetme`), and staff can forget their facts."
            )
        value = invocation.options.get(spec.OPTION_DAYS)
        days = 0 if value in (0, "0") else _days(value)
        if days > spec.MAX_LEAVERS_DAYS:
            raise CommandError(f"Choose 0 to {spec.MAX_LEAVERS_DAYS} days (0: never).")
        self._services.repository.set_leavers_days(
            invocation.guild_id,
            days,
            staff_id=invocation.user_id,
            now_ms=self._services.clock.now_ms(),
        )
        self._services.recorder.gate.forget(invocation.guild_id)
        log.info("leavers' grace period set", extra={"days": days})
        return ephemeral_reply(leavers_line(True, days))

    def set_days(self, invocation: Invocation) -> dict[str, Any]:
        assert invocation.guild_id is not None  # nosec B101 # staff commands run in servers only
        kind = Kept(invocation.subcommand)
        days = _days(invocation.options.get(spec.OPTION_DAYS))
        settings = self._services.settings
        most = Retention.deployment(settings)
        if days > most.days(kind):
            raise CommandError(
                f"This deployment keeps {_WHAT[kind]} at most {most.days(kind)} days; a server "
                f"may keep them shorter, not longer. Choose 1 to {most.days(kind)}."
            )
        guild = invocation.guild_id
        before = self._current(guild)
        after = Retention.of(settings, {**before.shortened(settings), kind.value: days})
        now = self._services.clock.now_ms()
        self._services.repository.set_server_retention(
            guild, after.shortened(settings), staff_id=invocation.user_id, now_ms=now
        )
        if days < before.days(kind):
            # Once every container writes with the new expiry, one pass brings the rest in.
            self._services.repository.schedule_retention_run(guild, now + CACHE_MS)
        self._services.recorder.gate.forget(guild)
        log.info(
            "server retention set",
            extra={"kind": kind.value, "days": days, "before": before.days(kind)},
        )
        return ephemeral_reply(
            f"This server now keeps {_WHAT[kind]} {days} days. Recall shows nothing older "
            f"and what is written here expires by it (within {CACHE_MS // 60_000} minute); "
            "what was stored before is brought in line within about an hour. Now: "
            f"{describe(after, most)}."
        )


def leavers_line(intent: bool, days: int) -> str:
    """What happens to what members who leave said here, in one sentence."""
    if not intent:
        return "Members who leave are not erased on their own (this bot is not told who leaves)."
    if days <= 0:
        return "Members who leave are not erased on their own (`/memory-staff retention leavers`)."
    return (
        f"A member who leaves is erased from this server {days} days later, once Discord "
        "confirms they are gone (not if they came back)."
    )


def _days(value: object) -> int:
    """A whole number of days as Discord sends it (a forged request may send anything)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 3650:
        raise CommandError("Please give a whole number of days, 1 or more.")
    return value
