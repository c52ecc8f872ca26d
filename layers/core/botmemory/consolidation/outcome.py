"""What one consolidation round came to: its status and its counts, as the handlers,
metrics, the bench and the tests read them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum


class Status(StrEnum):
    OFF = "memory_off"
    NOTHING_PENDING = "nothing_pending"
    BELOW_THRESHOLD = "below_threshold"
    BUSY = "busy"  # another run holds the lock
    CONSOLIDATED = "consolidated"
    MODEL_FAILED = "model_failed"
    REJECTED = "commit_rejected"  # lock lost or inputs consumed meanwhile
    QUARANTINED = "quarantined"  # a batch that kept failing, even alone: consumed without facts
    DEFERRED = "deferred"  # the channel backs off after a failure: no model call before its time
    OUT_OF_TIME = "out_of_time"  # too little time left for a round to finish: handed on


@dataclass
class DiscardedFact:
    """A proposed fact not kept, anywhere: its id (the fact's, or for a proposal refused before
    it had an address, `p-` and a hash of its subject and text), subject, text and reason."""

    user_id: str
    text: str
    reason: str
    fact_id: str = ""


@dataclass
class Outcome:
    channel_id: str
    status: Status
    consumed: int = 0
    facts_written: int = 0
    superseded: int = 0
    episode_id: str | None = None
    discarded: list[DiscardedFact] = field(default_factory=list)
    model_calls: int = 0
    model_input_chars: int = 0
    purged: int = 0
    demoted: int = 0  # speakers' facts demoted out of the hot tier (botmemory.memory.hot_tier)
    evicted: int = 0  # demoted facts deleted beyond MEMORY_FACTS_MAX_PER_PERSON
    retired: int = 0  # facts that lost their last evidence to a deleted message
    more_pending: bool = False  # the batch was full: a backlog waits behind it
    detail: str = ""
    retry_at_ms: int | None = None  # after a failure, or when deferred: the channel's next try
    splitting: bool = False  # a failing batch is being split: the next round goes on at once
    # The channel was left behind (a full batch still waits, a split goes on, or time ran
    # out): its worker enqueues it again (botmemory.consolidation.work).
    again: bool = False
    index_writes: int = 0  # search index writes after the commit
    index_withdrawn: int = 0  # passages removed again: their source went meanwhile
    index_failed: bool = False  # the search index refused the round's passages (counted)
    index_keywords_only: bool = False  # written without vectors: embedding failed (counted)
    # Written without keywords: the keyword leg's database did not answer (counted; found by
    # meaning until the work queue's retry, or `python -m botmemory.ops.reindex_keywords`,
    # indexes them again), and how many of them that retry was handed.
    index_vectors_only: bool = False
    index_keyword_retries: int = 0
    embedding_dimensions_wrong: bool = False  # EMBEDDING_DIMENSIONS is not the model's (alarmed)
    shadow_superseded: int = 0  # MEMORY_SUPERSESSION=shadow: what would have been superseded
    summary_recompressed: bool = False  # the channel summary needed a second model pass
    summaries_dropped: int = 0  # channel summaries (current, archived) a deleted message took
    short_term_written: int = 0  # cross-channel entries written (botmemory.memory.short_term)
    # Deferred candidates (botmemory.consolidation.candidates): facts queued for a later round, waiting
    # candidates written as facts, and those still waiting after this round (queued included).
    deferred: int = 0
    candidates_kept: int = 0
    candidates_waiting: int = 0
    candidates_unreadable: int = 0  # stored candidates that did not read as one: deleted
    # The profiles and name registry entries written after the commit failed (counted): the
    # channel's state keeps them and its next round writes them first.
    people_unwritten: bool = False
    # A failed round: the provider answered nobody (an outage, not this batch's fault: the
    # channel only backs off), and how many observations the round left pending.
    model_unavailable: bool = False
    left_pending: int = 0
    # A round over a backlog (botmemory.consolidation.backlog): the commits it made.
    runs: int = 0


def outcome_metrics(outcomes: Iterable[Outcome]) -> list[tuple[str, int]]:
    """Counts worth a metric, named the same wherever consolidation runs."""
    figures: list[tuple[str, int]] = []
    for outcome in outcomes:
        figures.append((f"Consolidation_{outcome.status.value}", 1))
        figures.append(("ModelCalls", outcome.model_calls))
        if outcome.status == Status.CONSOLIDATED:
            figures += [
                ("ObservationsConsumed", outcome.consumed),
                ("FactsWritten", outcome.facts_written),
                ("FactsSuperseded", outcome.superseded),
                ("FactsSupersededShadow", outcome.shadow_superseded),
                ("FactsDiscarded", len(outcome.discarded)),
                ("SearchIndexWrites", outcome.index_writes),
                ("SummaryRecompressions", int(outcome.summary_recompressed)),
                ("SummariesDropped", outcome.summaries_dropped),
                ("ShortTermEntriesWritten", outcome.short_term_written),
                ("FactsDeferred", outcome.deferred),
                ("CandidatesKept", outcome.candidates_kept),
                ("CandidatesWaiting", outcome.candidates_waiting),
                ("CandidatesUnreadable", outcome.candidates_unreadable),
                ("SearchIndexKeywordRetries", outcome.index_keyword_retries),
            ]
            figures += [
                (name, 1)
                for name, happened in (
                    ("SearchIndexFailed", outcome.index_failed),
                    ("PeopleWritesFailed", outcome.people_unwritten),
                    ("SearchIndexKeywordsOnly", outcome.index_keywords_only),
                    ("SearchIndexVectorsOnly", outcome.index_vectors_only),
                    ("EmbeddingDimensionsWrong", outcome.embedding_dimensions_wrong),
                )
                if happened
            ]
        if outcome.status == Status.MODEL_FAILED:
            figures += _failure_figures(outcome)
        if outcome.status == Status.QUARANTINED:
            figures += [("BatchesQuarantined", 1), ("ObservationsQuarantined", outcome.consumed)]
        if outcome.status in (Status.CONSOLIDATED, Status.QUARANTINED):  # both tend the tier
            figures += [("FactsDemoted", outcome.demoted), ("FactsEvicted", outcome.evicted)]
    return figures


def _failure_figures(outcome: Outcome) -> list[tuple[str, int]]:
    """A failed round: what it left pending, and whether the provider answered no one."""
    figures = [("ObservationsBacklogged", outcome.left_pending)]
    if outcome.model_unavailable:
        figures.append(("ModelUnavailable", 1))
    return figures
