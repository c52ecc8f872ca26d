"""`/forgetme` and opting out: erase everything kept about a person, in every scope.

What goes: their facts and profiles, their observations (messages, reactions), the
episodes they took part in or that name them, the pins made in their name, and their
name in other people's recorded messages. Each step deletes what it finds and can run
again, so an erasure cut short by a fault is finished by running it once more; the
profiles go last because they remember the channels and names the other steps need.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from botmemory.keys import ItemKind
from botmemory.repository import ItemRef, MemoryRepository

# Names shorter than this are too likely to match ordinary words.
MIN_NAME_CHARS = 3
REDACTED = "[someone]"
# A sample of a person's messages is enough to learn the names they went by.
NAME_SAMPLE = 50
# Command answers quoting a fact shorter than this are not looked for by its text.
MIN_QUOTED_FACT_CHARS = 8


@dataclass
class ErasureReport:
    facts: int = 0
    observations: int = 0
    episodes: int = 0
    pins: int = 0
    profiles: int = 0
    mentions_redacted: int = 0
    channels: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.facts} facts, {self.observations} recorded messages and reactions, "
            f"{self.episodes} channel summaries, {self.pins} pins, {self.profiles} profiles; "
            f"your name was removed from {self.mentions_redacted} of other people's messages"
        )


def names_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    usable = sorted(
        {n.strip() for n in names if len(n.strip()) >= MIN_NAME_CHARS}, key=len, reverse=True
    )
    if not usable:
        return None
    return re.compile(
        r"(?<!\w)(?:" + "|".join(re.escape(n) for n in usable) + r")(?!\w)", re.IGNORECASE
    )


class Eraser:
    def __init__(self, repository: MemoryRepository) -> None:
        self._repository = repository

    def erase(self, user_id: str, extra_names: Iterable[str] = ()) -> ErasureReport:
        repository = self._repository
        report = ErasureReport()
        found: dict[ItemKind, list[ItemRef]] = {}
        for ref in repository.items_of_user(user_id):
            found.setdefault(ref.kind, []).append(ref)
        profiles = found.pop(ItemKind.PROFILE, [])
        observations = found.pop(ItemKind.OBSERVATION, [])
        facts = found.pop(ItemKind.FACT, [])
        pins = found.pop(ItemKind.PIN, [])
        others = [ref for refs in found.values() for ref in refs]

        # Channels and names first: the profiles and observations hold them.
        channels: set[str] = set()
        names: set[str] = {n for n in extra_names if n}
        for ref in profiles:
            profile = repository.profile_at(ref)
            if profile:
                channels.update(profile.channels)
                names.add(profile.display_name)
        channels.update(ref.channel_id for ref in observations if ref.channel_id)
        for ref in observations[:NAME_SAMPLE]:
            observation = repository.observation_at(ref)
            if observation and observation.author_name:
                names.add(observation.author_name)
        pattern = names_pattern(names)
        report.channels = sorted(channels)
        fact_texts = [fact.text for fact in map(repository.fact_at, facts) if fact]
        self._purge_replay_records(
            user_id, pattern, [t for t in fact_texts if len(t) >= MIN_QUOTED_FACT_CHARS]
        )

        for channel_id in sorted(channels):
            report.episodes += self._erase_episodes(channel_id, user_id, pattern)
            report.mentions_redacted += self._redact_mentions(channel_id, user_id, pattern)

        report.observations = repository.delete_items(observations)
        report.facts = repository.delete_items(facts)
        report.pins = repository.delete_items(pins)
        repository.delete_items(others)
        report.profiles = repository.delete_items(profiles)
        return report

    def _purge_replay_records(
        self, user_id: str, pattern: re.Pattern[str] | None, texts: list[str]
    ) -> None:
        """Replay-protection records keep a command's answer for an hour; drop those that
        quote this person."""
        doomed = [
            record.ref
            for record in self._repository.replay_records()
            if user_id in record.data
            or (pattern and pattern.search(record.data))
            or any(t in record.data for t in texts)
        ]
        self._repository.delete_items(doomed)

    def _erase_episodes(
        self, channel_id: str, user_id: str, pattern: re.Pattern[str] | None
    ) -> int:
        doomed = [
            episode
            for episode in self._repository.channel_episodes(channel_id)
            if user_id in episode.participant_ids
            or (pattern is not None and pattern.search(episode.summary))
            or user_id in episode.summary
        ]
        return self._repository.delete_episodes(doomed)

    def _redact_mentions(
        self, channel_id: str, user_id: str, pattern: re.Pattern[str] | None
    ) -> int:
        """Other people's recorded messages keep their words, minus this person's name and id."""
        redacted = 0
        for observation in self._repository.channel_observations(channel_id):
            if observation.author_id == user_id:
                continue  # deleted whole below
            content = observation.content
            cleaned = re.sub(rf"<@!?{re.escape(user_id)}>|{re.escape(user_id)}", REDACTED, content)
            if pattern is not None:
                cleaned = pattern.sub(REDACTED, cleaned)
            if cleaned != content:
                self._repository.redact_observation(observation, cleaned)
                redacted += 1
        return redacted
