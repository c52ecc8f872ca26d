"""When a fact was said and until when it holds.

A fact's times are attributes, never part of its text: `first_said_ms` and `last_said_ms`
come from its evidence (the observation keys hold their times), `valid_until_ms` from what
the evidence said ("in Tokyo until 10 March"). A fact stored before facts kept them reads
them from its evidence, else from when it was written: no migration is needed.

A fact past its `valid_until_ms` is kept (listed, in its history) but leaves the memory
block, until it is restated.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import tzinfo

from botmemory.records import Fact
from botmemory.storage import keys
from botmemory.when.zones import local_day


def _evidence_times(fact: Fact) -> list[int]:
    return [parts[0] for sk in fact.provenance if (parts := keys.observation_parts(sk))]


def said_first(fact: Fact) -> int:
    """When the fact was first said."""
    if fact.first_said_ms is not None:
        return fact.first_said_ms
    return min(_evidence_times(fact), default=fact.created_ms)


def said_last(fact: Fact) -> int:
    """When the fact was last said."""
    if fact.last_said_ms is not None:
        return fact.last_said_ms
    return max(_evidence_times(fact), default=fact.updated_ms)


def is_past(fact: Fact, now_ms: int) -> bool:
    """Whether the last day the fact holds is over."""
    return fact.valid_until_ms is not None and fact.valid_until_ms <= now_ms


def current(facts: Iterable[Fact], now_ms: int) -> list[Fact]:
    """These facts without those past their last day (recall's block shows no past fact)."""
    return [fact for fact in facts if not is_past(fact, now_ms)]


def said_label(fact: Fact, zone: tzinfo) -> str:
    """How the memory block dates a fact: "said 2026-05-09", or "said 2026-03-02 to
    2026-05-09" when it was said again on a later day."""
    first, last = local_day(said_first(fact), zone), local_day(said_last(fact), zone)
    return f"said {last}" if first == last else f"said {first} to {last}"


def merged(new: Fact, stored: Fact | None) -> Fact:
    """A statement's fact with its stored self's times taken in: first said the earlier,
    last said the later, and `valid_until` as the newer statement gave it (a late batch of
    older words does not undo what a newer one said)."""
    if stored is None:
        return new
    first = min(said_first(new), said_first(stored))
    last = max(said_last(new), said_last(stored))
    newer = said_last(new) >= said_last(stored)
    until = new.valid_until_ms if newer else stored.valid_until_ms
    return new.model_copy(
        update={"first_said_ms": first, "last_said_ms": last, "valid_until_ms": until}
    )
