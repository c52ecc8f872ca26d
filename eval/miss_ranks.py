"""Where the evidence of the questions recall misses ranks in the keyword leg.

A miss at a block size is either a budget miss (search found the evidence, but below what
the block had room for) or a vocabulary miss (the keyword leg does not rank it at all: the
question and the answer share no word, which only a vector leg can bridge). This replays the
conversations as `make eval` does (keyword-only), and for each question the block misses
(the strict count) asks the keyword leg again for 100 hits and reports where the first one
whose own message is an evidence turn stands (docs/eval.md reads the figures).

    python -m eval.miss_ranks [--conversations 26,30] [--quick] [--chars 4000] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

from eval.dataset import conversation_paths
from eval.harness import RANKED_HITS, ConversationReport, QuestionOutcome, search_depth_at
from eval.locomo import QUICK_CONVERSATIONS, run_all, say
from localrun.motoserver import LocalRunError
from localrun.replay import SHARED_DATASET

# Rank bands the report counts misses in, beyond the hits the block asks for.
BANDS = (5, 10, 20, 50)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="eval.miss_ranks", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=SHARED_DATASET)
    parser.add_argument(
        "--conversations", type=lambda text: [i for i in text.replace(",", " ").split() if i]
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chars", type=int, default=4_000, help="the block size (default 4,000)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    if args.chars < 1 or args.jobs < 1:
        parser.error("--chars and --jobs must be at least 1")
    return args


def bands(asked: int) -> list[tuple[int, str]]:
    """(highest rank, name) of each band, best first: ranks within what the block asks,
    then below it, then not found (rank 0 sorts last as RANKED_HITS + 1)."""
    named: list[tuple[int, str]] = []
    low = 1
    for high in (*(b for b in BANDS if b < asked), asked):
        named.append((high, f"ranks {low}-{high}"))
        low = high + 1
    named.append((RANKED_HITS, f"ranks {asked + 1}-{RANKED_HITS} (below the hits asked)"))
    named.append((RANKED_HITS + 1, f"not in the first {RANKED_HITS}"))
    return named


def band_of(rank: int, asked: int) -> str:
    """The band a missed question's evidence rank (0: not found) falls in."""
    position = rank or RANKED_HITS + 1
    return next(name for high, name in bands(asked) if position <= high)


def lines(reports: list[ConversationReport], chars: int) -> list[str]:
    misses: list[QuestionOutcome] = [
        q for r in reports for q in r.questions if q.miss_rank is not None
    ]
    asked = search_depth_at(chars)
    total = sum(len(r.questions) for r in reports)
    counts = Counter(band_of(q.miss_rank or 0, asked) for q in misses)
    by_category = Counter((q.category, band_of(q.miss_rank or 0, asked)) for q in misses)
    categories = sorted({q.category for q in misses})
    out = [
        f"{len(misses)} of {total} questions missed at {chars:,} characters (strict, "
        f"keyword-only); the block asks {asked} hits. Where their evidence ranks:"
    ]
    for _, name in bands(asked):
        per = ", ".join(
            f"category {c}: {by_category[(c, name)]}" for c in categories if by_category[(c, name)]
        )
        out.append(f"  {name:<40} {counts[name]:>5}" + (f"  ({per})" if per else ""))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        paths = conversation_paths(args.dataset, args.conversations)
    except LocalRunError as error:
        print(f"eval.miss_ranks: {error}", file=sys.stderr)
        return 2
    if args.quick:
        paths = paths[:QUICK_CONVERSATIONS]
    reports = run_all(
        paths, None, args.jobs, vectors=False, sizes=(args.chars,), rank_misses_at=args.chars
    )
    for line in lines(reports, args.chars):
        say(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
