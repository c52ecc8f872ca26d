"""The hot tier: the facts recall may show of a person stay few and short, and the ones kept
are the ones answers use.

Two halves, both off recall's latency path (recall itself never writes):

- **Recall hits.** Once an answer's reply is posted, the answer path counts one recall hit
  on each fact its memory block showed (`record_hits`, botmemory.answering.answerer, given
  the addresses of botmemory.recall.contract.shown_facts): one transaction for all of them,
  conditioned on each fact still existing; a failure is logged and counted (`RecallHitsFailed`), never the answer's. The standalone RecallFunction
  records none: it cannot know whether the block it returned was used.
- **Demotion.** After a consolidation round commits, each person who spoke in it keeps at
  most MEMORY_HOT_FACTS_PER_PERSON active facts of at most MEMORY_HOT_FACT_CHARS characters
  in all: their lowest-value active facts are demoted until both hold (`FactStatus.DEMOTED`:
  kept, listed in `/memory show` and to staff, never recalled, searched nor shown to the
  models). Lowest value first: never recalled, then fewest recall hits, then the oldest last
  hit, then the oldest update; a fact the round itself wrote waits for a later round, so a
  new fact gets its chance to be recalled. Facts the person gave with `/memory remember` count
  toward both targets but are never demoted nor evicted, also once the chat model corrected
  them. Beyond MEMORY_FACTS_MAX_PER_PERSON stored facts (active and demoted), the lowest-value demoted facts are deleted (evicted). Each
  demotion and eviction is conditional on the fact being as read and comes with its
  history entry, so a forget, a correction, a restatement or an erasure meanwhile wins.

A demoted fact comes back when consolidation hears it again (a restatement is active), or
when staff restore it (`HotTier.restore`, `/memory-staff restore-fact`): active again and
counting as just recalled, so the next round does not demote it at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError

from botmemory.clock import Clock
from botmemory.memory import fact_history
from botmemory.people.retention import Kept, RetentionReader
from botmemory.records import (
    Fact,
    FactChange,
    FactSource,
    FactStatus,
    HistoryActor,
)
from botmemory.settings.config import Settings
from botmemory.storage.repository import MemoryRepository

log = logging.getLogger(__name__)

FactAddress = tuple[str, str, str]  # scope, user id, fact id


# Recall hits -------------------------------------------------------------------------


@dataclass(frozen=True)
class HitReport:
    recorded: int = 0  # facts counted (a fact gone meanwhile is not)
    failed: bool = False  # the write failed: logged, counted, the answer stands


def record_hits(
    repository: MemoryRepository, shown: Sequence[FactAddress], now_ms: int
) -> HitReport:
    """One recall hit for each fact shown, in one request; never raises for the table."""
    if not shown:
        return HitReport()
    try:
        recorded = repository.record_recall_hits(shown, now_ms)
    except (ClientError, BotoCoreError) as error:
        log.warning(
            "recall hits not recorded", extra={"facts": len(shown), "error": repr(error)[:300]}
        )
        return HitReport(failed=True)
    return HitReport(recorded=recorded)


# Demotion ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TierLimits:
    hot_facts: int  # active facts per person
    hot_chars: int  # characters of those, in all
    max_stored: int  # active and demoted facts per person

    @classmethod
    def of(cls, settings: Settings) -> TierLimits:
        return cls(
            settings.hot_facts_per_person, settings.hot_fact_chars, settings.facts_max_per_person
        )


def value_order(fact: Fact) -> tuple[bool, int, int, int, str]:
    """Sort key, lowest value first: never recalled, then fewest recall hits, then the
    oldest last hit, then the oldest update (the id only makes the order total)."""
    return (
        fact.recall_hits > 0,
        fact.recall_hits,
        fact.last_recall_ms or 0,
        fact.updated_ms,
        fact.fact_id,
    )


def protected(fact: Fact) -> bool:
    """Never demoted nor evicted automatically: what the person asked to be remembered,
    also once the chat model corrected it (`manually_written` keeps what `source` no longer
    says, as a correction's source is `model`)."""
    return fact.source == FactSource.MANUAL or fact.manually_written


@dataclass
class TierPlan:
    demote: list[Fact] = field(default_factory=list)
    evict: list[Fact] = field(default_factory=list)  # demoted, or demoted in this plan


def plan(
    facts: Iterable[Fact], limits: TierLimits, fresh: frozenset[str] = frozenset()
) -> TierPlan:
    """What to demote and evict of one person's live facts in one scope (expired ones are
    purged apart; superseded ones count toward nothing). Facts in `fresh` (written by the
    round that tends the tier) are left out of that round's count: a fact never had a
    chance to be recalled before the round that learned it, so it waits for the next round,
    and it costs no older fact its place meanwhile (the tier may stand over its target by
    the few facts one round learns)."""
    facts = list(facts)
    active = [f for f in facts if f.status == FactStatus.ACTIVE]
    demoted = [f for f in facts if f.status == FactStatus.DEMOTED]
    counted = [f for f in active if f.fact_id not in fresh]
    count, chars = len(counted), sum(len(f.text) for f in counted)
    demote: list[Fact] = []
    candidates = (f for f in active if not protected(f) and f.fact_id not in fresh)
    for fact in sorted(candidates, key=value_order):
        if count <= limits.hot_facts and chars <= limits.hot_chars:
            break
        demote.append(fact)
        count, chars = count - 1, chars - len(fact.text)
    excess = len(active) + len(demoted) - limits.max_stored
    evict = sorted(demoted + demote, key=value_order)[: max(0, excess)]
    evicting = {f.fact_id for f in evict}
    return TierPlan([f for f in demote if f.fact_id not in evicting], evict)


@dataclass(frozen=True)
class TierReport:
    demoted: int = 0
    evicted: int = 0


class HotTier:
    def __init__(
        self,
        repository: MemoryRepository,
        settings: Settings,
        clock: Clock,
        hash_of: Callable[[str], str],
        retention: RetentionReader,
    ) -> None:
        self._repository = repository
        self._clock = clock
        self._hash_of = hash_of  # the person hash erasure markers are kept under
        # History entries hold the facts' texts: kept as long as the server keeps facts.
        self._retention = retention
        self._limits = TierLimits.of(settings)

    def tend(self, facts: Sequence[Fact], fresh: frozenset[str] = frozenset()) -> TierReport:
        """Keep one person's hot tier within its targets; `facts` are all their live facts
        in one scope, as consolidation read them once after its commit, `fresh` the ids of
        those that commit wrote."""
        chosen = plan(facts, self._limits, fresh)
        if not chosen.demote and not chosen.evict:
            return TierReport()
        now = self._clock.now_ms()
        first = (chosen.demote or chosen.evict)[0]  # one person's facts, in one scope
        retention = self._retention.days_of(first.scope, Kept.FACTS)
        demotions = [
            (
                fact,
                fact_history.history_entry(
                    fact,
                    FactChange.DEMOTED,
                    actor=HistoryActor.CONSOLIDATION,
                    at_ms=now,
                    retention_days=retention,
                    old=fact.text,
                ),
            )
            for fact in chosen.demote
        ]
        evictions = [
            (
                fact,
                fact_history.deleted(
                    fact, actor=HistoryActor.CONSOLIDATION, at_ms=now, retention_days=retention
                ),
            )
            for fact in chosen.evict
        ]
        person = first.user_id
        demoted, evicted = self._repository.retier_facts(
            demotions, evictions, person_hash=self._hash_of(person), now_ms=now
        )
        if demoted or evicted:
            log.info(
                "hot tier tended",
                extra={
                    "user_id": person,
                    "demoted": [f.fact_id for f in demoted],
                    "evicted": [f.fact_id for f in evicted],
                },
            )
        return TierReport(demoted=len(demoted), evicted=len(evicted))

    def restore(self, fact: Fact, actor_id: str) -> bool:
        """A demoted fact active again by staff, counting as just recalled, with its
        history entry; False when it changed meanwhile (nothing written)."""
        now = self._clock.now_ms()
        entry = fact_history.history_entry(
            fact,
            FactChange.RESTORED,
            actor=HistoryActor.STAFF,
            at_ms=now,
            retention_days=self._retention.days_of(fact.scope, Kept.FACTS),
            new=fact.text,
            actor_id=actor_id,
        )
        return self._repository.restore_fact(
            fact, entry, person_hash=self._hash_of(fact.user_id), now_ms=now
        )
