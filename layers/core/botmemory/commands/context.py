"""What every command group shares (`CommandContext`): the services, the eraser and the
way to defer work; the checks on text a command stores, where a fact it writes is shown,
the personas of a server, a fact found by id, facts forgotten with their history; and the
confirm buttons (`confirmation`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.commands import specs as spec
from botmemory.commands.invocation import CommandError, Invocation, deferred_interaction
from botmemory.discord.interactions import (
    ButtonStyle,
    ComponentType,
    InteractionResponseType,
    MessageFlag,
)
from botmemory.memory import fact_history
from botmemory.memory.personas import MAX_PERSONAS_PER_SERVER
from botmemory.memory.visibility import Where, learned_where
from botmemory.people.erasure import Eraser
from botmemory.people.names import NameIndex, name_candidates
from botmemory.people.retention import Kept
from botmemory.recall.block import SECTION_HEADINGS
from botmemory.records import Fact, Forgotten, HistoryActor, Persona
from botmemory.services import MemoryServices
from botmemory.storage import keys
from botmemory.text import has_pings, markup_in, scrub

Deferrer = Callable[[dict[str, Any]], None]
# A mention of any kind, or a bare Discord id: text about no one names no one.
_MENTION_OR_ID = re.compile(r"<[@#][!&]?\d+>|(?<!\d)\d{15,20}(?!\d)")


class CommandContext:
    """What the member, staff and persona commands share: one per `Commands`."""

    def __init__(self, services: MemoryServices, defer: Deferrer) -> None:
        self.services = services
        self.defer = defer
        self.eraser = Eraser(
            services.repository,
            services.clock,
            services.opt_outs.hash_of,
            settle_ms=services.settings.lock_lease_seconds * 1000,
            lineages=services.personas.lineages_of,
        )

    def personas_here(self, invocation: Invocation) -> list[Persona]:
        """The personas whose memories live in this server: live ones (the server's, then
        the deployment's), then removed ones; one per lineage, at most
        MAX_PERSONAS_PER_SERVER. None in direct messages."""
        server, deployment = self.services.personas.of_server(invocation.guild_id)
        ordered = [p for p in server if p.active] + deployment + [p for p in server if not p.active]
        by_lineage: dict[str, Persona] = {}
        for persona in ordered:
            by_lineage.setdefault(persona.lineage_id, persona)
        return list(by_lineage.values())[:MAX_PERSONAS_PER_SERVER]

    def checked_text(self, raw: str, limit: int = spec.MAX_TEXT_LENGTH) -> str:
        """Text a command stores, scrubbed, or a refusal saying what to leave out."""
        text = scrub(raw)
        if not text:
            raise CommandError("That text is empty once invisible characters are removed.")
        if len(text) > limit:
            raise CommandError(f"Please keep it to {limit:,} characters (yours has {len(text):,}).")
        if has_pings(text):
            raise CommandError(
                "Please leave out mentions and @everyone/@here: I never store text that could ping people."
            )
        markup = markup_in(text, SECTION_HEADINGS)
        if markup is not None:
            raise CommandError(
                f"Please leave out {markup}: I store plain text, without markup such as "
                "<tags>, links, code blocks or headings."
            )
        return text

    def refuse_naming_members(
        self, invocation: Invocation, text: str, *, whose: str, learned: str
    ) -> None:
        """Refuse text that must be about no one (a persona's knowledge, notes for direct
        messages) when it names someone: a mention, a bare id, or a name one member of this
        server alone goes by (its name registry). `whose`: "A persona's knowledge is"."""
        if _MENTION_OR_ID.search(text):
            raise CommandError(f"{whose} about no one: please leave out mentions and ids.")
        # The registry read by key for the names the text could hold (never a fixed first
        # few thousand: a large server's member far down the registry is found too).
        registry = self.services.repository.names_at(invocation.scope, name_candidates([text]))
        if NameIndex(registry, {}).named_in(text):
            raise CommandError(
                f"That names a member of this server. {whose} about no one; {learned}."
            )

    def learned_here(self, invocation: Invocation, previous: Fact | None = None) -> Where:
        """Where a fact written by a command is shown (botmemory.memory.visibility): the channel
        the command was used in, public when @everyone can view it, added to where the same
        fact was learned before."""
        channel = invocation.channel_id
        public = invocation.guild_id is not None and self.services.repository.channel_is_public(
            invocation.guild_id, channel
        )
        return learned_where(channel, public).added_to(previous)

    def fact_here(self, invocation: Invocation, fact_id: str) -> Fact | None:
        """A fact by id, only when it belongs to this server (its personas' included)."""
        fact = self.services.repository.fact_by_id(fact_id.strip().lower())
        if fact is None or keys.server_scope_of(fact.scope) != invocation.scope:
            return None
        return fact

    def delete_recorded(self, facts: list[Fact], actor: HistoryActor, actor_id: str) -> None:
        """Forget facts: each deleted with its history entry and its forget tombstone, in
        one write per few facts. The tombstone keeps a consolidation round from bringing
        one back from words said before now (one thinking meanwhile included: its commit is
        conditioned on it); it lasts as long as those words can: the deployment's observation
        retention, which no recorded words outlive (a server's may have been longer when they
        were said). The history entries hold the texts: kept as long as the server keeps
        facts."""
        now = self.services.clock.now_ms()
        settings = self.services.settings
        entries = [
            fact_history.deleted(
                f,
                actor=actor,
                at_ms=now,
                retention_days=self.services.retention.days_of(f.scope, Kept.FACTS),
                actor_id=actor_id,
            )
            for f in facts
        ]
        until = epoch_seconds(now + settings.observation_retention_days * DAY_MS)
        tombstones = [
            Forgotten(
                scope=f.scope,
                user_id=f.user_id,
                fact_id=f.fact_id,
                forgotten_ms=now,
                expires_at=until,
            )
            for f in facts
        ]
        self.services.repository.delete_facts(facts, entries, tombstones)

    def deferred(self, invocation: Invocation, work: str) -> dict[str, Any]:
        """Hand `work` to deferred work and answer "thinking…" to the caller alone."""
        self.defer({"work": work, "interaction": deferred_interaction(invocation)})
        return {
            "type": InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE,
            "data": {"flags": MessageFlag.EPHEMERAL},
        }


def confirmation(label: str, confirm: str, cancel: str) -> list[dict[str, Any]]:
    """A danger button that does it and a button that cancels."""
    return [
        {
            "type": ComponentType.ACTION_ROW,
            "components": [
                {
                    "type": ComponentType.BUTTON,
                    "style": ButtonStyle.DANGER,
                    "label": label,
                    "custom_id": confirm,
                },
                {
                    "type": ComponentType.BUTTON,
                    "style": ButtonStyle.SECONDARY,
                    "label": "Cancel",
                    "custom_id": cancel,
                },
            ],
        }
    ]
