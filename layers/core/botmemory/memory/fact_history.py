"""A fact's history: every change to a fact, by anyone, kept as an entry staff can read.

Who writes one (each in the same write as the change itself):
- consolidation: a fact created, restated with new text or after it was superseded, and a
  fact superseded (botmemory.consolidation.consolidator, in the round's one transaction), and a fact
  deleted when its last evidence was deleted (`MemoryRepository.retire_evidence`), and a
  fact demoted out of the hot tier or evicted beyond the cap (botmemory.memory.hot_tier, each in
  the same transaction as the change);
- the member: `/memory remember` (created or updated) and `/memory forget` (deleted);
- staff: `/memory-staff forget-fact` (deleted), `/memory-staff restore-fact` (restored);
- the chat model: `update_memory` (botmemory.answering.corrections: updated or deleted).

A fact's retention purge writes none: an entry holds the texts, and a new entry would keep
a text past the retention that just ended. Entries hold personal data and are kept like the
fact (`expires_at` = when the change happened + MEMORY_FACT_RETENTION_DAYS); the subject's
erasure and opt-out remove them (by_user index), and an actor's erasure takes their id out
of the entries of other people's facts (botmemory.people.erasure follows the ACTED# pointer).
"""

from __future__ import annotations

from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.records import Fact, FactChange, FactHistory, FactStatus, HistoryActor
from botmemory.text import content_hash, short_id


def history_entry(
    fact: Fact,
    change: FactChange,
    *,
    actor: HistoryActor,
    at_ms: int,
    retention_days: int,
    old: str | None = None,
    new: str | None = None,
    actor_id: str | None = None,
    superseded_by: str | None = None,
) -> FactHistory:
    """One change to `fact` (its scope, subject and id), kept for `retention_days`."""
    entry_id = short_id(
        content_hash(change.value, actor.value, actor_id or "", old or "", new or "")
    )
    return FactHistory(
        scope=fact.scope,
        user_id=fact.user_id,
        fact_id=fact.fact_id,
        entry_id=entry_id,
        change=change,
        old=old,
        new=new,
        actor=actor,
        actor_id=actor_id,
        superseded_by=superseded_by,
        at_ms=at_ms,
        expires_at=epoch_seconds(at_ms + retention_days * DAY_MS),
    )


def written(
    previous: Fact | None,
    fact: Fact,
    *,
    actor: HistoryActor,
    at_ms: int,
    retention_days: int,
    actor_id: str | None = None,
) -> FactHistory | None:
    """The entry for writing `fact` over what was stored (`previous`, None when nothing):
    created, updated (new text), restored (was superseded or demoted); None when the same fact is
    merely stated again (same text, still active): that is no change."""
    if previous is None:
        change, old = FactChange.CREATED, None
    elif previous.status in (FactStatus.SUPERSEDED, FactStatus.DEMOTED):
        change, old = FactChange.RESTORED, previous.text
    elif previous.text != fact.text:
        change, old = FactChange.UPDATED, previous.text
    else:
        return None
    return history_entry(
        fact,
        change,
        actor=actor,
        at_ms=at_ms,
        retention_days=retention_days,
        old=old,
        new=fact.text,
        actor_id=actor_id,
    )


def deleted(
    fact: Fact,
    *,
    actor: HistoryActor,
    at_ms: int,
    retention_days: int,
    actor_id: str | None = None,
) -> FactHistory:
    """The entry for deleting `fact` (as it was stored)."""
    return history_entry(
        fact,
        FactChange.DELETED,
        actor=actor,
        at_ms=at_ms,
        retention_days=retention_days,
        old=fact.text,
        actor_id=actor_id,
    )
