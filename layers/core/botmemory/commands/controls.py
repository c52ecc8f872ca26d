"""Members' and staff's controls over what is kept (botmemory.people.controls):

    /memory-staff channel off | on | status | forget [channel]   a channel's memory switch
    /memory-staff consent opt-out | opt-in                       who the server records
    /memory privacy                                              what is kept, and the controls
    /memory pause <duration>                                     not recorded for a while
    /memory forget-recent <minutes>                              what they said lately, erased
    /memory export                                               everything kept, to their DMs

A switch reaches every container within `CACHE_MS` (a minute); the container that ran the
command knows it at once. `channel forget` asks to confirm, then erases in deferred work
(botmemory.people.channel_erasure), from a checkpoint when it runs short of time.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from botmemory.clock import DAY_MS
from botmemory.commands import specs as spec
from botmemory.commands.context import CommandContext, confirmation
from botmemory.commands.invocation import (
    CommandError,
    Invocation,
    deferred_interaction,
    ephemeral_reply,
    webhook_edit,
)
from botmemory.commands.retention import describe, leavers_line
from botmemory.discord.interactions import InteractionResponseType, MessageFlag
from botmemory.people.channel_erasure import erase_channel
from botmemory.people.optout import CACHE_MS
from botmemory.people.recent_erasure import RecentErasure, erase_recent
from botmemory.people.retention import Retention

log = logging.getLogger(__name__)

CONFIRM_CHANNEL_FORGET = "channelforget:confirm:"
CANCEL_CHANNEL_FORGET = "channelforget:cancel"
CHANNEL_FORGET_WORK = "channel_forget"
FORGET_RECENT_WORK = "forget_recent"
# One export a day per member (an unfinished one goes on whenever they ask).
EXPORT_EVERY_MS = DAY_MS
# How a duration is typed: 30m, 2h, 3d (one unit).
_DURATION = re.compile(r"\s*(-?\d{1,9})\s*([mhd])\s*", re.IGNORECASE)
_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": DAY_MS}
RESUME = "off"
EFFECT = f"within {CACHE_MS // 60_000} minute"


class ControlCommands:
    """The handlers of the controls; `finish` does their deferred work."""

    def __init__(self, context: CommandContext) -> None:
        self._context = context
        self._services = context.services

    def _gate_forgets(self, guild_id: str | None = None) -> None:
        """This container knows a switch at once (others within the cache's minute)."""
        self._services.recorder.gate.forget(guild_id)

    # A channel's memory -----------------------------------------------------------------

    def _target(self, invocation: Invocation) -> str:
        channel = invocation.options.get(spec.OPTION_CHANNEL)
        if channel is None:
            return invocation.channel_id
        if not isinstance(channel, str) or not channel.isdigit() or len(channel) > 20:
            raise CommandError("Please choose a channel of this server.")
        return channel

    def channel_off(self, invocation: Invocation) -> dict[str, Any]:
        return self._switch(invocation, off=True)

    def channel_on(self, invocation: Invocation) -> dict[str, Any]:
        return self._switch(invocation, off=False)

    def _switch(self, invocation: Invocation, *, off: bool) -> dict[str, Any]:
        assert invocation.guild_id is not None  # nosec B101 # staff commands run in servers only
        channel = self._target(invocation)
        changed = self._services.repository.set_channel_memory(
            invocation.guild_id,
            channel,
            off=off,
            staff_id=invocation.user_id,
            now_ms=self._services.clock.now_ms(),
        )
        self._gate_forgets(invocation.guild_id)
        log.info(
            "channel memory switched",
            extra={"channel_id": channel, "off": off, "changed": changed},
        )
        if off:
            if not changed:
                return ephemeral_reply(f"Memory is already off in <#{channel}>.")
            return ephemeral_reply(
                f"Memory is off in <#{channel}> ({EFFECT}): nothing said there from now on is "
                "kept, my answers included; I still answer there from what I may show there. "
                "What was kept before stays until `/memory-staff channel forget`."
            )
        if not changed:
            return ephemeral_reply(f"Memory is already on in <#{channel}>.")
        return ephemeral_reply(f"Memory is on again in <#{channel}> ({EFFECT}).")

    def channel_status(self, invocation: Invocation) -> dict[str, Any]:
        assert invocation.guild_id is not None  # nosec B101 # staff commands run in servers only
        channel = self._target(invocation)
        controls = self._services.repository.guild_controls(invocation.guild_id)
        state = "off" if channel in controls.off_channels else "on"
        off = sorted(controls.off_channels)
        listed = ", ".join(f"<#{c}>" for c in off[:50]) or "none"
        more = f" and {len(off) - 50} more" if len(off) > 50 else ""
        mode = (
            "opt-in (only members who ran `/memory optin` here)" if controls.opt_in else "opt-out"
        )
        return ephemeral_reply(
            f"Memory is {state} in <#{channel}>. Channels with memory off: {listed}{more}. "
            f"Consent: {mode}."
        )

    def _own_channel(self, invocation: Invocation, channel: str) -> None:
        """Refuse a channel this server does not have (erasing is by channel id)."""
        guild = invocation.guild_id
        if guild is None or not self._services.repository.channel_of_guild(guild, channel):
            raise CommandError("That is not a channel of this server that I know of.")

    def channel_forget(self, invocation: Invocation) -> dict[str, Any]:
        channel = self._target(invocation)
        self._own_channel(invocation, channel)
        return ephemeral_reply(
            f"This erases everything I kept from <#{channel}>: its recorded messages, reactions "
            "and my answers, its summaries and episodes, the facts learned only there, and "
            "their search entries. It cannot be undone.",
            components=confirmation(
                "Erase this channel's memory",
                f"{CONFIRM_CHANNEL_FORGET}{channel}",
                CANCEL_CHANNEL_FORGET,
            ),
        )

    def confirm_channel_forget(self, invocation: Invocation) -> dict[str, Any]:
        """The confirm button: staff rights checked again, the erasure deferred."""
        if not invocation.is_staff:
            raise CommandError(
                "Only members with the Manage Server permission can use this command."
            )
        channel = invocation.custom_id.removeprefix(CONFIRM_CHANNEL_FORGET)
        if not channel.isdigit() or len(channel) > 20:
            return ephemeral_reply("That button has expired.")
        self._own_channel(invocation, channel)
        self._context.defer(
            {
                "work": CHANNEL_FORGET_WORK,
                "channel": channel,
                "interaction": deferred_interaction(invocation),
                "failed": "I could not finish erasing this channel's memory; run it again.",
            }
        )
        return {"type": InteractionResponseType.DEFERRED_UPDATE_MESSAGE}

    def finish_channel_forget(
        self,
        job: dict[str, Any],
        invocation: Invocation,
        time_left_ms: Callable[[], int] | None,
    ) -> dict[str, Any]:
        guild = invocation.guild_id
        channel = str(job.get("channel", ""))
        if guild is None or not channel.isdigit():
            return webhook_edit("Sorry, I lost track of that request.", components=[])
        run = erase_channel(
            self._services.repository,
            guild,
            channel,
            self._services.personas.lineages_of(guild),
            checkpoint=job.get("checkpoint"),
            time_left_ms=time_left_ms,
        )
        if not run.finished:
            self._context.defer({**job, "checkpoint": run.to_json()})
            return webhook_edit(
                f"Still erasing <#{channel}>'s memory; so far {run.summary()}.", components=[]
            )
        log.info(
            "channel memory erased",
            extra={"channel_id": channel, "items": run.items, "facts": run.facts},
        )
        return webhook_edit(
            f"Erased what I kept from <#{channel}>: {run.summary()}.", components=[]
        )

    # Consent ----------------------------------------------------------------------------

    def consent(self, invocation: Invocation) -> dict[str, Any]:
        assert invocation.guild_id is not None  # nosec B101 # staff commands run in servers only
        mode = invocation.text(spec.OPTION_MODE)
        if mode not in (spec.MODE_OPT_IN, spec.MODE_OPT_OUT):
            raise CommandError("Choose who I record here: opt-out or opt-in.")
        self._services.repository.set_consent_mode(
            invocation.guild_id,
            opt_in=mode == spec.MODE_OPT_IN,
            staff_id=invocation.user_id,
            now_ms=self._services.clock.now_ms(),
        )
        self._gate_forgets(invocation.guild_id)
        if mode == spec.MODE_OPT_IN:
            return ephemeral_reply(
                f"Opt-in ({EFFECT}): I record only members who run `/memory optin` in this "
                "server; what others say is not kept. What was kept before stays until they "
                "erase it (`/forgetme`) or its retention ends."
            )
        return ephemeral_reply(
            f"Opt-out ({EFFECT}): I record every member here except those who opt out "
            "(`/memory optout`) or pause (`/memory pause`)."
        )

    def agree_here(self, invocation: Invocation) -> None:
        """`/memory optin` in a server: the member agrees to be recorded there (what an
        opt-in server asks for)."""
        if invocation.guild_id is None:
            return
        self._services.repository.set_consented(
            invocation.guild_id,
            self._services.opt_outs.hash_of(invocation.user_id),
            agreed=True,
            now_ms=self._services.clock.now_ms(),
        )
        self._gate_forgets(invocation.guild_id)

    # What members are told, and their pause ---------------------------------------------

    def privacy(self, invocation: Invocation) -> dict[str, Any]:
        settings = self._services.settings
        lines = ["**What I keep, and your controls**"]
        if invocation.guild_id is not None:
            controls = self._services.repository.guild_controls(invocation.guild_id)
            here = (
                "Memory is off in this channel: nothing said here is kept."
                if invocation.channel_id in controls.off_channels
                else "Memory is on in this channel."
            )
            who = (
                "This server is opt-in: I record only members who ran `/memory optin` here."
                if controls.opt_in
                else "This server is opt-out: I record every member unless they opt out."
            )
            retention = Retention.of(settings, controls.retention)
            lines += [
                here,
                who,
                f"**For how long, here:** {describe(retention, Retention.deployment(settings))}"
                f", lately-notes {settings.short_term_hours} hours. "
                + leavers_line(settings.guild_members_intent, controls.leavers_days),
            ]
        else:
            lines.append(
                f"**For how long:** recorded messages {settings.observation_retention_days} "
                f"days, facts {settings.fact_retention_days} days, summaries "
                f"{settings.episode_retention_days} days, lately-notes "
                f"{settings.short_term_hours} hours (each server's staff may keep them shorter)."
            )
        until = self._services.recorder.gate.paused_until(invocation.user_id)
        if until is not None:
            lines.append(f"You paused my memory until <t:{until // 1000}:f>.")
        lines += [
            "**Kept:** what members say and react with (recorded messages), the bot's answers, "
            "facts about members learned from them, short summaries of each channel's "
            "conversation, and a few hours' note of what each member did lately in public "
            "channels.",
            "**Where shown:** a fact or a message is shown only where it was said, or in a "
            "channel everyone here can see; never what was said in a private channel "
            "elsewhere. Your facts are shown to you (`/memory show`) and to this server's staff "
            "(Manage Server).",
            "**Your controls:** `/memory show` (see), `/memory export` (everything, as files "
            "in a DM), `/memory forget` (one fact), `/memory forget-recent` (your last "
            "minutes), `/memory pause` (stop recording you for a while), `/memory optout` "
            "(stop and erase), `/forgetme` (erase everything), `/memory optin` (record you "
            "again).",
        ]
        return ephemeral_reply("\n".join(lines))

    def pause(self, invocation: Invocation) -> dict[str, Any]:
        raw = invocation.text(spec.OPTION_DURATION)
        person = self._services.opt_outs.hash_of(invocation.user_id)
        if raw.strip().lower() == RESUME:
            self._services.repository.unpause(person)
            self._gate_forgets()
            return ephemeral_reply(f"Resumed ({EFFECT}): I may record what you say again.")
        duration_ms = pause_ms(raw)
        until = self._services.clock.now_ms() + duration_ms
        self._services.repository.pause(person, until)
        self._gate_forgets()
        return ephemeral_reply(
            f"Paused until <t:{until // 1000}:f> ({EFFECT}), in every server and in DMs: "
            "nothing you say is kept, and my answers to you say so. "
            f"`/memory pause {RESUME}` resumes sooner."
        )

    def forget_recent(self, invocation: Invocation) -> dict[str, Any]:
        minutes = invocation.options.get(spec.OPTION_MINUTES)
        if isinstance(minutes, str) and minutes.strip().lstrip("-").isdigit():
            minutes = int(minutes)
        if not isinstance(minutes, int) or isinstance(minutes, bool):
            raise CommandError("Please give how many minutes back, as a whole number.")
        if not 1 <= minutes <= spec.MAX_FORGET_RECENT_MINUTES:
            raise CommandError(
                f"Please give between 1 and {spec.MAX_FORGET_RECENT_MINUTES:,} minutes (a week); "
                "`/forgetme` erases everything."
            )
        now = self._services.clock.now_ms()
        run = RecentErasure(since_ms=now - minutes * 60_000, started_ms=now)
        self._context.defer(
            {
                "work": FORGET_RECENT_WORK,
                "interaction": deferred_interaction(invocation),
                "erasure": run.to_json(),
                "failed": "I could not finish erasing what you said lately; run it again.",
            }
        )
        return {
            "type": InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE,
            "data": {"flags": MessageFlag.EPHEMERAL},
        }

    def finish_forget_recent(
        self,
        job: dict[str, Any],
        invocation: Invocation,
        time_left_ms: Callable[[], int] | None,
    ) -> dict[str, Any]:
        services = self._services
        run = erase_recent(
            services.repository,
            invocation.user_id,
            services.opt_outs.hash_of(invocation.user_id),
            services.personas.lineages_of,
            RecentErasure.from_json(dict(job.get("erasure") or {})),
            now_ms=services.clock.now_ms,
            settle_ms=services.settings.lock_lease_seconds * 1000,
            time_left_ms=time_left_ms,
        )
        if not run.finished:
            self._context.defer({**job, "erasure": run.to_json()})
            return webhook_edit(f"Still erasing; so far {run.summary()}.")
        since = run.since_ms // 1000
        return webhook_edit(
            f"Erased what you said since <t:{since}:t>, everywhere: {run.summary()}."
        )

    def export(
        self, invocation: Invocation, ask: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Hand the export to AnswerFunction (botmemory.answering.exports), which alone may
        send direct messages; rate-limited, an unfinished one resumed."""
        services = self._services
        person = services.opt_outs.hash_of(invocation.user_id)
        cursor = services.repository.export_cursor(person)
        now = services.clock.now_ms()
        if cursor is None and not services.repository.export_allowed(person, now, EXPORT_EVERY_MS):
            raise CommandError(
                "You asked for an export less than a day ago: one a day. It is in your direct "
                "messages."
            )
        interaction = deferred_interaction(invocation)
        ask(
            {
                "export": {
                    "user_id": invocation.user_id,
                    "interaction": {k: interaction[k] for k in ("id", "token", "application_id")},
                    "cursor": cursor,
                }
            }
        )
        return {
            "type": InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE,
            "data": {"flags": MessageFlag.EPHEMERAL},
        }


def pause_ms(raw: str) -> int:
    """A pause's length typed as 30m, 2h or 3d, within MAX_PAUSE_DAYS; CommandError else."""
    match = _DURATION.fullmatch(raw)
    if match is None:
        raise CommandError(
            "Please give a duration such as `30m`, `2h` or `3d` (or `off` to resume)."
        )
    amount, unit = int(match.group(1)), match.group(2).lower()
    if amount <= 0:
        raise CommandError("A pause must last at least a minute.")
    duration = amount * _UNIT_MS[unit]
    if duration > spec.MAX_PAUSE_DAYS * DAY_MS:
        raise CommandError(
            f"A pause lasts at most {spec.MAX_PAUSE_DAYS} days; `/memory optout` stops "
            "recording you for good."
        )
    return duration
