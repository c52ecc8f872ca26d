"""Reciprocal rank fusion: merge ranked id lists by rank alone, so legs whose scores are
not comparable (BM25, cosine) can be combined without calibration."""

from __future__ import annotations

from collections.abc import Sequence


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], k: int = 60
) -> list[tuple[str, float]]:
    """(id, score) best first; an id scores the sum of 1/(k + rank) over the rankings that
    hold it (rank 1-based, an id's first place in a ranking counts once). Ties keep the
    order in which ids first appear."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(dict.fromkeys(ranking), start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    # sorted() is stable, and the dict keeps first-appearance order for the ties.
    return sorted(scores.items(), key=lambda pair: -pair[1])
