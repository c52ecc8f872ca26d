"""One keyword ranking over several FTS5 files (botmemory.search.keyword_shards).

Each shard proposes its best candidates by its own bm25, but a shard's scores rest on its
own counts: a word common in one month is rare in another, and a small shard (a server's
facts) rates every word rare. So the candidates are scored again, together, by the formula
FTS5's bm25() uses (k1 = 1.2, b = 0.75, its IDF), with the counts of all the shards summed:
documents, tokens, and documents holding each query term. Over one shard this is the order
FTS5 gives.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from botmemory.search.port import Passage
from botmemory.search.sqlite_index import KeywordAnswer

K1 = 1.2
B = 0.75
_MIN_IDF = 1e-6  # FTS5's floor for a term in more than half of the documents


def merged(
    terms: Sequence[str], answers: Sequence[KeywordAnswer]
) -> list[tuple[float, Passage, str]]:
    """(score, passage, its tokens) of every shard's candidates for these terms, best first
    (higher is better; ties: the newer passage, then the id)."""
    documents = sum(a.documents for a in answers)
    if not terms or documents == 0:
        return []
    average = max(sum(a.tokens for a in answers) / documents, 1.0)
    holding: Counter[str] = Counter()
    for answer in answers:
        holding.update(answer.holding)
    idf = {
        term: max(math.log((documents - holding[term] + 0.5) / (holding[term] + 0.5)), _MIN_IDF)
        for term in terms
    }
    scored: list[tuple[float, Passage, str]] = []
    seen: set[str] = set()
    for answer in answers:
        for passage, words in answer.candidates:
            if passage.id in seen:
                continue
            seen.add(passage.id)
            counts = Counter(words.split())
            length = sum(counts.values())
            norm = K1 * (1 - B + B * length / average)
            score = sum(
                idf[term] * counts[term] * (K1 + 1) / (counts[term] + norm)
                for term in terms
                if counts[term]
            )
            scored.append((score, passage, words))
    scored.sort(key=lambda pair: (-pair[0], -pair[1].time_ms, pair[1].id))
    return scored
