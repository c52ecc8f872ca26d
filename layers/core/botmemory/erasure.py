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
from typing import Any

from botmemory import keys
from botmemory.repository import MemoryRepository

# Names shorter than this are too likely to match ordinary words.
MIN_NAME_CHARS = 3
REDACTED = "[someone]"


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


def _kind_of(key: dict[str, Any]) -> str:
    sk = key["sk"]["S"]
    for prefix, kind in (
        (keys.OBS_PREFIX, "observation"),
        (keys.FACT_PREFIX, "fact"),
        (keys.PIN_PREFIX, "pin"),
        (keys.PROFILE_SK, "profile"),
    ):
        if sk.startswith(prefix):
            return kind
    return "other"


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
        found = repository.keys_of_user(user_id)
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for key in found:
            by_kind.setdefault(_kind_of(key), []).append(key)

        # Channels and names first: the profiles and observations hold them.
        channels: set[str] = set()
        names: set[str] = {n for n in extra_names if n}
        for key in by_kind.get("profile", []):
            profile = repository.get(key) or {}
            channels.update(profile.get("channels", []))
            names.add(str(profile.get("display_name", "")))
        for key in by_kind.get("observation", []):
            channels.add(key["pk"]["S"].removeprefix("CH#"))
        for key in by_kind.get("observation", [])[:50]:  # a sample is enough to learn names
            observation = repository.get(key) or {}
            names.add(str(observation.get("author_name", "")))
        pattern = names_pattern(names)
        report.channels = sorted(channels)
        fact_texts = [
            str((repository.get(key) or {}).get("text", "")) for key in by_kind.get("fact", [])
        ]
        self._purge_replay_records(user_id, pattern, [t for t in fact_texts if len(t) >= 8])

        for channel_id in sorted(channels):
            report.episodes += self._erase_episodes(channel_id, user_id, pattern)
            report.mentions_redacted += self._redact_mentions(channel_id, user_id, pattern)

        report.observations = repository.delete_keys(by_kind.get("observation", []))
        report.facts = repository.delete_keys(by_kind.get("fact", []))
        report.pins = repository.delete_keys(by_kind.get("pin", []))
        repository.delete_keys(by_kind.get("other", []))
        report.profiles = repository.delete_keys(by_kind.get("profile", []))
        return report

    def _purge_replay_records(
        self, user_id: str, pattern: re.Pattern[str] | None, texts: list[str]
    ) -> None:
        """Replay-protection records keep a command's answer for an hour; drop those that
        quote this person."""
        doomed = []
        for record in self._repository.items_under(keys.IDEMPOTENCY_PK):
            data = str(record.get("data", ""))
            if (
                user_id in data
                or (pattern and pattern.search(data))
                or any(t in data for t in texts)
            ):
                doomed.append({"pk": {"S": keys.IDEMPOTENCY_PK}, "sk": {"S": str(record["sk"])}})
        self._repository.delete_keys(doomed)

    def _erase_episodes(
        self, channel_id: str, user_id: str, pattern: re.Pattern[str] | None
    ) -> int:
        doomed = []
        for episode in self._repository.channel_items(channel_id, keys.EPISODE_PREFIX):
            named = pattern is not None and pattern.search(str(episode.get("summary", "")))
            if (
                user_id in episode.get("participant_ids", [])
                or named
                or user_id in str(episode.get("summary", ""))
            ):
                doomed.append(
                    {"pk": {"S": keys.channel_pk(channel_id)}, "sk": {"S": episode["sk"]}}
                )
        return self._repository.delete_keys(doomed)

    def _redact_mentions(
        self, channel_id: str, user_id: str, pattern: re.Pattern[str] | None
    ) -> int:
        """Other people's recorded messages keep their words, minus this person's name and id."""
        redacted = 0
        for observation in self._repository.channel_items(channel_id, keys.OBS_PREFIX):
            if observation.get("author_id") == user_id:
                continue  # deleted whole below
            content = str(observation.get("content", ""))
            cleaned = re.sub(rf"<@!?{re.escape(user_id)}>|{re.escape(user_id)}", REDACTED, content)
            if pattern is not None:
                cleaned = pattern.sub(REDACTED, cleaned)
            if cleaned != content:
                self._repository.redact_observation(channel_id, str(observation["sk"]), cleaned)
                redacted += 1
        return redacted
