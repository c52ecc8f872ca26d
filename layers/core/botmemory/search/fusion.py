"""Reciprocal rank fusion: merge ranked id lists by rank alone, so legs whose scores are
not comparable (BM25, cosine) can be combined without calibration."""

from __future__ import annotations

from collections.abc import Sequence

from botmemory.search import rules
from botmemory.search.port import Passage, SearchHit

# RRF's constant for the search legs (keywords and vectors): how fast a lower rank stops
# counting. The usual 60 lets a passage near the top of both legs lose to one far down in
# each; 10 keeps what either leg ranks first at the top. `make eval` (docs/eval.md),
# embedded hybrid, strict, conversations 26 and 30: at 2,000 / 4,000 / 8,000 characters
# 72.7 / 82.7 / 86.6% with 60, 75.8 / 85.7 / 88.7% with 10 (3: 74.0 / 85.3 / 89.6; 20:
# 74.9 / 85.7 / 88.3).
LEGS_K = rules.TODAY.legs_k


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


def fused_legs(
    keyword: Sequence[Passage],
    vector: Sequence[Passage],
    limit: int,
    *,
    k: int | None = None,
    vector_first: bool = False,
) -> list[SearchHit]:
    """The two legs' passages (each best first) as hits, fused by RRF, each with its rank in
    either leg. Ties keep the first-listed leg's order (`vector_first` lists the vectors);
    `k` by default LEGS_K, as search.rules has it in force."""
    if k is None:
        k = rules.current().legs_k
    by_id = {p.id: p for p in vector} | {p.id: p for p in keyword}
    keyword_ids = [p.id for p in keyword]
    vector_ids = [p.id for p in vector]
    keyword_rank = {pid: n for n, pid in enumerate(keyword_ids, start=1)}
    vector_rank = {pid: n for n, pid in enumerate(vector_ids, start=1)}
    rankings = [vector_ids, keyword_ids] if vector_first else [keyword_ids, vector_ids]
    return [
        SearchHit(
            passage=by_id[pid],
            score=score,
            keyword_rank=keyword_rank.get(pid),
            vector_rank=vector_rank.get(pid),
        )
        for pid, score in reciprocal_rank_fusion(rankings, k=k)[:limit]
    ]
