"""After a round's commit: its messages, facts, episode and archived summary go to the search
index (botmemory.search.index_sync). Never a reason to lose a round: the table holds it all."""

from __future__ import annotations

import logging

from botmemory.consolidation.batch import Batch
from botmemory.consolidation.outcome import Outcome
from botmemory.records import MemoryScope
from botmemory.search.embeddings import EmbeddingDimensionsError
from botmemory.search.index_sync import IndexWriter
from botmemory.search.passages import episode_passage, fact_passage, summary_passage
from botmemory.search.port import Passage
from botmemory.storage.commit import ConsolidationCommit

log = logging.getLogger(__name__)


def index_round(
    writer: IndexWriter | None,
    commit: ConsolidationCommit,
    batch: Batch,
    passages: list[Passage],
    outcome: Outcome,
) -> None:
    """After the commit: the round's messages, facts and episode go to the search index.
    A failure leaves the memory whole (the table has it all) and is counted
    (SearchIndexFailed); those passages stay out of search."""
    if writer is None:
        return
    names = {c.fact.user_id: c.subject_name or "" for c in batch.candidates} | batch.authors
    # A person's own facts only: a persona's memories stay out of the shared index.
    facts = [
        fact_passage(f, names.get(f.user_id))
        for f in commit.facts
        if f.memory_scope == MemoryScope.USER
    ]
    everything = passages + [p for p in facts if p is not None]
    if commit.episode is not None:
        everything.append(episode_passage(commit.episode, batch.scope))
    if commit.archived_summary is not None:
        everything.append(summary_passage(commit.archived_summary, batch.scope))
    try:
        report = writer.write(everything, remove=batch.unindexed, scope=batch.scope)
    except Exception as exc:  # the search index is never a reason to lose a round
        log.warning(
            "search indexing failed",
            extra={"channel_id": outcome.channel_id, "error": repr(exc)[:300]},
        )
        outcome.index_failed = True
        outcome.embedding_dimensions_wrong = isinstance(exc, EmbeddingDimensionsError)
        return
    outcome.index_writes += report.written  # a round over a backlog indexes each commit
    outcome.index_withdrawn += report.withdrawn
    if report.keyword_error is not None:
        # The keyword leg's database did not answer: found by meaning until the queued retry
        # (or the reindex command) writes them by their words.
        outcome.index_vectors_only = True
        outcome.index_keyword_retries += report.keyword_retries
    if report.vector_error is not None:
        outcome.index_keywords_only = True
        outcome.embedding_dimensions_wrong = isinstance(
            report.vector_error, EmbeddingDimensionsError
        )
