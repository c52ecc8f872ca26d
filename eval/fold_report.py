"""The folds' arithmetic and tables (`make eval ARGS=--folds`, eval/folds.py): LoCoMo's
conversations split into folds, and for each rule of search.rules, what it wins and loses
against the block without it, per fold and pooled, with the spread over folds.

Counts, not rates: a rule's effect is the questions it wins (held with it, not without)
minus those it loses, so a fold with few questions weighs what it holds. A fold or a
category with no question is "n/a", never a division by zero; a fold where BM25 finds
nothing is shown with its zero.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from eval.dataset import CATEGORIES

TODAY = "today"  # the variant with every rule in force
NA = "n/a"
FOLDS = 5  # LoCoMo's ten conversations in five folds of two


def without(rule: str) -> str:
    """The variant name of the block with `rule` alone off."""
    return f"without {rule}"


@dataclass
class Asked:
    """One question under every variant: held (strict) by path, then block size."""

    conversation: str
    category: int
    held: dict[str, dict[str, dict[str, bool]]] = field(default_factory=dict)  # variant ->
    bm25: dict[str, bool] = field(default_factory=dict)  # BM25 snippets, by size

    def holds(self, variant: str, path: str, size: str) -> bool:
        return self.held.get(variant, {}).get(path, {}).get(size, False)


@dataclass(frozen=True)
class Tally:
    """Questions a rule wins and loses; `asked` of them in all (0: nothing to count)."""

    won: int = 0
    lost: int = 0
    asked: int = 0

    @property
    def net(self) -> int:
        return self.won - self.lost

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.won + other.won, self.lost + other.lost, self.asked + other.asked)


def fold_split(conversations: Sequence[str], folds: int = FOLDS) -> list[list[str]]:
    """The conversations in `folds` consecutive folds as even as can be (ten in five: two
    each), in the order given; fewer conversations than folds give one fold each."""
    if folds < 1:
        raise ValueError("at least one fold")
    count = min(folds, len(conversations))
    size, extra = divmod(len(conversations), count) if count else (0, 0)
    split: list[list[str]] = []
    start = 0
    for n in range(count):
        end = start + size + (1 if n < extra else 0)
        split.append(list(conversations[start:end]))
        start = end
    return split


def tally(
    questions: Iterable[Asked], rule: str, path: str, size: str, category: int | None = None
) -> Tally:
    """What `rule` wins and loses on these questions (of `category` alone when given)."""
    won = lost = asked = 0
    for q in questions:
        if category is not None and q.category != category:
            continue
        asked += 1
        on, off = q.holds(TODAY, path, size), q.holds(without(rule), path, size)
        won += on and not off
        lost += off and not on
    return Tally(won, lost, asked)


def in_fold(questions: Sequence[Asked], fold: Sequence[str]) -> list[Asked]:
    return [q for q in questions if q.conversation in fold]


@dataclass(frozen=True)
class RuleEffect:
    """A rule's tallies per fold and pooled; `chosen`: per fold, whether the other folds'
    pooled net would keep it (> 0); `held_out`: the net of those choices on their folds."""

    folds: list[Tally]
    pooled: Tally
    chosen: list[bool]
    held_out: int

    @property
    def spread(self) -> float:
        """The standard deviation of the per-fold nets over folds with questions (NaN
        below two such folds)."""
        nets = [t.net for t in self.folds if t.asked]
        return statistics.stdev(nets) if len(nets) > 1 else math.nan


def rule_effect(
    questions: Sequence[Asked], folds: Sequence[Sequence[str]], rule: str, path: str, size: str
) -> RuleEffect:
    """The rule's effect per fold, pooled (summed over folds), and chosen on the others:
    each fold keeps the rule when the rest's net is positive, and is credited its own net
    if so (0 if dropped: the block without the rule is the reference)."""
    per_fold = [tally(in_fold(questions, fold), rule, path, size) for fold in folds]
    pooled = sum(per_fold, Tally())
    chosen = [pooled.net - t.net > 0 for t in per_fold]
    held_out = sum(t.net for t, keep in zip(per_fold, chosen, strict=True) if keep)
    return RuleEffect(per_fold, pooled, chosen, held_out)


def signed(value: int) -> str:
    return f"+{value}" if value > 0 else f"{value}".replace("-", "−")


def net_or_na(t: Tally) -> str:
    return signed(t.net) if t.asked else NA


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else NA


def rule_lines(
    questions: Sequence[Asked],
    folds: Sequence[Sequence[str]],
    rules: Sequence[str],
    path: str,
    size: str,
) -> list[str]:
    """One row per rule: its net pooled (won / lost), per fold, spread, and chosen on the
    other folds."""
    lines = [
        "| rule removed alone | net pooled | won / lost | per fold | sd | kept by the others "
        "| held-out net |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for rule in rules:
        effect = rule_effect(questions, folds, rule, path, size)
        per_fold = " ".join(net_or_na(t) for t in effect.folds)
        sd = NA if math.isnan(effect.spread) else f"{effect.spread:.1f}"
        kept = f"{sum(effect.chosen)} of {len(folds)}"
        lines.append(
            f"| {rule} | {net_or_na(effect.pooled)} | {effect.pooled.won} / {effect.pooled.lost}"
            f" | {per_fold} | {sd} | {kept} | {signed(effect.held_out)} |"
        )
    return lines


def category_lines(
    questions: Sequence[Asked],
    conversations: Sequence[str],
    rules: Sequence[str],
    path: str,
    size: str,
) -> list[str]:
    """Each rule's net by category, pooled over the folds; "n/a" for a category none of the
    conversations asks."""
    titles = " | ".join(CATEGORIES.values())
    lines = [f"| rule removed alone | {titles} |", "|---" + " | ---:" * len(CATEGORIES) + " |"]
    asked = [q for q in questions if q.conversation in conversations]
    for rule in rules:
        cells = " | ".join(net_or_na(tally(asked, rule, path, size, c)) for c in CATEGORIES)
        lines.append(f"| {rule} | {cells} |")
    return lines


def baseline_lines(
    questions: Sequence[Asked], folds: Sequence[Sequence[str]], path: str, sizes: Sequence[str]
) -> list[str]:
    """Per fold and pooled, at each size: questions the block with every rule holds and
    those BM25 over raw turns (snippets) holds, and the margin in points."""
    lines = [
        "| fold | conversations | size | questions | block held | BM25 held | margin |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    named = [(f"{n}", fold) for n, fold in enumerate(folds, start=1)]
    named.append(("pooled", [c for fold in folds for c in fold]))
    for name, fold in named:
        asked = in_fold(questions, fold)
        for size in sizes:
            block = sum(q.holds(TODAY, path, size) for q in asked)
            bm25 = sum(q.bm25.get(size, False) for q in asked)
            margin = f"{100 * (block - bm25) / len(asked):+.1f}" if asked else NA
            lines.append(
                f"| {name} | {', '.join(fold)} | {size} | {len(asked)} | "
                f"{percent(block, len(asked))} | {percent(bm25, len(asked))} | {margin} |"
            )
    return lines
