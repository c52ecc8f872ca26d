"""The search port: what the memory stores for search, and the one interface every index
adapter implements.

A passage is what search returns: a remembered message with enough neighbouring context
to stand alone, a fact, or an episode summary, with where it lives in the table (its
sources), so recall can check that the table still holds it before showing it. The index
is a copy that follows the table (docs/architecture.md, invariant 14): entries are written at consolidation and
removed by id when their table items go (botmemory.search.index_sync).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

MAX_SPANS = 8  # time spans one query may name (SearchQuery.during)
# A span this short (a day, widened for every time zone) is read whole by the dated pass:
# what was said in it that shares no word with the query is listed after what does.
LISTED_SPAN_MS = 3 * 86_400_000


class PassageKind(StrEnum):
    MESSAGE = "message"
    FACT = "fact"
    EPISODE = "episode"


class Passage(BaseModel):
    """One index entry."""

    model_config = ConfigDict(frozen=True)

    id: str  # unique in the index; built by botmemory.storage.keys (passage ids)
    kind: PassageKind
    scope: str  # the guild scope ("G#<guild id>") or "dm": search never crosses it
    channel_id: str  # where it was said ("" for a fact: facts belong to a scope)
    text: str  # what is searched: the message with its context, the fact, the summary
    time_ms: int  # when it was said (a message), last updated (a fact), ended (an episode)
    authors: list[str] = []  # user ids whose words are in `text` (a fact: its subject)
    sources: list[str] = []  # table sort keys the passage was built from (provenance)
    expires_at: int | None = None  # epoch seconds, as the table's TTL attribute
    # The speaker labels `text` begins its lines with ("Alice" of "Alice: hi"): shown, but
    # kept out of the keyword leg (passages.keyword_text), so a name is not in every passage.
    labels: list[str] = []


class SearchQuery(BaseModel):
    model_config = ConfigDict(frozen=True)

    scope: str
    channel_ids: list[str] | None = None  # None: the whole scope (MEMORY_SEARCH_SCOPE=guild)
    text: str
    kinds: list[PassageKind] | None = None  # None: every kind
    limit: int = Field(default=20, ge=1, le=100)
    now_s: int  # entries whose expires_at is before this are never returned
    # Times the query names ("on 16 November", "in June": recall.dates), as [start, end)
    # epoch milliseconds: the keyword leg also ranks what was said within them alone (and
    # lists the rest of a day: LISTED_SPAN_MS) and fuses that in, so a day's answer is
    # found whatever else shares its words. Nothing outside them is filtered out.
    during: list[tuple[int, int]] = Field(default=[], max_length=MAX_SPANS)


class SearchHit(BaseModel):
    passage: Passage
    score: float  # fused score: higher is better; only the order means anything
    keyword_rank: int | None = None  # 1-based rank in the keyword leg, None when absent
    vector_rank: int | None = None  # 1-based rank in the vector leg, None when absent


class SearchHits(list[SearchHit]):
    """Hits, and why a leg did not take part when it failed (the other then answered alone:
    fail-open). A plain list means both legs answered."""

    vector_error: Exception | None = None
    keyword_error: Exception | None = None  # the deployed keyword leg (its database)


class KeywordsOnly(Exception):
    """add() wrote the passages for the keyword leg but could not embed them: they are
    marked for re-embedding (a later write adds their vectors)."""

    def __init__(self, written: int, error: Exception) -> None:
        super().__init__(f"{written} passages indexed for keywords only: {error}")
        self.written = written
        self.error = error


class VectorsOnly(Exception):
    """add() wrote the passages' vectors but the keyword leg failed (its database paused,
    throttled or down): they are found by meaning until the keyword leg indexes them again
    (botmemory.ops.reindex_keywords)."""

    def __init__(self, written: int, error: Exception) -> None:
        super().__init__(f"{written} passages indexed for vectors only: {error}")
        self.written = written
        self.error = error


@runtime_checkable
class ExpiryShortening(Protocol):
    """An index that keeps each passage's own expiry (the keyword legs): a passage whose table
    item now expires sooner expires then too (botmemory.search.index_sync)."""

    def shorten_expiry(self, ids: Iterable[str], expires_at: int) -> int: ...


class SearchIndex(Protocol):
    """An index adapter. Every method is idempotent; every failure raises (callers fail open)."""

    def add(self, passages: Sequence[Passage]) -> int:
        """Insert or replace the passages by id; returns the number of index writes. An index
        with a keyword leg of its own raises KeywordsOnly when only embedding failed."""
        ...

    def search(self, query: SearchQuery) -> list[SearchHit]:
        """The passages most relevant to the query, best first, within its scope, channels,
        kinds and expiry."""
        ...

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        """Remove the passages with these ids (absent ids are fine); returns how many ids
        were sent for removal. `scope` is the scope they belong to, when the caller knows it:
        a sharded index (botmemory.search.shards) removes them from that server's index too."""
        ...

    def passages(self) -> Iterator[Passage]:
        """Every stored passage, expired or not: for audits and the erasure tests."""
        ...
