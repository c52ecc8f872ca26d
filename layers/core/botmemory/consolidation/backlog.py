"""A channel that is behind: one model call over a grown batch, committed in runs.

A round over a backlog (more than MEMORY_MAX_BATCH waiting) reads up to
MEMORY_BATCH_MAX_TOKENS of observations (botmemory.consolidation.batch) and asks the model once,
with GROWN_CALL_SCALE times the answer and time allowance of a normal call. What it answers is
judged once, over the whole batch (each fact still from its subject's own words, citing its own
lines), then committed as several transactions, oldest observations first: each run is what
one transaction holds with room for what the answer adds, and each commit is what a round's
commit always is (atomic, fenced by the lock, at most 100 actions), consuming exactly its run's
observations and writing the facts whose newest evidence lies in it. The episode, the channel
summary and the candidates deferred go with the last run; the waiting candidates read with the
first. Every run but the last keeps the lock. A run that cannot commit (the lock lost, an
erasure racing it) ends the round: what was committed stays, the rest stays pending for the
next round (each observation consumed exactly once, invariants 2 and 3).
"""

from __future__ import annotations

from dataclasses import replace

from botmemory.consolidation.batch import Batch, leaves_room_for_answer
from botmemory.consolidation.judgement import Judgement
from botmemory.records import Observation
from botmemory.storage.commit import Lock

# A grown call's answer (tokens) and time (timeout) allowance, in normal calls. Its answer is
# mostly the facts worth keeping and the summaries, which grow far slower than the chatter.
GROWN_CALL_SCALE = 2

Run = tuple[list[Observation], list[Observation]]  # observations consumed, opted-out words deleted


def runs(lock: Lock, batch: Batch) -> list[Run]:
    """The batch cut, oldest first, into runs that each fit one transaction with room for
    what the answer adds (the waiting candidates count in the first)."""
    items = sorted([*batch.observations, *batch.opted_out], key=lambda o: o.sk)
    opted = {o.sk for o in batch.opted_out}
    names = batch.names
    assert names is not None  # nosec B101 # narrows the type: a read batch always has its names

    def fits(chunk: list[Observation], first: bool) -> bool:
        observations = [o for o in chunk if o.sk not in opted]
        discarded = [o for o in chunk if o.sk in opted]
        waiting = batch.candidates if first else []
        return leaves_room_for_answer(lock, observations, discarded, names, waiting)

    cut: list[Run] = []
    start = 0
    while start < len(items):
        # The longest run that fits (adding an observation never frees room): bisection.
        low, high = 1, len(items) - start
        while low < high:
            middle = (low + high + 1) // 2
            if fits(items[start : start + middle], not cut):
                low = middle
            else:
                high = middle - 1
        chunk = items[start : start + low]
        cut.append(([o for o in chunk if o.sk not in opted], [o for o in chunk if o.sk in opted]))
        start += low
    return cut


def split_judgement(judgement: Judgement, cut: list[Run]) -> list[Judgement]:
    """The judgement's parts, one per run: each fact with the run of its newest evidence
    (a fact resting on no observation of the batch, a candidate written now, with the first),
    each supersession with the fact that supersedes it, and the episode, the summary and the
    deferred facts with the last run."""
    run_of = {o.sk: index for index, (observations, _) in enumerate(cut) for o in observations}
    parts = [Judgement(priorities=judgement.priorities) for _ in cut]
    fact_run: dict[str, int] = {}
    for fact in judgement.facts:
        at = max((run_of[sk] for sk in fact.provenance if sk in run_of), default=0)
        parts[at].facts.append(fact)
        fact_run[fact.fact_id] = at
    last = len(cut) - 1
    for old in judgement.superseded:
        newer = judgement.superseded_by.get(old.fact_id)
        at = fact_run.get(newer.fact_id, last) if newer else last
        parts[at].superseded.append(old)
        if newer is not None:
            parts[at].superseded_by[old.fact_id] = newer
    parts[last].episode = judgement.episode
    parts[last].summary = judgement.summary
    parts[last].summary_replaces = judgement.summary_replaces
    parts[last].summary_dropped = judgement.summary_dropped
    parts[last].deferred = judgement.deferred
    return parts


def run_batch(batch: Batch, run: Run, *, first: bool, last: bool) -> Batch:
    """The part of the batch one run commits: its observations as the model numbered them;
    the waiting candidates and the passages to withdraw with the first run; the short-term
    lines, and what is left pending after the round, with the last."""
    observations, opted_out = run
    sks = {o.sk for o in observations}
    by_number = {n: o for n, o in batch.by_number.items() if o.sk in sks}
    return replace(
        batch,
        observations=observations,
        opted_out=opted_out,
        numbered=[n for n in batch.numbered if n.number in by_number],
        by_number=by_number,
        more=batch.more if last else True,
        waiting=batch.waiting if last else True,
        redacted={sk: text for sk, text in batch.redacted.items() if sk in sks},
        unindexed=batch.unindexed if first else [],
        candidates=batch.candidates if first else [],
        recent=batch.recent if last else {},
    )
