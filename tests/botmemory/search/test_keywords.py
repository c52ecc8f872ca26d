from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from botmemory.search.fusion import reciprocal_rank_fusion
from botmemory.search.keywords import (
    MAX_QUERY_CHARS,
    STOPWORDS,
    Bm25,
    clip_query,
    fts_match,
    query_terms,
    rank,
    stem,
    tokens,
)

# --- tokens and the stemmer -------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "document"),
    [
        ("potteries", "pottery"),
        ("painting", "paint"),
        ("camping", "camp"),
        ("painted", "paints"),
        ("hiking", "hike"),
        ("running", "run"),
        ("classes", "class"),
        ("boxes", "box"),
        ("families", "family"),
        ("quickly", "quick"),
        ("movies", "movie"),
        # Porter2's, which a light stemmer misses.
        ("mentored", "mentor"),
        ("collaborate", "collaboration"),
        ("generously", "generous"),
        ("tried", "try"),
    ],
)
def test_inflected_forms_share_a_stem(query: str, document: str) -> None:
    assert tokens(query) == tokens(document)
    assert len(tokens(query)) == 1


@pytest.mark.parametrize(
    "word", ["thing", "sing", "string", "speed", "shed", "add", "bus", "class", "tennis"]
)
def test_short_or_suffix_like_words_keep_their_body(word: str) -> None:
    # A suffix is only taken off when a real stem is left ("tennis" may lose its s).
    assert word.startswith(stem(word)) and len(stem(word)) >= len(word) - 1
    assert len(stem(word)) >= 3


def test_unrelated_words_stay_apart() -> None:
    assert tokens("painter") != tokens("paint")
    assert tokens("pottery") != tokens("potter")


def test_lowercase_and_unicode_words() -> None:
    assert tokens("POTTERY Pottery pottery") == tokens("pottery") * 3
    assert tokens("Café naïve") == ["café", "naïve"]
    # Combining marks continue a word instead of splitting it.
    assert tokens("हिन्दी भाषा") == ["हिन्दी", "भाषा"]
    assert tokens("中文") == ["中文"]


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("in 2023 we met", ["2023"]),
        ("meet at 3pm", ["3pm"]),
        ("ran a 5k", ["5k"]),
        ("version 1.5", ["1", "5"]),
        ("0 1 2 42", ["0", "1", "2", "42"]),
        ("٢٠٢٣", ["٢٠٢٣"]),
    ],
)
def test_numbers_are_never_dropped(text: str, numbers: list[str]) -> None:
    got = tokens(text)
    for number in numbers:
        assert number in got


def test_stopwords_go_but_numbers_and_names_stay() -> None:
    assert tokens("the and of a to is was") == []
    assert tokens("what did Alice say to Bob") == tokens("Alice say Bob")
    assert tokens("Will and May") == [stem("will"), stem("may")]  # names, so not stopwords
    assert tokens("Don's dog") == ["don", "dog"]
    assert not any(word.isdigit() for word in STOPWORDS)


def test_underscores_and_invisible_characters_split_or_vanish_predictably() -> None:
    assert tokens("snake_case") == tokens("snake case")
    assert len(tokens("snake_case")) == 2
    assert tokens("pot\u200btery") == tokens("pottery")  # a zero-width space hides nothing
    assert tokens("pot\u00adtery") == tokens("pottery")


def test_overlong_runs_are_cut_alike_on_both_sides() -> None:
    long_word = "x" * 10_000
    (token,) = tokens(long_word)
    assert tokens(long_word + "y") == [token]
    assert len(token) == 64


def test_tokens_never_raise() -> None:
    for text in ["", "\x00\x01", "\ud800 lone surrogate", "💥🔥", "___", "a" * 1_000_000]:
        tokens(text)


# --- fts_match --------------------------------------------------------------------------

HOSTILE = [
    '"',
    '"""',
    'pottery"',
    "NEAR(pottery class)",
    "NEAR(",
    "pot*",
    "*",
    "^pottery",
    "terms:pottery",
    "col: pottery",
    "(pottery",
    "pottery)) OR ((",
    "pottery AND NOT class",
    "pottery OR",
    "- pottery",
    "{terms}: x",
    "\x00\x01\x02",
    "a" * 1_000_000,
    "pottery " * 200_000,
    "",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_fts_match_is_always_valid_fts5(text: str) -> None:
    expression = fts_match(text)
    if expression is None:
        return
    with closing(sqlite3.connect(":memory:")) as connection:
        connection.execute("CREATE VIRTUAL TABLE t USING fts5(terms, tokenize='unicode61')")
        connection.execute("INSERT INTO t VALUES ('potteri class')")
        connection.execute("INSERT INTO t VALUES ('unrelated words only')")
        rows = connection.execute("SELECT terms FROM t WHERE t MATCH ?", (expression,)).fetchall()
    assert len(rows) <= 1  # never everything


def test_fts_match_quotes_each_distinct_token() -> None:
    assert fts_match("Potteries pottery NEAR(class*)") == '"potteri" OR "near" OR "class"'
    assert fts_match('say "hi" col:x') == '"say" OR "hi" OR "col" OR "x"'


def test_fts_match_caps_terms_and_has_nothing_for_stopwords() -> None:
    expression = fts_match(" ".join(f"w{i}" for i in range(100)), max_terms=5)
    assert expression is not None and expression.count(" OR ") == 4
    assert fts_match("the of and") is None
    assert fts_match("") is None
    assert fts_match("!!! ???") is None
    assert fts_match("2022") == '"2022"'


def test_a_question_s_framing_words_are_not_what_it_looks_for() -> None:
    assert query_terms("What kind of art does Caroline make?") == ["art", "carolin", "make"]
    assert query_terms("How many dogs did she mention?") == ["dog"]
    assert query_terms("what kind?") == ["kind"]  # all it has: kept
    assert tokens("so kind of you") == ["kind"]  # messages keep them: queries only
    # "So kind of you!" is rare, so BM25 would weigh "kind" most and put it first.
    documents = ["So kind of you, thanks!", "I paint abstract art, mostly in blue."]
    assert rank("What kind of art do you paint?", documents)[0][0] == 1
    assert [i for i, _ in rank("What kind?", documents)] == [0]


# --- clip_query -------------------------------------------------------------------------


def test_clip_query_cleans_whitespace_and_controls() -> None:
    assert clip_query("  where\n\nis   the\tpottery\x00 class\x1b? ") == (
        "where is the pottery class?",
        None,
    )
    assert clip_query("a\u202eb\ud800c") == ("abc", None)


@pytest.mark.parametrize("text", ["", "   ", "\n\t\r", "\x00\x01\x7f", "?!.,", "\u200b\u200b"])
def test_clip_query_empty(text: str) -> None:
    assert clip_query(text) == (None, "empty query")


def test_clip_query_cuts_long_queries_without_raising() -> None:
    text, reason = clip_query("pottery " * 500_000)
    assert text is not None and len(text) <= MAX_QUERY_CHARS
    assert text.startswith("pottery pottery")
    assert reason == "query clipped to 4000 characters"
    exact = "x" * MAX_QUERY_CHARS
    assert clip_query(exact) == (exact, None)
    assert clip_query(exact + "y")[1] == "query clipped to 4000 characters"


# --- BM25 -------------------------------------------------------------------------------

DOCS = [
    "Alice goes to a pottery class every Tuesday",
    "Bob ran the Berlin marathon in 2022",
    "Carol moved to Lisbon in 2019",
    "Alice and Bob went camping near the lake",
]


def test_bm25_scores_zero_without_a_shared_token() -> None:
    scores = Bm25(DOCS).scores("potteries")
    assert scores[0] > 0.0
    assert scores[1:] == [0.0, 0.0, 0.0]
    assert Bm25(DOCS).scores("the of") == [0.0] * 4
    assert Bm25([]).scores("pottery") == []
    assert Bm25(["", ""]).scores("pottery") == [0.0, 0.0]


def test_rank_finds_numbers_and_names() -> None:
    assert [i for i, _ in rank("what happened in 2022", DOCS)] == [1]
    assert [i for i, _ in rank("carol", DOCS)] == [2]
    assert {i for i, _ in rank("Alice", DOCS)} == {0, 3}


def test_rank_prefers_rarer_and_repeated_terms() -> None:
    # "alice" is in two documents, "camping" in one: the camping document leads.
    ranked = rank("alice camping", DOCS)
    assert ranked[0][0] == 3
    assert all(score > 0.0 for _, score in ranked)
    docs = ["pottery", "pottery pottery pottery", "class"]
    assert [i for i, _ in rank("pottery", docs)] == [1, 0]


def test_rank_breaks_ties_by_lower_index() -> None:
    docs = ["red car", "blue car", "red car"]
    assert [i for i, _ in rank("red", docs)] == [0, 2]


def test_bm25_length_normalisation() -> None:
    short, long = "pottery", "pottery " + " ".join(f"filler{i}" for i in range(50))
    scores = Bm25([long, short, "other"]).scores("pottery")
    assert scores[1] > scores[0] > 0.0


# --- reciprocal rank fusion -------------------------------------------------------------


def test_rrf_sums_reciprocal_ranks() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a"]], k=60)
    assert [item for item, _ in fused] == ["a", "c", "b"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)
    assert fused[1][1] == pytest.approx(1 / 63 + 1 / 61)
    assert fused[2][1] == pytest.approx(1 / 62)


def test_rrf_ties_keep_first_appearance_and_empty_is_empty() -> None:
    assert [item for item, _ in reciprocal_rank_fusion([["x", "y"], ["y", "x"]])] == ["x", "y"]
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []
    ((only, score),) = reciprocal_rank_fusion([["a", "a"]])  # a repeat counts once
    assert only == "a" and score == pytest.approx(1 / 61)
