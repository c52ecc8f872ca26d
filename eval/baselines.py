"""The two baselines: raw turns packed into a block of the same total size as recall's.

A baseline block is laid out as recall lays out its own (the same header and footer, a
heading, one quoted `- "Speaker: text"` line per turn), so "the same budget" means the same
number of characters in the system prompt. Whole turns only: a turn that does not fit is
left out.

- Recency window: the conversation's last turns, newest backwards, until the next one does
  not fit (LoCoMo's questions come after the whole conversation).
- BM25: the turns ranked by the question, best first; each that fits is taken, the others
  skipped, down the whole ranking.
- BM25 with snippets: the same ranking, but a long turn is shown as recall shows a long
  message, its sentences that best match the question (`query_snippet`), so BM25 has the
  same freedom to save room; credited by the strict rule (eval/evidence.py).
"""

from __future__ import annotations

from botmemory.recall.block import BLOCK_FOOTER, BLOCK_HEADER
from botmemory.recall.search_leg import query_snippet
from botmemory.search.keywords import tokens
from botmemory.text import quote_for_prompt
from eval.bm25 import BM25
from eval.dataset import Turn

BASELINE_HEADING = "Earlier in this channel:"
# "\n\n".join([header, heading + lines, footer]): everything but the turns' own lines.
BLOCK_OVERHEAD = len(BLOCK_HEADER) + len(BLOCK_FOOTER) + 2 * len("\n\n") + len(BASELINE_HEADING)


def turn_text(turn: Turn) -> str:
    return f"{turn.speaker}: {turn.text}"


def turn_line(turn: Turn) -> str:
    return f"- {quote_for_prompt(turn_text(turn))}"


class RawTurns:
    """One conversation's replayed turns, packed into blocks."""

    def __init__(self, turns: list[Turn]) -> None:
        self.turns = turns
        self._costs = [len(turn_line(t)) + 1 for t in turns]
        self._index = BM25([turn_text(t) for t in turns])

    def recency(self, budget: int) -> frozenset[str]:
        """The dia_ids of the newest turns that fit a block of `budget` characters."""
        room = budget - BLOCK_OVERHEAD
        taken: list[str] = []
        for i in range(len(self.turns) - 1, -1, -1):
            if self._costs[i] > room:
                break
            room -= self._costs[i]
            taken.append(self.turns[i].dia_id)
        return frozenset(taken)

    def bm25(self, query: str, budget: int) -> frozenset[str]:
        """The dia_ids of the best-ranked turns for `query` that fit `budget` characters."""
        return self.pack(self._index.rank(query), budget)

    def ranking(self, query: str) -> list[int]:
        return self._index.rank(query)

    def pack(self, ranking: list[int], budget: int) -> frozenset[str]:
        room = budget - BLOCK_OVERHEAD
        taken: list[str] = []
        for i in ranking:
            if self._costs[i] <= room:
                room -= self._costs[i]
                taken.append(self.turns[i].dia_id)
        return frozenset(taken)

    def pack_snippets(self, ranking: list[int], budget: int, query: str) -> dict[str, str]:
        """dia_id -> the text shown, for the best-ranked turns whose snippet line fits."""
        wanted = set(tokens(query))
        room = budget - BLOCK_OVERHEAD
        shown: dict[str, str] = {}
        for i in ranking:
            turn = self.turns[i]
            snippet = query_snippet(turn.text, wanted)
            cost = len(f"- {quote_for_prompt(f'{turn.speaker}: {snippet}')}") + 1
            if cost <= room:
                room -= cost
                shown[turn.dia_id] = snippet
        return shown

    def block(self, dia_ids: frozenset[str]) -> str:
        """The block those turns make, in conversation order (to show, and to check sizes)."""
        lines = [turn_line(t) for t in self.turns if t.dia_id in dia_ids]
        if not lines:
            return ""
        section = "\n".join([BASELINE_HEADING, *lines])
        return "\n\n".join([BLOCK_HEADER, section, BLOCK_FOOTER])
