"""A small BM25 (Okapi) over short texts, with a simple tokenizer and light suffix stemming.

The evaluation's keyword baseline: rank a conversation's raw turns by a question. Names and
numbers are kept as tokens; a short list of English function words is dropped; words lose
their most common inflections ("hiking", "hiked", "hikes" and "hike" all become "hik"), so a
question and a turn that word the same thing differently still meet.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

K1 = 1.2
B = 0.75

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORD_LIST = """
    a about after again all also am an and any are as at be been before being both but by
    can could did do does doing done for from had has have having he her here hers herself
    him himself his how i if in into is it its itself just me more most my myself no nor not
    now of off on once only or other our ours out over own s same she should so some such t
    than that the their theirs them themselves then there these they this those through to
    too under until up very was we were what when where which while who whom why will with
    would you your yours yourself d ll m re ve don didn doesn isn wasn aren weren won
"""
STOPWORDS = frozenset(_STOPWORD_LIST.split())
# Doubled consonants that stay doubled when a suffix comes off ("falling" -> "fall").
_KEEP_DOUBLE = frozenset("lsz")


def stem(word: str) -> str:
    """A word without its most common English inflection; names and numbers pass through."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") or word.endswith("ied"):
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ing") and len(word) >= 6:
        word = _undouble(word[:-3])
    elif word.endswith("ed") and len(word) >= 5:
        word = _undouble(word[:-2])
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def _undouble(stem_: str) -> str:
    if len(stem_) >= 3 and stem_[-1] == stem_[-2] and stem_[-1] not in _KEEP_DOUBLE:
        return stem_[:-1]
    return stem_


def tokenize(text: str) -> list[str]:
    """Lower-cased, stemmed words of a text, function words left out."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


class BM25:
    """An index of documents, ranked against a query by Okapi BM25."""

    def __init__(self, documents: Sequence[str], *, k1: float = K1, b: float = B) -> None:
        self._k1 = k1
        self._b = b
        self._terms = [Counter(tokenize(doc)) for doc in documents]
        self._lengths = [sum(terms.values()) for terms in self._terms]
        count = len(documents)
        self._average = (sum(self._lengths) / count) if count else 0.0
        frequency: Counter[str] = Counter()
        for terms in self._terms:
            frequency.update(terms.keys())
        self._idf = {
            term: math.log(1 + (count - df + 0.5) / (df + 0.5)) for term, df in frequency.items()
        }

    def __len__(self) -> int:
        return len(self._terms)

    def scores(self, query: str) -> list[float]:
        """The score of every document, in document order (0.0 when nothing matches)."""
        wanted = set(tokenize(query)) & self._idf.keys()
        scores = [0.0] * len(self._terms)
        if not wanted:
            return scores
        for index, terms in enumerate(self._terms):
            norm = self._k1 * (1 - self._b + self._b * self._lengths[index] / self._average)
            total = 0.0
            for term in wanted:
                tf = terms.get(term, 0)
                if tf:
                    total += self._idf[term] * tf * (self._k1 + 1) / (tf + norm)
            scores[index] = total
        return scores

    def rank(self, query: str) -> list[int]:
        """Indexes of the documents that match the query, best first (ties: earlier first)."""
        scores = self.scores(query)
        matching = [i for i, score in enumerate(scores) if score > 0]
        return sorted(matching, key=lambda i: (-scores[i], i))
