"""The persona commands (`/memory-staff persona set | list | remove | purge | teach`):
personas as configuration staff own, the purge of a removed one (asked, confirmed, then
done in deferred work) and the knowledge staff teach one."""

from __future__ import annotations

import logging
from typing import Any

from botmemory.clock import DAY_MS, day, epoch_seconds
from botmemory.commands import specs as spec
from botmemory.commands.context import CommandContext, confirmation
from botmemory.commands.invocation import (
    CommandError,
    Invocation,
    deferred_interaction,
    ephemeral_reply,
)
from botmemory.commands.listing import listing, shown
from botmemory.discord.interactions import InteractionResponseType
from botmemory.memory import fact_history
from botmemory.memory.personas import (
    MAX_PERSONAS_PER_SERVER,
    PersonaError,
    active_persona,
    check_name,
    check_persona_id,
    check_prompt,
    new_lineage,
)
from botmemory.people.retention import Kept
from botmemory.records import Fact, FactKind, FactSource, HistoryActor, MemoryScope, Persona
from botmemory.storage import keys
from botmemory.storage.personas import PersonaConflict, PersonaPurge
from botmemory.text import clip, content_hash, normalized, scrub, short_id

log = logging.getLogger(__name__)

# A purge's confirm button names the persona and the lineage the staff member saw:
# `persona-purge:confirm:{persona id}:{lineage id}` (at most 22 + 32 + 1 + 40 characters,
# inside Discord's 100 for a custom id).
CONFIRM_PURGE_PERSONA = "persona-purge:confirm:"
CANCEL_PURGE_PERSONA = "persona-purge:cancel"
PURGE_FAILED = (
    "I could not finish purging that persona. What is deleted stays deleted; run "
    "`/memory-staff persona purge` again to finish."
)


class PersonaCommands:
    """Staff's personas: set, listed, removed, purged and taught."""

    def __init__(self, context: CommandContext) -> None:
        self._context = context
        self._services = context.services

    def set_persona(self, invocation: Invocation) -> dict[str, Any]:
        """Create a server persona, or change one: a change keeps its lineage (its memories
        follow it); a channel (or the whole server) has at most one live server persona."""
        guild_id = _guild_of(invocation)
        try:
            persona_id = check_persona_id(_persona_id(invocation))
            name = check_name(scrub(invocation.text(spec.OPTION_NAME)))
            prompt = check_prompt(_prompt_text(invocation.text(spec.OPTION_PROMPT)))
        except PersonaError as error:
            raise CommandError(f"Nothing was changed: {error}.") from error
        where = invocation.options.get(spec.OPTION_WHERE)
        if where not in (None, spec.WHERE_CHANNEL, spec.WHERE_GLOBAL):
            raise CommandError("Choose where it answers: this channel or the whole server.")
        repository = self._services.repository
        server = repository.personas_of(guild_id)
        stored = next((p for p in server if p.persona_id == persona_id), None)
        live = stored if stored is not None and stored.active else None
        if (
            stored is not None
            and live is None
            and repository.persona_holds_memories(guild_id, stored.lineage_id)
        ):
            # A new persona under this id would leave the removed one's memories unreachable.
            raise CommandError(
                f"`{persona_id}` was removed and its memories are kept until it is purged: "
                f"`/memory-staff persona purge {persona_id}` first, or choose another id."
            )
        channels = _places(live, where, invocation.channel_id)
        others = [p for p in server if p.active and p.persona_id != persona_id]
        holder = _holder(others, channels)
        if holder is not None:
            place = f"<#{holder[1]}>" if holder[1] else "The whole server"
            raise CommandError(
                f"{place} already has a persona: {shown(holder[0].name)} "
                f"(`{holder[0].persona_id}`). Remove it or move it first; nothing was changed."
            )
        if live is None and len(others) >= MAX_PERSONAS_PER_SERVER:
            raise CommandError(
                f"This server already has {MAX_PERSONAS_PER_SERVER} personas; remove one first."
            )
        now = self._services.clock.now_ms()
        persona = Persona(
            persona_id=persona_id,
            lineage_id=live.lineage_id if live else new_lineage(guild_id, persona_id, now),
            name=name,
            prompt=prompt,
            guild_id=guild_id,
            channels=channels,
            created_ms=live.created_ms if live else now,
            updated_ms=now,
        )
        try:
            repository.put_persona(persona, replaces_ms=live.updated_ms if live else None)
        except PersonaConflict:
            raise CommandError(_changed_meanwhile(persona_id)) from None
        done = "Changed" if live else "Created"
        kept = " Its memories stay with it." if live else ""
        return ephemeral_reply(
            f"{done} persona `{persona_id}` ({shown(name)}): it answers in {_where(persona)}.{kept}"
        )

    def list_personas(self, invocation: Invocation) -> dict[str, Any]:
        """The server's personas, then the deployment's: where each answers, which one
        answers in this channel; removed ones marked."""
        server, deployment = self._services.personas.of_server(_guild_of(invocation))
        here = active_persona(server, deployment, invocation.channel_id)
        live = [p for p in server if p.active]
        lines = [_persona_line(p, here) for p in live + [p for p in server if not p.active]]
        if deployment:
            lines += ["The deployment's (this server's own come first):"]
            lines += [_persona_line(p, here) for p in deployment]
        now_here = (
            f"In this channel the bot answers as {shown(here.name)} (`{here.persona_id}`)."
            if here is not None
            else "No persona answers in this channel: the bot answers as itself."
        )
        if not server and not deployment:
            return ephemeral_reply(
                "This server has no personas. `/memory-staff persona set` creates one."
            )
        return ephemeral_reply(
            listing(
                f"{now_here}\nThis server's personas ({len(live)} of at most "
                f"{MAX_PERSONAS_PER_SERVER}):",
                lines,
            )
        )

    def remove_persona(self, invocation: Invocation) -> dict[str, Any]:
        """A server persona answers nowhere from now on; its memories stay until purged."""
        guild_id = _guild_of(invocation)
        persona_id = _persona_id(invocation)
        stored = self._services.repository.persona_item(guild_id, persona_id)
        if stored is None or not stored.active:
            return ephemeral_reply(self._not_live(invocation, persona_id, stored))
        now = self._services.clock.now_ms()
        removed = stored.model_copy(update={"removed_ms": now, "updated_ms": now})
        try:
            self._services.repository.put_persona(removed, replaces_ms=stored.updated_ms)
        except PersonaConflict:
            raise CommandError(_changed_meanwhile(persona_id)) from None
        return ephemeral_reply(
            f"Removed persona `{persona_id}` ({shown(stored.name)}): it answers nowhere now. "
            f"Its memories are kept until it is purged (`/memory-staff persona purge "
            f"{persona_id}`)."
        )

    def purge_persona(self, invocation: Invocation) -> dict[str, Any]:
        """Ask before purging a removed server persona (the buttons name its lineage, so what
        is purged is what was confirmed)."""
        guild_id = _guild_of(invocation)
        persona_id = _persona_id(invocation)
        stored = self._services.repository.persona_item(guild_id, persona_id)
        if stored is None:
            return ephemeral_reply(self._not_live(invocation, persona_id, stored))
        if stored.active:
            return ephemeral_reply(
                f"`{persona_id}` still answers: only a removed persona can be purged "
                f"(`/memory-staff persona remove {persona_id}` first)."
            )
        return ephemeral_reply(
            f"Purging `{persona_id}` ({shown(stored.name)}) deletes for good everything it "
            "remembers in this server: what it knows for everyone, what it knows of each "
            "person, and their history; then the persona itself. It cannot be undone.",
            components=confirmation(
                "Purge",
                f"{CONFIRM_PURGE_PERSONA}{persona_id}:{stored.lineage_id}",
                CANCEL_PURGE_PERSONA,
            ),
        )

    def confirm_purge(self, invocation: Invocation) -> dict[str, Any]:
        """The purge confirmed: done in deferred work, which edits the confirmation."""
        if not invocation.is_staff:
            return ephemeral_reply(
                "Only members with the Manage Server permission can purge a persona."
            )
        persona_id, _, lineage_id = invocation.custom_id.removeprefix(
            CONFIRM_PURGE_PERSONA
        ).partition(":")
        try:
            check_persona_id(persona_id)
        except PersonaError:
            return ephemeral_reply("That button has expired.")
        self._context.defer(
            {
                "work": "persona_purge",
                "persona_id": persona_id,
                "lineage_id": lineage_id,
                "interaction": deferred_interaction(invocation),
                "failed": PURGE_FAILED,
            }
        )
        return {"type": InteractionResponseType.DEFERRED_UPDATE_MESSAGE}

    def purge_confirmed(self, guild_id: str, persona_id: str, lineage_id: str) -> str:
        """Purge the removed persona that was confirmed, if it is still that one."""
        stored = self._services.repository.persona_item(guild_id, persona_id)
        if stored is None:
            return f"`{persona_id}` is already purged."
        if stored.active or stored.lineage_id != lineage_id:
            return (
                f"`{persona_id}` changed since you confirmed: nothing was purged. Run "
                "`/memory-staff persona purge` again if you still mean it."
            )
        report: PersonaPurge = self._services.repository.purge_persona(stored)
        log.info(
            "persona purged",
            extra={"guild_id": guild_id, "persona_id": persona_id, "lineage_id": lineage_id},
        )
        gone = "" if report.persona_deleted else " (its id was set again meanwhile and stays)"
        return f"Purged `{persona_id}` ({shown(stored.name)}){gone}: {report.summary()}."

    def teach_persona(self, invocation: Invocation) -> dict[str, Any]:
        """Staff teach a live persona something it knows for everyone: persona knowledge,
        about no one (no mention, no id, no member's name), with its history entry."""
        guild_id = _guild_of(invocation)
        persona_id = _persona_id(invocation)
        persona = self._services.personas.by_id(guild_id, persona_id)
        if persona is None:
            stored = self._services.repository.persona_item(guild_id, persona_id)
            return ephemeral_reply(self._not_live(invocation, persona_id, stored))
        text = self._context.checked_text(invocation.text(spec.OPTION_TEXT))
        self._context.refuse_naming_members(
            invocation,
            text,
            whose="A persona's knowledge is",
            learned="what it knows of a person, it learns from them",
        )
        repository = self._services.repository
        now = self._services.clock.now_ms()
        retention = self._services.retention.days_of(invocation.scope, Kept.FACTS)
        scope = keys.persona_scope(invocation.scope, persona.lineage_id)
        fact_id = short_id(content_hash(scope, keys.PERSONA_SUBJECT, normalized(text)))
        previous = repository.fact(scope, keys.PERSONA_SUBJECT, fact_id)
        fact = Fact(
            fact_id=fact_id,
            scope=scope,
            user_id=keys.PERSONA_SUBJECT,
            text=text,
            kind=FactKind.FACT,
            source=FactSource.OPERATOR,
            created_ms=previous.created_ms if previous else now,
            updated_ms=now,
            expires_at=epoch_seconds(now + retention * DAY_MS),
            memory_scope=MemoryScope.PERSONA,
            lineage_id=persona.lineage_id,
        ).model_copy(update=self._context.learned_here(invocation, previous).fields())
        entry = fact_history.written(
            previous,
            fact,
            actor=HistoryActor.STAFF,
            at_ms=now,
            retention_days=retention,
            actor_id=invocation.user_id,
        )
        repository.put_fact(fact, entry)
        return ephemeral_reply(
            f"Taught {shown(persona.name)} (`{persona.persona_id}`), as `{fact_id}`: {shown(text)}"
        )

    def _not_live(self, invocation: Invocation, persona_id: str, stored: Persona | None) -> str:
        """Why a persona id names no live server persona here."""
        persona_id = scrub(persona_id)
        if stored is not None:
            return (
                f"`{persona_id}` is removed: it answers nowhere; its memories are kept until "
                f"it is purged (`/memory-staff persona purge {persona_id}`)."
            )
        _, deployment = self._services.personas.of_server(invocation.guild_id)
        if any(p.persona_id == persona_id for p in deployment):
            return (
                f"`{persona_id}` is the deployment's persona: ops change it in its parameter "
                "(PERSONAS_PARAMETER)."
            )
        return f"There is no persona `{clip(persona_id, 40)}` in this server."

    def choices(self, invocation: Invocation) -> list[tuple[str, str]]:
        """What a persona subcommand's `id` offers: the personas it can act on here."""
        server, deployment = self._services.personas.of_server(invocation.guild_id)
        offered = {
            spec.PERSONA_SET: [p for p in server if p.active],
            spec.PERSONA_REMOVE: [p for p in server if p.active],
            spec.PERSONA_PURGE: [p for p in server if not p.active],
            spec.PERSONA_TEACH: [p for p in server if p.active] + deployment,
        }.get(invocation.subcommand, [])
        return [(p.persona_id, p.name) for p in offered]


def _guild_of(invocation: Invocation) -> str:
    if invocation.guild_id is None:  # staff commands are for servers (`is_staff`)
        raise CommandError("This command works in a server only.")
    return invocation.guild_id


def _persona_id(invocation: Invocation) -> str:
    """The `id` option as persona ids are written: lower case, no surrounding spaces."""
    return scrub(invocation.text(spec.OPTION_ID)).lower()


def _prompt_text(raw: str) -> str:
    """A persona's prompt as stored: each line scrubbed, its paragraphs kept."""
    return "\n".join(scrub(line) for line in raw.splitlines()).strip()


def _changed_meanwhile(persona_id: str) -> str:
    return f"`{persona_id}` changed meanwhile: nothing was written. Please try again."


def _places(live: Persona | None, where: Any, channel_id: str) -> list[str]:
    """The channels a persona set here answers in ([]: the whole server): `where` unset
    keeps a persona's places (a new one: this channel); this channel is added to its
    channels (a whole-server persona narrowed to it); the whole server is every channel."""
    if where == spec.WHERE_GLOBAL:
        return []
    if where is None and live is not None:
        return list(live.channels)
    if live is not None and live.channels and where == spec.WHERE_CHANNEL:
        return list(dict.fromkeys([*live.channels, channel_id]))
    return [channel_id]


def _holder(others: list[Persona], channels: list[str]) -> tuple[Persona, str] | None:
    """Another live server persona already holding one of these channels (or, for [], the
    whole server), with the channel ("" for the whole server)."""
    for persona in others:
        if not channels and not persona.channels:
            return persona, ""
        for channel_id in channels:
            if channel_id in persona.channels:
                return persona, channel_id
    return None


def _where(persona: Persona) -> str:
    if not persona.channels:
        return "the whole server"
    return ", ".join(f"<#{c}>" for c in persona.channels)


def _persona_line(persona: Persona, here: Persona | None) -> str:
    """A persona in `/memory-staff persona list`."""
    line = f"`{persona.persona_id}` {shown(persona.name)}: "
    if not persona.active:
        return line + (
            f"removed {day(persona.removed_ms or 0)}, answers nowhere; memories kept until purged"
        )
    line += f"answers in {_where(persona)}"
    if here is not None and (here.persona_id, here.guild_id) == (
        persona.persona_id,
        persona.guild_id,
    ):
        line += " (in this channel)"
    return line
