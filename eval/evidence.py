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

Those two count what the block points at. The strict figure (`held`) counts only what it
shows: a long message is shown as its snippet (the sentences that best match the query), an
episode's quote may be cut, and the part left out may be the part that answers. A turn is held when the text the block shows of it
still holds every word of LoCoMo's answer that the turn itself holds (`holds_evidence`); a
turn that holds none of them (the answer is a date worked out from the session, or an
inference) is held only when shown whole, since nothing says which part of it mattered. A
fact restates a turn in the memory's own words: it is held when it holds the answer's words
the turn holds, and on its citation alone when the turn holds none. Answer words rather than
a fixed share of the turn's words: a share would credit a snippet that kept the greeting and
dropped the answer, and fail a short snippet that kept exactly the answer.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from botmemory.recall.contract import RecalledEpisode, RecalledPassage, RecallResult
from botmemory.recall.search_leg import query_snippet
from botmemory.records import Fact
from botmemory.search.keywords import tokens
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
    held: frozenset[str] = frozenset()  # strict, where the text shown still holds the answer


def normalized(text: str) -> str:
    return " ".join(scrub(text).split()).casefold()


def answer_words(turn_text: str, answer: str) -> frozenset[str]:
    """The words of the answer that the turn holds (search's tokens: stemmed, no stopwords)."""
    return frozenset(tokens(answer)) & frozenset(tokens(turn_text))


# A turn that holds none of the answer's words (a date worked out from the session's time,
# an inference) is held when the text shown keeps at least this share of its words: most of
# the statement is there, where a greeting-only snippet is not.
HELD_SHARE = 0.5


def holds_evidence(turn_text: str, shown: str, answer: str) -> bool:
    """Whether `shown`, what a block shows of a turn, still holds its evidence: every answer
    word the turn holds, or, when it holds none, at least HELD_SHARE of the turn's words."""
    key = answer_words(turn_text, answer)
    shown_tokens = frozenset(tokens(shown))
    if key:
        return key <= shown_tokens
    words = frozenset(tokens(turn_text))
    return not words or len(words & shown_tokens) >= HELD_SHARE * len(words)


def shown_message(passage: RecalledPassage, query: str | None) -> str:
    """A passage's message as the block shows it: its snippet for the query (as recall's
    assembler makes it)."""
    return query_snippet(passage.text, set(tokens(query or "")))


class EvidenceIndex:
    """One conversation's turns and facts, to read recall results against."""

    def __init__(self, turns: list[Turn], facts: Iterable[Fact]) -> None:
        self._turns = sorted(turns, key=lambda t: t.at_ms)
        self._times = [t.at_ms for t in self._turns]
        self._texts = [normalized(t.text) for t in self._turns]
        self._by_message = {t.message_id: t.dia_id for t in turns}
        self._by_dia = {t.dia_id: t for t in turns}
        self._fact_turns = {f.fact_id: self.turns_of(f.provenance) for f in facts}
        self._episodes: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {}

    def turns_of(self, observation_sks: Iterable[str]) -> frozenset[str]:
        """The dia_ids of the messages these observation sort keys are about."""
        found = (self._by_message.get(message_of(sk) or "") for sk in observation_sks)
        return frozenset(d for d in found if d)

    def fact_turns(self, fact_id: str) -> frozenset[str]:
        """The turns a fact rests on (its provenance)."""
        return self._fact_turns.get(fact_id, frozenset())

    def turn(self, dia_id: str) -> Turn | None:
        return self._by_dia.get(dia_id)

    def shown(
        self, result: RecallResult, query: str | None = None, answer: str | None = None
    ) -> Shown:
        """The turns a result shows; `held` only with the question's answer (else empty)."""
        strict: set[str] = set(self._passage_turns(result))
        for facts in result.facts.values():
            for fact in facts:
                strict |= self._fact_turns.get(fact.id, frozenset())
        loose = set(strict)
        for episode in result.episodes:
            quoted, sources = self.episode_turns(episode)
            strict |= quoted
            loose |= quoted | sources
        held = self._held(result, query, answer) if answer is not None else set()
        return Shown(frozenset(strict), frozenset(loose), frozenset(held))

    def _held(self, result: RecallResult, query: str | None, answer: str) -> set[str]:
        """The turns whose shown text still holds the answer (see the module docstring)."""
        pieces: list[tuple[str, str]] = []  # (dia_id, what the block shows of it)
        for passage in result.passages:
            turns = [self.turns_of([sk]) for sk in passage.provenance]
            if turns:
                pieces += [(d, shown_message(passage, query)) for d in turns[-1]]
        for episode in result.episodes:
            pieces += self._quoted_pieces(episode)
        held = {d for d, shown in pieces if self._holds(d, shown, answer)}
        for facts in result.facts.values():
            for fact in facts:
                for dia_id in self._fact_turns.get(fact.id, frozenset()):
                    turn = self._by_dia[dia_id]
                    key = answer_words(turn.text, answer)
                    if not key or key <= frozenset(tokens(fact.text)):
                        held.add(dia_id)
        return held

    def _holds(self, dia_id: str, shown: str, answer: str) -> bool:
        turn = self._by_dia.get(dia_id)
        return turn is not None and holds_evidence(turn.text, shown, answer)

    def _quoted_pieces(self, episode: RecalledEpisode) -> list[tuple[str, str]]:
        first = bisect.bisect_left(self._times, episode.start_ms)
        span = range(first, bisect.bisect_right(self._times, episode.end_ms))
        found = (
            (self._quoted(name, quote, span), quote) for name, quote in _quotes(episode.summary)
        )
        return [(dia_id, quote) for dia_id, quote in found if dia_id]

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
