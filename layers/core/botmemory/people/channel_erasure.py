"""`/memory-staff channel forget`: erase what was kept from one channel, with the erasure's
guarantees (botmemory.people.erasure).

What goes: every item of the channel's partition (its recorded messages, edits and
reactions, the bot's answers there, its episodes, its running summary and the summaries it
replaced, quarantined batches, deferred candidates, its state); the facts learned only
there (a fact whose channels, `learned_in`, are this one alone), in the server's scope and
its personas', with every history entry quoting them; the short-term entries and SPOKE#
items of the people the channel's items named. The search index follows the table's
deletions through its stream (botmemory.search.index_sync), as it does for every erasure.
A fact learned there and elsewhere too stays (it was said elsewhere as well).

The work runs in bounded steps: a page of the channel's items read and deleted at a time
(the people they name kept in the checkpoint), then the people's facts and traces a few
people at a time. When less than `RESERVE_MS` is left it stops and returns a checkpoint a
continuation resumes from. Pins staff set for the channel are configuration and stay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository

PAGE = 200
PEOPLE_PER_STEP = 25
RESERVE_MS = 20_000


@dataclass
class ChannelErasure:
    """What a channel's erasure deleted so far, and where it stands."""

    items: int = 0
    facts: int = 0
    people: list[str] = field(default_factory=list)
    people_done: int = 0
    finished: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ChannelErasure:
        data = data or {}
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def summary(self) -> str:
        return (
            f"{self.items} recorded items (messages, reactions, answers, summaries, episodes) "
            f"and {self.facts} facts learned only there, for {len(self.people)} people"
        )


def erase_channel(
    repository: MemoryRepository,
    guild_id: str,
    channel_id: str,
    lineages: list[str],
    *,
    checkpoint: dict[str, Any] | None = None,
    time_left_ms: Callable[[], int] | None = None,
) -> ChannelErasure:
    """Erase what was kept from `channel_id` (module docstring), from `checkpoint` on."""
    run = ChannelErasure.from_json(checkpoint)

    def short() -> bool:
        return time_left_ms is not None and time_left_ms() < RESERVE_MS

    while True:
        refs, people = repository.channel_items_page(channel_id, PAGE)
        run.people = sorted(set(run.people) | people)
        if not refs:
            break
        run.items += repository.delete_items(refs)
        if short():
            return run
    scopes = [guild_id] + [keys.persona_scope(guild_id, lineage) for lineage in lineages]
    while run.people_done < len(run.people):
        step = run.people[run.people_done : run.people_done + PEOPLE_PER_STEP]
        first = run.people_done == 0
        for scope in scopes:
            # A persona's own knowledge is no one's: its subject is looked at once.
            subjects = step + ([keys.PERSONA_SUBJECT] if scope != guild_id and first else [])
            only_there = [
                fact
                for person in subjects
                for fact in repository.all_facts(scope, person)
                if fact.learned_in and set(fact.learned_in) == {channel_id}
            ]
            if only_there:
                run.facts += len(only_there)
                repository.delete_facts_with_history(only_there)
            repository.drop_channel_traces(scope, step, channel_id)
        run.people_done += len(step)
        if short() and run.people_done < len(run.people):
            return run
    run.finished = True
    return run
