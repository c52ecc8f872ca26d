"""Deferred candidates: a fact a round judged sound is never dropped for want of room.

A person gains at most MEMORY_NEW_FACTS_PER_PERSON new facts per round and memory scope, the
highest priority first (`FactPriority`: safety, identity, commitment, taste; within one
priority a fact already waiting comes before a new one, then the model's order). A fact beyond
that cap, or beyond the room of the round's transaction, is kept as a candidate under its
channel (`CH#{channel}`, `CAND#{fact id}`), written in the round's transaction with its
evidence's keys, its subject, its priority and the rounds it has waited. The channel's next
round reads its candidates first (one strongly consistent Query) and judges them before the new
proposals, without asking the model again: they passed the evidence rule when proposed; only
what may have changed since is checked (their people opted out or being erased, a message of
their evidence deleted, the channel's persona changed, a forget). A channel whose only work is
candidates stays on the sweep's list and the sweep runs that round without a model call. Each
candidate read costs its round one action (kept: deleted; waiting on: rewritten; dropped:
deleted), budgeted before the batch is sized. After MAX_CANDIDATE_ROUNDS rounds a candidate
still waiting is dropped; it, and every fact not kept, is logged with its id and reason and
counted. The queue is bounded (MAX_QUEUED per channel, MAX_QUEUED_PER_PERSON per subject).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.records import Candidate, Fact, FactPriority, FactStatus, MemoryScope
from botmemory.storage import keys
from botmemory.storage.candidates import MAX_QUEUED

# Later rounds a candidate is considered in before it is dropped (with a logged reason).
MAX_CANDIDATE_ROUNDS = 5
# Of the candidates a channel keeps waiting (MAX_QUEUED), per subject: one member's flood
# cannot push out anyone else's facts.
MAX_QUEUED_PER_PERSON = 6


def rank(priority: FactPriority | None) -> int:
    return (priority or FactPriority.TASTE).rank


def as_fact(candidate: Candidate, now_ms: int, retention_days: int) -> Fact:
    """The fact a candidate holds, as written the round it is kept: fresh times and TTL."""
    return candidate.fact.model_copy(
        update={
            "created_ms": now_ms,
            "updated_ms": now_ms,
            "expires_at": epoch_seconds(now_ms + retention_days * DAY_MS),
            "status": FactStatus.ACTIVE,
        }
    )


def what_of(fact: Fact) -> str:
    return "" if fact.memory_scope == MemoryScope.USER else f"{fact.memory_scope} "


def within_cap(
    facts: Sequence[Fact],
    known: Iterable[str],
    cap: int,
    priorities: Mapping[str, FactPriority],
    queued: Iterable[str],
) -> tuple[list[Fact], list[Fact]]:
    """At most `cap` new facts per person and scope (a fact the model was shown and restated
    is not new), the highest priority first, a waiting candidate before a new proposal of the
    same priority, then in the model's order. Returns the facts kept (in that order) and those
    beyond the cap."""
    known_ids, queued_ids = set(known), set(queued)
    order = sorted(
        range(len(facts)),
        key=lambda i: (
            rank(priorities.get(facts[i].fact_id)),
            facts[i].fact_id not in queued_ids,
            i,
        ),
    )
    new_so_far: Counter[tuple[str, str]] = Counter()
    kept: list[Fact] = []
    over: list[Fact] = []
    for fact in (facts[i] for i in order):
        if fact.fact_id not in known_ids:
            new_so_far[(fact.scope, fact.user_id)] += 1
            if new_so_far[(fact.scope, fact.user_id)] > cap:
                over.append(fact)
                continue
        kept.append(fact)
    return kept, over


@dataclass
class Settled:
    """What a round does with its candidates: items to write and delete, facts dropped."""

    puts: list[Candidate] = field(default_factory=list)
    rewritten: set[str] = field(default_factory=set)  # sort keys of candidates waiting on
    deletes: list[str] = field(default_factory=list)  # sort keys
    dropped: list[tuple[Fact, str]] = field(default_factory=list)
    queued: list[Fact] = field(default_factory=list)  # facts newly queued this round
    kept: int = 0  # waiting candidates written as facts this round


def settle(
    waiting: Sequence[Candidate],
    written: Iterable[Fact],
    over: Sequence[Fact],
    *,
    channel_id: str,
    server_scope: str,
    priorities: Mapping[str, FactPriority],
    names: Mapping[str, str],
    room: int,
    now_ms: int,
    retention_days: int,
) -> Settled:
    """Every candidate read this round is deleted (kept, or dropped) or rewritten one round
    older (still beyond the cap or the room): one action each, budgeted already. Each fact
    beyond this round's cap or room is queued while the queue and `room` (actions left) allow;
    the rest are dropped, with their reasons."""
    written_ids = {f.fact_id for f in written}
    over_ids = {f.fact_id for f in over}
    settled = Settled()
    subjects: Counter[str] = Counter()
    for candidate in waiting:
        sk = keys.candidate_sk(candidate.fact.fact_id)
        fact_id = candidate.fact.fact_id
        if fact_id in written_ids:
            settled.kept += 1
        if fact_id not in over_ids or fact_id in written_ids:
            settled.deletes.append(sk)
        elif candidate.rounds + 1 >= MAX_CANDIDATE_ROUNDS:
            settled.deletes.append(sk)
            settled.dropped.append(
                (
                    candidate.fact,
                    f"still beyond the cap after {MAX_CANDIDATE_ROUNDS} rounds waiting",
                )
            )
        else:
            settled.puts.append(candidate.model_copy(update={"rounds": candidate.rounds + 1}))
            settled.rewritten.add(sk)
            subjects[candidate.fact.user_id] += 1
    waiting_ids = {c.fact.fact_id for c in waiting}
    expires = epoch_seconds(now_ms + retention_days * DAY_MS)
    for fact in over:
        if fact.fact_id in waiting_ids or fact.fact_id in written_ids:
            continue
        if len(settled.puts) >= MAX_QUEUED or subjects[fact.user_id] >= MAX_QUEUED_PER_PERSON:
            settled.dropped.append(
                (fact, "beyond the cap, and the channel's candidate queue is full")
            )
            continue
        if room <= 0:
            settled.dropped.append((fact, "beyond the cap, and no room left in the transaction"))
            continue
        room -= 1
        subjects[fact.user_id] += 1
        settled.queued.append(fact)
        settled.puts.append(
            Candidate(
                channel_id=channel_id,
                server_scope=server_scope,
                fact=fact,
                priority=priorities.get(fact.fact_id, FactPriority.TASTE),
                subject_name=names.get(fact.user_id),
                queued_ms=now_ms,
                expires_at=expires,
            )
        )
    return settled


def stale(
    candidate: Candidate,
    *,
    barred: set[str],
    deleted: set[str],
    lineage_id: str | None,
    now_s: int,
) -> str | None:
    """Why a waiting candidate may no longer be kept (None: it may): what changed since it
    was judged."""
    if candidate.expires_at is not None and candidate.expires_at <= now_s:
        return "a candidate past its retention"
    if set(candidate.people) & barred:
        return "its subject or someone it rests on opted out or is being erased"
    if any(keys.message_of(sk) in deleted for sk in candidate.fact.provenance):
        return "a message it rests on was deleted"
    if candidate.fact.lineage_id is not None and candidate.fact.lineage_id != lineage_id:
        return "the channel no longer answers as the persona it was learned for"
    return None


def evidence_messages(waiting: Iterable[Candidate]) -> set[str]:
    """The messages the candidates' evidence holds (a delete of one makes a candidate stale)."""
    return {
        message
        for candidate in waiting
        for sk in candidate.fact.provenance
        if (message := keys.message_of(sk))
    }
