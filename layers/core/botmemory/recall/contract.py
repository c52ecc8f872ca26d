"""What recall is asked and what it answers: the request and its validation, the result and
the records it lists (each as the block showed it), and the addresses of the facts shown, for
the answer path's recall hits (botmemory.memory.hot_tier.record_hits).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from botmemory.memory.hot_tier import FactAddress
from botmemory.memory.personas import PERSONA_ID
from botmemory.recall.block import MAX_TEMPLATE_CHARS, MEMORY_PLACEHOLDER
from botmemory.recall.search_leg import SearchStatus
from botmemory.records import MemoryScope, scope_of
from botmemory.snowflake import Snowflake
from botmemory.storage import keys


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    guild_id: Snowflake | None = None
    channel_id: Snowflake
    user_id: Snowflake
    participants: list[Snowflake] | None = Field(default=None, max_length=100)
    template: str | None = Field(default=None, max_length=MAX_TEMPLATE_CHARS)
    # The message being answered. Any length is accepted and clipped (MAX_QUERY_CHARS); an
    # empty or unsearchable one is ignored, with the reason in the result's `query_note`.
    query: str | None = None
    # The persona answering (botmemory.memory.personas): its memories join the server's, first.
    # Unknown or removed: recall goes on without, and says so in `persona_note`.
    persona_id: str | None = Field(default=None, pattern=PERSONA_ID.pattern)


class RecallError(ValueError):
    def __init__(self, message: str, fields: list[str]) -> None:
        super().__init__(message)
        self.fields = fields

    def as_response(self) -> dict[str, Any]:
        return {"error": str(self), "fields": self.fields}


def parse_request(payload: Any) -> RecallRequest:
    """Validate a recall request; a RecallError names every bad field."""
    if not isinstance(payload, dict):
        raise RecallError("the request must be a JSON object", [])
    try:
        request = RecallRequest.model_validate(payload)
    except ValidationError as exc:
        fields = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
        raise RecallError("invalid recall request: " + ", ".join(fields), fields) from None
    if request.template is not None and request.template.count(MEMORY_PLACEHOLDER) != 1:
        # Once: each further {memory} would repeat the whole block (2,500 of them made 8 MB).
        raise RecallError("template must contain {memory} exactly once", ["template"])
    return request


class RecalledPin(BaseModel):
    id: str
    target: str
    text: str


class RecalledFact(BaseModel):
    id: str
    text: str
    kind: str
    source: str
    updated_ms: int
    # Whose memory it is: `user` (the person's own), or with a persona, `persona_user` (what
    # that persona knows of them) and `persona` (its knowledge, listed under "persona").
    memory_scope: MemoryScope = MemoryScope.USER


class RecalledPersona(BaseModel):
    id: str
    name: str
    lineage: str


class RecalledEpisode(BaseModel):
    id: str
    summary: str
    participants: list[str]
    start_ms: int
    end_ms: int


class RecalledPassage(BaseModel):
    """A message search found, to cite: `provenance` holds the observation sort keys shown."""

    id: str
    channel_id: str
    time_ms: int
    authors: list[str]
    author_names: list[str]
    text: str
    provenance: list[str]


class RecalledSummary(BaseModel):
    """The channel's rolling summary as shown (its newest sentences when cut to the budget)."""

    id: str
    text: str
    start_ms: int
    end_ms: int


class RecalledElsewhere(BaseModel):
    """A person's recent exchange in another public channel of the server, in one line;
    `provenance` holds the observation sort keys of the messages it was made from."""

    user_id: str
    channel_id: str
    time_ms: int
    summary: str
    provenance: list[str]


class RecalledNote(BaseModel):
    """Notes for direct messages as shown (botmemory.memory.notes): the deployment's
    (`guild_id` null) or a server's staff's; `text` the lines shown, cut to the budget."""

    guild_id: str | None = None
    text: str


class RecallResult(BaseModel):
    memory: str
    system_prompt: str | None
    pins: list[RecalledPin] = []
    summary: RecalledSummary | None = None
    facts: dict[str, list[RecalledFact]] = {}
    elsewhere: list[RecalledElsewhere] = []
    passages: list[RecalledPassage] = []
    episodes: list[RecalledEpisode] = []
    notes: list[RecalledNote] = []  # direct messages only
    zone: str = "UTC"  # the time zone the block's dates are in (botmemory.when)
    enabled: bool
    search: SearchStatus = SearchStatus.OFF
    query_note: str | None = None  # why the query was clipped or ignored
    persona: RecalledPersona | None = None  # the persona whose memories the block holds
    persona_note: str | None = None  # why a persona asked for is not there
    # The server's channels that were public when recalled (botmemory.memory.visibility), for the
    # answer path's own reads; not part of the JSON callers get.
    public_channels: frozenset[str] = Field(default=frozenset(), exclude=True)


def shown_facts(result: RecallResult, guild_id: str | None) -> list[FactAddress]:
    """The facts a recall block showed, as addresses: the server's, and with a persona, its
    own (kept in its scope, botmemory.memory.personas)."""
    scope = scope_of(guild_id)
    persona_scope = keys.persona_scope(scope, result.persona.lineage) if result.persona else None
    return [
        (
            scope if fact.memory_scope == MemoryScope.USER else persona_scope or scope,
            user_id,
            fact.id,
        )
        for user_id, facts in result.facts.items()
        for fact in facts
    ]
