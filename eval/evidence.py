"""Which LoCoMo turns a recall result shows, traced back through provenance to `dia_id`s.

A turn counts as shown (strictly) when the block holds:

- a passage whose provenance (observation sort keys) includes the turn's message: passages
  are the search section a later change adds to recall; a result without them has none;
- a fact that cites the turn's observation as evidence (`Fact.provenance`);
- an episode that quotes the turn: its summary holds "Name: “…”" where the quoted text is
  the start of one of the episode's turns by that speaker (the `rules` model's episodes are
  extractive: the first sentence of its longest messages); a quote that starts several of
  them is credited to one.

The looser figure also counts every turn an episode was made from (its time range), quoted
or not: the episode was built from it, but its words are not in the block.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from botmemory.recall.contract import RecalledEpisode, RecallResult
from botmemory.records import Fact
from botmemory.storage.keys import message_of
from botmemory.text import scrub
from eval.dataset import Turn

# `Name: “quoted words”`, the quote possibly cut by the summary's length limit.
_QUOTE = re.compile(r"(?P<name>[^“”]{1,200}?): \u201c(?P<quote>[^\u201d]*)(?P<closed>\u201d?)")
# A quote cut short must keep this much of the turn to count (normalized characters).
MIN_CUT_QUOTE = 12


@dataclass(frozen=True)
class Shown:
    strict: frozenset[str]  # dia_ids in passages, cited by facts, quoted by episodes
    loose: frozenset[str]  # strict, plus every turn an episode shown was made from


def normalized(text: str) -> str:
    return " ".join(scrub(text).split()).casefold()


class EvidenceIndex:
    """One conversation's turns and facts, to read recall results against."""

    def __init__(self, turns: list[Turn], facts: Iterable[Fact]) -> None:
        self._turns = sorted(turns, key=lambda t: t.at_ms)
        self._times = [t.at_ms for t in self._turns]
        self._texts = [normalized(t.text) for t in self._turns]
        self._by_message = {t.message_id: t.dia_id for t in turns}
        self._fact_turns = {f.fact_id: self.turns_of(f.provenance) for f in facts}
        self._episodes: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {}

    def turns_of(self, observation_sks: Iterable[str]) -> frozenset[str]:
        """The dia_ids of the messages these observation sort keys are about."""
        found = (self._by_message.get(message_of(sk) or "") for sk in observation_sks)
        return frozenset(d for d in found if d)

    def shown(self, result: RecallResult) -> Shown:
        strict: set[str] = set(self._passage_turns(result))
        for facts in result.facts.values():
            for fact in facts:
                strict |= self._fact_turns.get(fact.id, frozenset())
        loose = set(strict)
        for episode in result.episodes:
            quoted, sources = self.episode_turns(episode)
            strict |= quoted
            loose |= quoted | sources
        return Shown(frozenset(strict), frozenset(loose))

    def episode_turns(self, episode: RecalledEpisode) -> tuple[frozenset[str], frozenset[str]]:
        """The turns an episode quotes, and all the turns it was made from."""
        key = (episode.id, episode.summary)
        if key not in self._episodes:
            first = bisect.bisect_left(self._times, episode.start_ms)
            last = bisect.bisect_right(self._times, episode.end_ms)
            span = range(first, last)
            quoted = {self._quoted(name, quote, span) for name, quote in _quotes(episode.summary)}
            quoted.discard("")
            sources = {self._turns[i].dia_id for i in span}
            self._episodes[key] = (frozenset(quoted), frozenset(sources))
        return self._episodes[key]

    def _quoted(self, name: str, quote: str, span: range) -> str:
        """The turn a quote is from: one by that speaker, in the episode, that starts with it.

        A quote that starts several of them ("Thanks!") is credited once, to the longest:
        the one an extractive summary picks.
        """
        candidates = [
            i
            for i in span
            if name.endswith(self._turns[i].speaker) and self._texts[i].startswith(quote)
        ]
        if not candidates:
            return ""
        best = max(candidates, key=lambda i: (len(self._texts[i]), -i))
        return self._turns[best].dia_id

    def _passage_turns(self, result: RecallResult) -> frozenset[str]:
        """Passages, when the result has them: each names its observations in `provenance`."""
        passages: Any = getattr(result, "passages", None) or []
        keys: list[str] = []
        for passage in passages:
            provenance = (
                passage.get("provenance")
                if isinstance(passage, dict)
                else getattr(passage, "provenance", None)
            )
            keys += [str(sk) for sk in provenance or []]
        return self.turns_of(keys)


def _quotes(summary: str) -> list[tuple[str, str]]:
    """(speaker part, normalized quote) of each quotation in an episode summary."""
    found: list[tuple[str, str]] = []
    for match in _QUOTE.finditer(summary):
        quote = normalized(match["quote"]).rstrip("…").rstrip()
        if not quote or (not match["closed"] and len(quote) < MIN_CUT_QUOTE):
            continue
        found.append((match["name"].strip(), quote))
    return found
