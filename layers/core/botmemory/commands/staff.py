"""The staff commands (`/memory-staff ...`, Manage Server): a member's facts, forgetting,
restoring and tracing one fact, pins, quarantined batches, a channel's running summary."""

from __future__ import annotations

import logging
from typing import Any

from botmemory.clock import ttl_alive
from botmemory.commands import specs as spec
from botmemory.commands.context import CommandContext
from botmemory.commands.invocation import CommandError, Invocation, ephemeral_reply
from botmemory.commands.listing import MAX_LISTED, history_line, listing, quarantine_line, shown
from botmemory.memory.hot_tier import HotTier
from botmemory.records import FactHistory, FactStatus, HistoryActor, Pin
from botmemory.storage import keys
from botmemory.text import content_hash, normalized, scrub, short_id

log = logging.getLogger(__name__)

MAX_PINS_PER_SCOPE = 50


class StaffCommands:
    """What staff review and steer of what is kept in their server."""

    def __init__(self, context: CommandContext) -> None:
        self._context = context
        self._services = context.services

    def user(self, invocation: Invocation) -> dict[str, Any]:
        invocation.snowflake(spec.OPTION_MEMBER)
        return self._context.deferred(invocation, "staff_user")

    def quarantine(self, invocation: Invocation) -> dict[str, Any]:
        """Batches of this channel that failed even alone: consumed without facts, so staff
        can see what was not remembered and why."""
        now = self._services.clock.now_ms()
        records = [
            q
            for q in self._services.repository.quarantined(invocation.channel_id, MAX_LISTED)
            if ttl_alive(q.expires_at, now)
        ]
        if not records:
            return ephemeral_reply("Nothing in this channel was quarantined.")
        lines = [quarantine_line(q) for q in records]
        return ephemeral_reply(
            listing(
                f"Quarantined in this channel ({len(records)}), not remembered "
                "because the memory model kept failing on them:",
                lines,
            )
        )

    def reset_summary(self, invocation: Invocation) -> dict[str, Any]:
        """Clear the channel's rolling summary: a round already thinking over the old one
        cannot bring it back (its commit requires the summary it rewrote). The archived
        summaries stay searchable until they expire."""
        if not self._services.repository.clear_channel_summary(invocation.channel_id):
            return ephemeral_reply("This channel has no running summary.")
        log.info(
            "channel summary reset",
            extra={"channel_id": invocation.channel_id, "staff_id": invocation.user_id},
        )
        return ephemeral_reply(
            "This channel's running summary is cleared; the next batches start a new one. "
            "Earlier summaries stay searchable until they expire."
        )

    def _whose(self, invocation: Invocation, scope: str, user_id: str) -> str:
        """Whose a fact of this server is, as staff answers say it: `about <@id>`, with the
        persona that keeps it, if any."""
        lineage = keys.lineage_of(scope)
        if lineage is None:
            return f"about <@{user_id}>"
        known = {p.lineage_id: p for p in self._context.personas_here(invocation)}
        persona = known.get(lineage)
        name = f"{shown(persona.name)} (`{persona.persona_id}`)" if persona else "a persona"
        if user_id == keys.PERSONA_SUBJECT:
            return f"known to {name} for everyone"
        return f"about <@{user_id}>, as {name} knows them"

    def _pin_here(self, invocation: Invocation, pin_id: str) -> Pin | None:
        """A pin by id, only when it belongs to this server."""
        pin = self._services.repository.pin_by_id(pin_id.strip().lower())
        return pin if pin is not None and pin.scope == invocation.scope else None

    def forget_fact(self, invocation: Invocation) -> dict[str, Any]:
        fact = self._context.fact_here(invocation, invocation.text(spec.OPTION_ID))
        if fact is None:
            return ephemeral_reply("There is no fact with that id in this server.")
        self._context.delete_recorded([fact], HistoryActor.STAFF, invocation.user_id)
        whose = self._whose(invocation, fact.scope, fact.user_id)
        return ephemeral_reply(f"Deleted `{fact.fact_id}` {whose}: {shown(fact.text)}")

    def restore_fact(self, invocation: Invocation) -> dict[str, Any]:
        """A demoted fact of this server's member active again (botmemory.memory.hot_tier)."""
        member = invocation.snowflake(spec.OPTION_MEMBER)
        fact = self._context.fact_here(invocation, invocation.text(spec.OPTION_ID))
        if fact is None or fact.user_id != member:
            return ephemeral_reply(f"<@{member}> has no fact with that id in this server.")
        if fact.status != FactStatus.DEMOTED or not ttl_alive(
            fact.expires_at, self._services.clock.now_ms()
        ):
            return ephemeral_reply(
                f"`{fact.fact_id}` is not demoted: only a demoted fact can be restored."
            )
        if not self._hot_tier().restore(fact, invocation.user_id):
            return ephemeral_reply(
                f"`{fact.fact_id}` changed meanwhile (or its member is being erased): nothing "
                "was restored. `/memory-staff user` shows it as it is now."
            )
        return ephemeral_reply(
            f"Restored `{fact.fact_id}` about <@{fact.user_id}>: {shown(fact.text)}"
        )

    def _hot_tier(self) -> HotTier:
        services = self._services
        return HotTier(
            services.repository,
            services.settings,
            services.clock,
            services.opt_outs.hash_of,
            services.retention,
        )

    def history(self, invocation: Invocation) -> dict[str, Any]:
        """Every change to one fact of this server, oldest first: when, who, the texts."""
        fact_id = scrub(invocation.text(spec.OPTION_ID)).strip().lower()
        if not fact_id.isalnum() or len(fact_id) > 32:
            return ephemeral_reply("There is no fact with that id in this server.")
        now = self._services.clock.now_ms()
        fact = self._context.fact_here(invocation, fact_id)
        # Its history is in its scope's partition: the fact's, or (a fact since deleted) the
        # server's or one of its personas'.
        scopes = [fact.scope] if fact is not None else [invocation.scope]
        if fact is None:
            lineages = [p.lineage_id for p in self._context.personas_here(invocation)]
            scopes += [keys.persona_scope(invocation.scope, lineage) for lineage in lineages]
        entries: list[FactHistory] = []
        for scope in scopes:
            entries = [
                e
                for e in self._services.repository.history_of(scope, fact_id)
                if ttl_alive(e.expires_at, now)
            ]
            if entries:
                break
        if not entries:
            if fact is not None:
                return ephemeral_reply(f"No change to `{fact_id}` is on record.")
            return ephemeral_reply("There is no fact with that id in this server.")
        whose = self._whose(invocation, entries[0].scope, entries[0].user_id)
        return ephemeral_reply(
            listing(
                f"History of `{fact_id}` {whose}, oldest first:",
                [history_line(e) for e in entries],
            )
        )

    def pin(self, invocation: Invocation) -> dict[str, Any]:
        where = invocation.text(spec.OPTION_WHERE)
        if where not in (spec.WHERE_GLOBAL, spec.WHERE_CHANNEL):
            raise CommandError("Choose where the pin applies: global or channel.")
        text = self._context.checked_text(invocation.text(spec.OPTION_TEXT))
        if (
            len(self._services.repository.scope_pins(invocation.scope, MAX_PINS_PER_SCOPE))
            >= MAX_PINS_PER_SCOPE
        ):
            raise CommandError(
                f"This server already has {MAX_PINS_PER_SCOPE} pins; unpin one first."
            )
        now = self._services.clock.now_ms()
        target = "global" if where == spec.WHERE_GLOBAL else invocation.channel_id
        pin = Pin(
            pin_id=short_id(content_hash("pin", invocation.scope, target, normalized(text))),
            scope=invocation.scope,
            target=target,
            text=text,
            author_id=invocation.user_id,
            created_ms=now,
        )
        self._services.repository.put_pin(pin)
        place = "everywhere in this server" if target == "global" else "in this channel"
        return ephemeral_reply(f"Pinned `{pin.pin_id}` {place}: {shown(text)}")

    def unpin(self, invocation: Invocation) -> dict[str, Any]:
        pin = self._pin_here(invocation, invocation.text(spec.OPTION_ID))
        if pin is None:
            return ephemeral_reply("There is no pin with that id in this server.")
        self._services.repository.delete_pin(pin)
        return ephemeral_reply(f"Unpinned `{pin.pin_id}`: {shown(pin.text)}")

    # Autocomplete -------------------------------------------------------------------

    def demoted_choices(self, invocation: Invocation, typed: str) -> list[tuple[str, str]]:
        """What restore-fact offers: the chosen member's demoted facts here, or (no member
        chosen yet) the demoted fact whose id is typed."""
        member = invocation.options.get(spec.OPTION_MEMBER)
        if isinstance(member, str) and member.isdigit():
            now = self._services.clock.now_ms()
            facts = self._services.repository.all_facts(invocation.scope, member)
            demoted = [f for f in facts if ttl_alive(f.expires_at, now)]
        else:
            fact = self._context.fact_here(invocation, typed) if typed else None
            demoted = [fact] if fact is not None else []
        return [(f.fact_id, f.text) for f in demoted if f.status == FactStatus.DEMOTED]

    def pin_choices(self, invocation: Invocation) -> list[tuple[str, str]]:
        """What unpin's `id` offers: this server's pins."""
        return [
            (p.pin_id, p.text)
            for p in self._services.repository.scope_pins(invocation.scope, MAX_PINS_PER_SCOPE)
        ]
