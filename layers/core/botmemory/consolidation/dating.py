"""The times a round gives the facts it keeps (botmemory.when): when each was said, from its
evidence; until when it holds, when the model gave a sane `valid_until`; its resolved dates
checked against the day it was said; and the rule that only a later statement supersedes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from botmemory.consolidation.batch import Batch, memory_scope
from botmemory.consolidation.model.contract import KnownFact
from botmemory.records import Fact, Observation
from botmemory.when.facts import said_first, said_last
from botmemory.when.window import said_at, unresolvable, until_ms
from botmemory.when.zones import zone_of

log = logging.getLogger(__name__)


def _said(evidence: Iterable[Observation], now_ms: int) -> list[int]:
    return [said_at(o.at_ms, now_ms) for o in evidence]


def unsound_dates(text: str, cited: Iterable[Observation], batch: Batch, now_ms: int) -> str | None:
    """Why the dates a fact resolved cannot be right (botmemory.when.window); None when sane.
    Checked against the newest words it rests on (the day the relative words were said)."""
    said = _said(cited, now_ms)
    if not said:
        return None
    return unresolvable(text, max(said), zone_of(batch.zone))


def with_times(
    fact: Fact, evidence: list[Observation], valid_until: str, batch: Batch, now_ms: int
) -> Fact:
    """The fact with when it was first and last said, and until when it holds when the
    model gave a day its evidence allows (any other is dropped, logged)."""
    said = _said(evidence, now_ms)
    if not said:
        return fact
    until, why = until_ms(valid_until, max(said), zone_of(batch.zone))
    if why:
        log.info(
            "valid_until dropped",
            extra={"fact_id": fact.fact_id, "valid_until": valid_until[:40], "reason": why},
        )
    return fact.model_copy(
        update={"first_said_ms": min(said), "last_said_ms": max(said), "valid_until_ms": until}
    )


def known_fact(fact: Fact) -> KnownFact:
    """A current fact as the model is shown it: with when it was first and last said and
    until when it holds, so that it can judge supersession and expiry."""
    return KnownFact(
        fact_id=fact.fact_id,
        user_id=fact.user_id,
        kind=fact.kind.value,
        text=fact.text,
        scope=memory_scope(fact),
        first_said_ms=said_first(fact),
        last_said_ms=said_last(fact),
        valid_until_ms=fact.valid_until_ms,
    )


def said_after(newer: Fact, old: Fact) -> bool:
    """Whether a statement was said after the fact it would supersede was last said: a late
    batch or a backfill of older words never replaces what was said since."""
    return said_last(newer) > said_last(old)
