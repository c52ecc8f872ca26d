"""Personas: one deployment, several characters, memories that do not bleed into each other.

A persona is an id, a display name, a system prompt template with `{memory}`, and where it
answers: the channels it lists, or the whole server when it lists none. A server's staff
define theirs (`/memory-staff persona set|list|remove|purge`, stored in the table); ops may
define personas for every server in one SSM parameter (PERSONAS_PARAMETER: a JSON list of
`{"id", "name", "prompt", "channels"?, "lineage"?}`). A channel has at most one persona:
the server's persona listing the channel, else the server's persona for the whole server,
else the deployment's, in the same order. No persona: the bot is as it was.

Memories, in three scopes (records.MemoryScope):
- user: what a person said of themselves, in the server's scope: every persona sees it;
- persona: what a persona learned that is no one's, under keys.PERSONA_SUBJECT in the
  persona's scope (keys.persona_scope): shared by all its users, never seen by another persona;
- persona_user: what a persona knows of one person in its role, under that person in the
  persona's scope: seen by that persona only.

The persona's scope is named by its lineage id, which a rename or a new prompt keeps: a
persona's memories follow it, and a check against the lineage (`may_change`) keeps one
persona's model from changing another's.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from botmemory.records import Fact, MemoryScope, Persona, scope_of
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository
from botmemory.text import content_hash, short_id

log = logging.getLogger(__name__)

PERSONA_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
MAX_NAME_CHARS = 80
MAX_PROMPT_CHARS = 20_000
MEMORY_PLACEHOLDER = "{memory}"
MAX_PERSONAS_PER_SERVER = 25
# The deployment's personas are read through Powertools Parameters and cached this long.
PARAMETER_MAX_AGE_SECONDS = 300


class PersonaError(ValueError):
    """A persona definition that cannot be used, with what is wrong, for staff or ops."""


def check_persona_id(persona_id: str) -> str:
    if not PERSONA_ID.fullmatch(persona_id):
        raise PersonaError(
            "a persona id is 1 to 32 lower-case letters, digits, '-' or '_', starting with a "
            "letter or digit"
        )
    return persona_id


def check_prompt(prompt: str) -> str:
    if len(prompt) > MAX_PROMPT_CHARS:
        raise PersonaError(f"a persona's prompt is at most {MAX_PROMPT_CHARS:,} characters")
    if prompt.count(MEMORY_PLACEHOLDER) != 1:
        raise PersonaError(f"a persona's prompt holds {MEMORY_PLACEHOLDER} exactly once")
    return prompt


def check_name(name: str) -> str:
    name = " ".join(name.split())
    if not name or len(name) > MAX_NAME_CHARS:
        raise PersonaError(f"a persona's name is 1 to {MAX_NAME_CHARS} characters")
    return name


def new_lineage(guild_id: str | None, persona_id: str, created_ms: int) -> str:
    """A lineage id for a persona created now: a new one even for an id used before (a
    persona removed, then defined again, starts with no memories of the old one)."""
    return short_id(content_hash(guild_id or "deployment", persona_id, str(created_ms)))


class DeploymentPersona(BaseModel):
    """One entry of the PERSONAS_PARAMETER list."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    prompt: str
    channels: list[str] = Field(default=[], max_length=500)
    # Kept when the entry is renamed or its prompt rewritten; by default derived from the id.
    lineage: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,40}$")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return check_persona_id(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value)

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value: str) -> str:
        return check_prompt(value)

    def persona(self) -> Persona:
        return Persona(
            persona_id=self.id,
            lineage_id=self.lineage or f"d-{self.id}",
            name=self.name,
            prompt=self.prompt,
            channels=self.channels,
        )


def parse_deployment_personas(raw: str | None) -> list[Persona]:
    """The deployment's personas from the parameter's JSON; a bad list is logged and counts
    as none (a typo in the parameter must not take answering down)."""
    if not raw:
        return []
    try:
        entries = json.loads(raw)
        if not isinstance(entries, list):
            raise PersonaError("PERSONAS_PARAMETER must hold a JSON list")
        personas = [DeploymentPersona.model_validate(e).persona() for e in entries]
    except (ValueError, ValidationError) as error:
        log.warning("deployment personas ignored", extra={"error": str(error)[:300]})
        return []
    ids = [p.persona_id for p in personas]
    if len(set(ids)) != len(ids):
        log.warning("deployment personas ignored", extra={"error": "duplicate persona ids"})
        return []
    return personas


def deployment_source(settings: Settings) -> Callable[[], list[Persona]]:
    """The deployment's personas, read from PERSONAS_PARAMETER (cached); none when unset."""
    name = settings.personas_parameter
    if not name:
        return list

    def from_parameter() -> list[Persona]:
        from aws_lambda_powertools.utilities import parameters

        try:
            value = parameters.get_parameter(name, max_age=PARAMETER_MAX_AGE_SECONDS)
        except Exception as error:  # answering goes on without the deployment's personas
            log.warning("deployment personas not read", extra={"error": repr(error)[:300]})
            return []
        return parse_deployment_personas(str(value) if value else None)

    return from_parameter


def active_persona(
    server: Iterable[Persona], deployment: Iterable[Persona], channel_id: str
) -> Persona | None:
    """The one persona a channel answers as: the server's listing the channel, the server's
    for the whole server, then the deployment's in the same order; None: no persona."""
    for personas in (list(server), list(deployment)):
        live = [p for p in personas if p.active]
        for persona in live:
            if channel_id in persona.channels:
                return persona
        for persona in live:
            if not persona.channels:
                return persona
    return None


def persona_by_id(
    server: Iterable[Persona], deployment: Iterable[Persona], persona_id: str
) -> Persona | None:
    """A live persona of the server by id (the server's own first)."""
    for persona in [*server, *deployment]:
        if persona.persona_id == persona_id and persona.active:
            return persona
    return None


def scope_of_fact(server_scope: str, memory_scope: MemoryScope, lineage_id: str | None) -> str:
    """Where a fact of this memory scope is kept."""
    if memory_scope == MemoryScope.USER or lineage_id is None:
        return server_scope
    return keys.persona_scope(server_scope, lineage_id)


def may_change(fact: Fact, server_scope: str, lineage_id: str | None) -> bool:
    """Whether a change made under a persona (its lineage; None: no persona) may touch this
    fact: the server's own facts, or that persona's, never another persona's or server's."""
    if keys.server_scope_of(fact.scope) != server_scope:
        return False
    held_by = keys.lineage_of(fact.scope)
    return held_by is None or held_by == lineage_id


def describe(persona: Persona) -> dict[str, Any]:
    """A persona as listings show it (no prompt: it can be long)."""
    return {
        "id": persona.persona_id,
        "name": persona.name,
        "lineage": persona.lineage_id,
        "where": persona.channels or "the whole server",
        "from": "this server" if persona.guild_id else "the deployment",
    }


class PersonaDirectory:
    """The personas a server has (its own, from the table; the deployment's, from SSM)."""

    def __init__(
        self, repository: MemoryRepository, deployment: Callable[[], list[Persona]]
    ) -> None:
        self._repository = repository
        self._deployment = deployment

    def of_server(self, guild_id: str | None) -> tuple[list[Persona], list[Persona]]:
        """The server's own personas (removed ones included) and the deployment's; none in
        direct messages."""
        if guild_id is None:
            return [], []
        return self._repository.personas_of(guild_id), self._deployment()

    def for_channel(self, guild_id: str | None, channel_id: str) -> Persona | None:
        server, deployment = self.of_server(guild_id)
        return active_persona(server, deployment, channel_id)

    def by_id(self, guild_id: str | None, persona_id: str) -> Persona | None:
        server, deployment = self.of_server(guild_id)
        return persona_by_id(server, deployment, persona_id)

    def lineages_of(self, scope: str) -> list[str]:
        """Every persona lineage a server's scope may hold memories of: its own personas',
        removed ones included, and the deployment's (for erasure)."""
        if scope == scope_of(None):
            return []
        server, deployment = self.of_server(scope)
        return sorted({p.lineage_id for p in [*server, *deployment]})
