"""The keyword leg's text rules, shared by every index adapter and by recall.

One tokenizer decides what a word is for documents and queries alike, so a query finds a
passage exactly when they share a token: the SQLite adapter indexes `tokens()` output
rather than raw text, BM25 here ranks on it, and `fts_match` builds FTS5 queries from it.
Scripts written without spaces between words (Han, Hiragana, Katakana, Thai) and Hangul,
whose words carry their particles, become overlapping character bigrams ("東京タワー" gives
"東京", "京タ", "タワ", "ワー"), so a question shares tokens with the sentence that answers it.
Changing a rule here changes what stored indexes hold: bump TOKENS_VERSION, and the SQLite
index rebuilds its keyword column when it next opens (S3 Vectors re-ranks at query time).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache

from botmemory.search import rules

MAX_QUERY_CHARS = 4000
# Longer runs are hashes or keyboard mashing: cut, identically on both sides.
MAX_TOKEN_CHARS = 64
# Tokens of one text at most: a Discord message (4,000 characters) and its context fit,
# 10,000 Han characters without a space are clipped instead of giving 9,999 bigrams.
MAX_TOKENS = 5000
# Which rules stored keyword text was made by: bumped whenever tokens() changes output.
TOKENS_VERSION = 3

# Runs of these are cut into bigrams: Han (with 々 and 〇), Hiragana, Katakana (with the
# half-width forms NFKC leaves), Hangul syllables and jamo, and Thai letters and marks
# (not Thai digits, which are numbers).
_DENSE = (
    "\u1100-\u11ff\u3005\u3007\u3040-\u309f\u30a0-\u30ff\u3130-\u318f\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0003134f\u0e01-\u0e4f"
)
_RUN_RE = re.compile(f"([{_DENSE}]+)|([^{_DENSE}]+)")
# A Thai letter and the vowel and tone marks written on it are one unit of a bigram, so
# "กิน" is one token rather than three pairs with a lone mark in each.
_UNIT_RE = re.compile("(?s).[\u0e31\u0e34-\u0e3a\u0e47-\u0e4e]*")

# Python's \w leaves out combining marks, which would break words apart in scripts such as
# Devanagari or Arabic; these ranges let a mark continue the word it belongs to.
_MARKS = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7"
    "\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06e4\u06e7\u06e8\u06ea-\u06ed"
    "\u0900-\u0963\u0966-\u0dff\u0e31\u0e34-\u0e3a\u0e47-\u0e4e"
    "\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
)
# A word starts with a letter or digit (never "_") and runs on through letters, digits and marks.
_WORD_RE = re.compile(rf"[^\W_](?:[^\W_]|[{_MARKS}])*")
# Zero-width and soft-hyphen characters can sit inside a word unseen: drop them so they
# do not split it.
_INVISIBLE_RE = re.compile("[\u00ad\u200b\u200c\u200d\u2060\ufeff]")
# C0/C1 controls (tab and line breaks become spaces first), bidi controls, lone surrogates.
_CONTROL_RE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_BREAKS_RE = re.compile("[\t\n\r\v\f\u2028\u2029]")
_SPACES_RE = re.compile(r"\s+")

# Small on purpose: words that carry no topic. Modal "will", "may", "can" are left out
# because they are also names.
_STOPWORD_TEXT = """
    a about after again all also am an and any are as at be because been before being but
    by d did do does doing during each few for from had has have having he her here
    hers herself him himself his how i if in into is it its itself just ll m me more most
    my myself no nor not of off on once only or other our ours ourselves out over own re
    s same she should so some such t than that the their theirs them themselves then there
    these they this those through to too under until up ve very was we were what when
    where which while who whom why with would you your yours yourself yourselves
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

# A warm function stems the same words again and again (a channel's vocabulary is small);
# Porter2 in pure Python takes tens of microseconds a word, a cached one well under one.
_STEM_CACHE = 65_536


@lru_cache(maxsize=1)
def _english() -> Callable[[str], str]:
    # Imported on first use, not with this module: the package loads every language's
    # stemmer (about 20 ms), which a function that never searches should not pay at start.
    from snowballstemmer.english_stemmer import EnglishStemmer

    return EnglishStemmer().stemWord  # type: ignore[no-any-return]


@lru_cache(maxsize=_STEM_CACHE)
def stem(word: str) -> str:
    """English words by Porter2 (the Snowball English stemmer): "painting", "painted" and
    "paints" all give "paint", "mentored" gives "mentor", "collaborate" and "collaboration"
    give "collabor". Chosen over a light stemmer of our own because `make eval` found it at
    least as good at every block size (docs/eval.md).

    Only lowercase ASCII words are touched; numbers, mixed tokens and other scripts pass
    through unchanged (an English stemmer would mangle them). Meant to make query and
    document forms meet, not to be a lemma.
    """
    if not (word.isascii() and word.isalpha()) or len(word) < 3:
        return word
    return _english()(word)


def _bigrams(run: str) -> list[str]:
    """Overlapping pairs of a run's characters (a Thai letter with its marks counting as one);
    a lone character is its own token."""
    units = _UNIT_RE.findall(run[: MAX_TOKENS + 1])
    if len(units) < 2:
        return units
    return [units[i] + units[i + 1] for i in range(len(units) - 1)]


def tokens(text: str) -> list[str]:
    """The searchable tokens of a text, in order: words lowercased (NFKC, so full-width
    letters and digits are plain ones) and stemmed, stopwords removed, numbers always kept
    ("1.5" gives "1" and "5"), runs of scripts without spaces as character bigrams (a word
    mixing scripts, "iPhone15を買った", splits where the script changes); at most MAX_TOKENS."""
    text = _INVISIBLE_RE.sub("", unicodedata.normalize("NFKC", text)).casefold()
    out: list[str] = []
    for match in _WORD_RE.finditer(text):
        for dense, other in _RUN_RE.findall(match.group()):
            if dense:
                out += _bigrams(dense)
                continue
            word = other[:MAX_TOKEN_CHARS]
            if word not in STOPWORDS:
                out.append(stem(word))
        if len(out) >= MAX_TOKENS:
            break
    return out[:MAX_TOKENS]


MAX_QUERY_TERMS = 32  # distinct tokens of a query that search looks for

# Words that frame a question rather than say what it is about ("what kind of art",
# "how many dogs", "did she mention"): rare in what people say, so BM25 would weigh them
# most, and a message saying "so kind of you" would lead. Left out of queries only.
_QUESTION_FRAME_TEXT = "kind type sort describe mention many much recently currently"
QUESTION_FRAME = frozenset(stem(word) for word in _QUESTION_FRAME_TEXT.split())


def query_terms(text: str, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """The distinct tokens of a query text that search looks for, in their order: the
    question's framing words left out, unless they are all it has."""
    terms = list(dict.fromkeys(tokens(text[: MAX_QUERY_CHARS * 4])))
    frame = QUESTION_FRAME if rules.current().question_frame else frozenset()
    about = [term for term in terms if term not in frame]
    return (about or terms)[: max(max_terms, 0)]


def fts_match(text: str, max_terms: int = MAX_QUERY_TERMS) -> str | None:
    """A SQLite FTS5 MATCH expression for any query text, or None when it has no token.

    Each distinct token becomes one double-quoted string, so nothing the user typed is
    read as FTS5 syntax; strings are ORed so any shared token is a hit and bm25() ranks.
    Meant for a column that holds `tokens()` output under the unicode61 tokenizer.
    """
    return match_of(query_terms(text, max_terms))


# Pseudo-relevance feedback: a second keyword pass widened with the words the first pass's
# best passages share, fused with the first (search/sqlite_index, search/postgres_sql).
# `make eval` (docs/eval.md), keyword-only, strict, conversations 26 and 30, at 2,000 /
# 4,000 / 8,000 characters: 71.9 / 82.3 / 86.1% without; with 8 words from the best 5
# passages 72.7 / 84.0 / 89.6% (5 words: 72.7 / 83.5 / 88.3; 3: no change; 8 from the
# best 10: 70.6 / 83.5 / 87.0; 5 from the best 3: no change).
FEEDBACK_PASSAGES = 5
FEEDBACK_TERMS = 8
MIN_FEEDBACK_CHARS = 3  # the shortest feedback word (postgres_sql builds the same pass)


def feedback_terms(terms: Sequence[str], best: Sequence[str]) -> list[str]:
    """The words to widen a query with: the most frequent tokens of the first pass's best
    passages (`best`: each one's tokens joined by spaces, best first) that at least two of
    them hold, not already asked and of at least 3 characters; ties by first appearance.
    None with the feedback pass switched off (search.rules)."""
    if not rules.current().feedback_pass:
        return []
    asked = set(terms)
    counts: dict[str, int] = {}
    holders: dict[str, int] = {}
    for words in best[:FEEDBACK_PASSAGES]:
        tokens_of = words.split()
        for token in tokens_of:
            counts[token] = counts.get(token, 0) + 1
        for token in set(tokens_of):
            holders[token] = holders.get(token, 0) + 1
    chosen = [
        t for t in counts if t not in asked and len(t) >= MIN_FEEDBACK_CHARS and holders[t] >= 2
    ]
    chosen.sort(key=lambda t: -counts[t])  # stable: first appearance breaks ties
    return chosen[:FEEDBACK_TERMS]


def match_of(terms: Sequence[str]) -> str | None:
    """The FTS5 MATCH expression of tokens (None for none), each a double-quoted string."""
    distinct = list(dict.fromkeys(terms))
    if not distinct:
        return None
    # Tokens never hold a quote; doubling one anyway keeps the string closed if that changes.
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in distinct)


def clip_query(text: str) -> tuple[str | None, str | None]:
    """Clean a query for search: (query, None), (clipped query, reason) or (None, reason).

    Controls and invisible characters go, line breaks become spaces, runs of whitespace
    collapse, and the result is cut to MAX_QUERY_CHARS. A query with no letter or digit
    left is empty.
    """
    text = _BREAKS_RE.sub(" ", text)
    text = _INVISIBLE_RE.sub("", _CONTROL_RE.sub("", text))
    text = _SPACES_RE.sub(" ", text).strip()
    if _WORD_RE.search(text) is None:
        return None, "empty query"
    if len(text) <= MAX_QUERY_CHARS:
        return text, None
    return text[:MAX_QUERY_CHARS].rstrip(), f"query clipped to {MAX_QUERY_CHARS} characters"


class Bm25:
    """Okapi BM25 over a fixed list of documents, in memory.

    IDF is the non-negative form log(1 + (N - df + 0.5) / (df + 0.5)), so a term found in
    most documents still counts a little instead of counting against a match.
    """

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self._k1 = k1
        self._b = b
        self._counts = [Counter(tokens(doc)) for doc in documents]
        self._lengths = [sum(c.values()) for c in self._counts]
        total = sum(self._lengths)
        self._avg_length = total / len(self._counts) if total else 1.0
        self._df: Counter[str] = Counter()
        for counts in self._counts:
            self._df.update(counts.keys())

    def _idf(self, term: str) -> float:
        n, df = len(self._counts), self._df[term]
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def scores(self, query: str) -> list[float]:
        """One score per document, in document order; 0.0 where no query token occurs."""
        terms = [t for t in query_terms(query, MAX_TOKENS) if self._df[t]]
        idf = {t: self._idf(t) for t in terms}
        out: list[float] = []
        for counts, length in zip(self._counts, self._lengths, strict=True):
            norm = self._k1 * (1.0 - self._b + self._b * length / self._avg_length)
            score = 0.0
            for term in terms:
                tf = counts.get(term, 0)
                if tf:
                    score += idf[term] * tf * (self._k1 + 1.0) / (tf + norm)
            out.append(score)
        return out


def rank(query: str, documents: Sequence[str]) -> list[tuple[int, float]]:
    """(document index, score) for the documents that share a token with the query, best
    first, ties by lower index."""
    scored = [(i, s) for i, s in enumerate(Bm25(documents).scores(query)) if s > 0.0]
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored
