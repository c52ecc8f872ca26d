"""Slash commands: what members and staff can see and change about memory."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from botmemory.interactions import ephemeral_message, invoking_user
from botmemory.records import scope_of
from botmemory.repository import ttl_alive
from botmemory.runtime import MemoryServices
from botmemory.text import scrub

MAX_LISTED_FACTS = 25


def handle_command(interaction: dict[str, Any], services: MemoryServices) -> dict[str, Any]:
    """Route an APPLICATION_COMMAND interaction to its command; unknown ones get a clear answer."""
    data = interaction.get("data") or {}
    name = data.get("name")
    options = data.get("options") or []
    sub = options[0].get("name") if options and isinstance(options[0], dict) else None
    if name == "memory" and sub == "show":
        return show_memory(interaction, services)
    label = f"/{name} {sub}" if sub else f"/{name}"
    return ephemeral_message(f"Sorry, I don't know the command `{scrub(str(label))[:60]}`.")


def show_memory(interaction: dict[str, Any], services: MemoryServices) -> dict[str, Any]:
    """`/memory show`: the caller's facts in this server (or in DMs), with their ids."""
    user_id = str(invoking_user(interaction).get("id", ""))
    if not user_id:
        return ephemeral_message("I could not tell who is asking.")
    if not services.settings.memory_enabled:
        return ephemeral_message("Memory is off on this bot: nothing is kept about you.")
    scope = scope_of(interaction.get("guild_id"))
    now = services.clock.now_ms()
    facts = [
        f
        for f in services.repository.active_facts(scope, user_id, MAX_LISTED_FACTS)
        if ttl_alive(f.expires_at, now)
    ]
    if not facts:
        return ephemeral_message("I don't remember anything about you here yet.")
    lines = ["What I remember about you here:"]
    for fact in facts:
        day = datetime.fromtimestamp(fact.updated_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
        lines.append(
            f"`{fact.fact_id}` {scrub(fact.text)} ({fact.kind.value}, {fact.source.value}, {day})"
        )
    return ephemeral_message("\n".join(lines))


def user_facts_listing(services: MemoryServices, scope: str, user_id: str) -> str:
    """Staff view of one member: every fact kept about them here, active first, with ids."""
    now = services.clock.now_ms()
    facts = [
        f for f in services.repository.all_facts(scope, user_id) if ttl_alive(f.expires_at, now)
    ]
    if not facts:
        return f"Nothing is kept about user {user_id} here."
    facts.sort(key=lambda f: (f.status.value != "active", -f.updated_ms))
    lines = [f"Facts kept about user {user_id} ({len(facts)}):"]
    for fact in facts:
        day = datetime.fromtimestamp(fact.updated_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
        status = "" if fact.status.value == "active" else f", {fact.status.value}"
        lines.append(
            f"`{fact.fact_id}` {scrub(fact.text)} ({fact.kind.value}, {fact.source.value}, "
            f"{day}, seen {fact.hits}x{status})"
        )
    return "\n".join(lines)
