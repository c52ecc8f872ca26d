"""Passages the keyword leg missed, indexed by their words later, without an operator.

When a round's keyword write fails (the database paused and resuming, throttled or down),
the deployed hybrid still writes the vectors (botmemory.search.deployed: VectorsOnly). The
round's index writer then hands the ids of what it wrote to the consolidation work queue, a
message per RETRY_IDS ids in a message group of the passages' server
(botmemory.consolidation.work.WorkQueue.send_keyword_retries), so a retry never holds up a
channel's own work. ConsolidateWorkerFunction takes each message: it reads the passages back
from the vector leg (GetVectors: the words are never in the message, only ids), keeps those
whose sources the table still holds unchanged (what was erased, deleted or expired meanwhile
is not written back), and writes them to the keyword leg. If the database still does not
answer, the message fails and the queue hands it out again after its visibility timeout; after
the queue's receives it lands in the work dead-letter queue, and KeywordLegMissedWritesAlarm
already names the command that indexes everything again (botmemory.ops.reindex_keywords).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from botmemory.clock import Clock
from botmemory.search.passages import still_held
from botmemory.search.port import Passage, SearchIndex
from botmemory.search.sources import passage_sources
from botmemory.storage.table import Table

log = logging.getLogger(__name__)

RETRY_IDS = 20  # passage ids a message carries
MAX_RETRY_BODY_CHARS = 4_000


PassageId = Annotated[str, StringConstraints(min_length=1, max_length=160, pattern=r"^[^\x00]+$")]


class KeywordRetry(BaseModel):
    """Passages of one scope to write to the keyword leg again, by id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["keywords"] = "keywords"
    scope: str = Field(min_length=1, max_length=100, pattern=r"^[^\x00]+$")
    ids: list[PassageId] = Field(min_length=1, max_length=RETRY_IDS)


def retry_messages(passages: Sequence[Passage]) -> list[KeywordRetry]:
    """The messages that name these passages: by scope, RETRY_IDS ids each."""
    by_scope: dict[str, list[str]] = {}
    for passage in passages:
        by_scope.setdefault(passage.scope, []).append(passage.id)
    return [
        KeywordRetry(scope=scope, ids=ids[start : start + RETRY_IDS])
        for scope, ids in by_scope.items()
        for start in range(0, len(ids), RETRY_IDS)
    ]


def keyword_retry_of(body: Any) -> KeywordRetry | None:
    """The retry a queue message holds, or None when it is not one (a work message)."""
    if not isinstance(body, str) or len(body) > MAX_RETRY_BODY_CHARS:
        return None
    if '"keywords"' not in body:  # cheap: a channel's work message never holds it
        return None
    try:
        return KeywordRetry.model_validate_json(body)
    except ValidationError:
        return None


@dataclass
class RetryReport:
    written: int = 0  # passages written to the keyword leg
    gone: int = 0  # ids no longer held (erased, deleted, expired or changed): not written


def index_keywords_again(
    index: SearchIndex | None, table: Table, clock: Clock, retry: KeywordRetry
) -> RetryReport:
    """Write the retry's passages to the keyword leg, as the vector leg holds them and only
    while the table still holds their sources unchanged. Raises when the keyword leg still
    does not answer (the queue retries the message)."""
    from botmemory.search.deployed import DeployedSearchIndex

    if not isinstance(index, DeployedSearchIndex):  # no keyword leg here: nothing to redo
        return RetryReport(gone=len(retry.ids))
    found = [p for p in index.vectors.get(retry.ids, retry.scope) if p.scope == retry.scope]
    sources = passage_sources(table, found)
    now = clock.now_ms()
    held = [p for p in found if still_held(p, sources.get(p.id, []), now)]
    if held:
        index.keywords.write(held)
    report = RetryReport(written=len(held), gone=len(retry.ids) - len(held))
    log.info(
        "keyword leg written again",
        extra={"scope": retry.scope, "written": report.written, "gone": report.gone},
    )
    return report
