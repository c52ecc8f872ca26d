"""`/memory forget-recent <minutes>`: erase what a member said in the last minutes, in every
server and in DMs, with the erasure's guarantees (botmemory.people.erasure).

What goes: every observation they wrote since then (messages, edits, reactions: found by
their id in the by_user index, whose sort keys begin with their time); in each channel they
spoke in since then, the episodes and the running summary that include them and end after
that moment, and their short-term entry for it; in each scope they spoke in, their facts (a
persona's included) first learned since then, with the facts' history. The search index
follows the table's deletions through its stream. Facts learned before and only restated
since stay: they were known before those minutes.

The erasure's marker (keyed hash) is set first and lives until every consolidation round that
began before the end has ended, so a round thinking over those words commits nothing of the
member; the work runs in bounded steps and returns a checkpoint when short of time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository

PAGE = 100
RESERVE_MS = 20_000


@dataclass
class RecentErasure:
    """What a forget-recent deleted so far, and where it stands (plain JSON)."""

    since_ms: int
    started_ms: int
    observations: int = 0
    facts: int = 0
    episodes: int = 0
    # [scope, channel] pairs they spoke in since then, still to clear.
    channels: list[list[str]] = field(default_factory=list)
    listed: bool = False
    finished: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RecentErasure:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def summary(self) -> str:
        return (
            f"{self.observations} recorded messages and reactions, {self.facts} facts learned "
            f"since then, {self.episodes} channel summaries"
        )


def erase_recent(
    repository: MemoryRepository,
    user_id: str,
    user_hash: str,
    lineages_of: Callable[[str], list[str]],
    run: RecentErasure,
    *,
    now_ms: Callable[[], int],
    settle_ms: int,
    time_left_ms: Callable[[], int] | None = None,
) -> RecentErasure:
    """Go on with `run` (module docstring) until done or short of time."""

    def short() -> bool:
        return time_left_ms is not None and time_left_ms() < RESERVE_MS

    repository.mark_erasing(user_hash, now_ms(), epoch_seconds(now_ms() + DAY_MS))
    while not run.listed:
        refs = repository.observations_since(user_id, run.since_ms, PAGE)
        if not refs:
            run.listed = True
            break
        pairs = {
            (str(h.get("scope")), str(h.get("channel_id")))
            for h in repository.observation_heads(refs)
            if h.get("channel_id")
        }
        known = {(s, c) for s, c in run.channels}
        run.channels += [[s, c] for s, c in sorted(pairs - known)]
        run.observations += repository.delete_items(refs)
        if short():
            return run
    while run.channels:
        scope, channel = run.channels[0]
        run.episodes += _clear_channel(repository, user_id, scope, channel, run.since_ms)
        if not [c for s, c in run.channels[1:] if s == scope]:  # the scope's last channel
            scopes = [scope] + [keys.persona_scope(scope, lin) for lin in lineages_of(scope)]
            recent = [
                fact
                for each in scopes
                for fact in repository.all_facts(each, user_id)
                if fact.created_ms >= run.since_ms
            ]
            if recent:
                repository.delete_facts_with_history(recent)
                run.facts += len(recent)
        run.channels.pop(0)
        if short() and run.channels:
            return run
    settled = max(now_ms(), run.started_ms + settle_ms)
    repository.mark_erasing(user_hash, now_ms(), epoch_seconds(settled))
    run.finished = True
    return run


def _clear_channel(
    repository: MemoryRepository, user_id: str, scope: str, channel: str, since_ms: int
) -> int:
    """The channel's episodes and running summary that include them and end since then, and
    their short-term entry there; how many summaries went."""
    episodes = [
        e
        for e in repository.channel_episodes(channel)
        if e.end_ms >= since_ms and user_id in e.participant_ids
    ]
    gone = repository.delete_episodes(episodes) if episodes else 0
    summary = repository.channel_summary(channel, consistent=True)
    if summary is not None and summary.end_ms >= since_ms and user_id in summary.participant_ids:
        gone += int(repository.clear_channel_summary(channel))
    repository.drop_short_term(scope, [user_id], channel)
    return gone
