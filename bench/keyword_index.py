"""3f. The keyword index under bigram tokens against today's rule, on 100,000 messages.

Today's rule (before issue 29) made each run of letters one token, so a sentence written
without spaces was one token no question shared. Bigram tokens cut such runs into
overlapping character pairs. This table measures what that costs: the FTS5 index's size and
a query's time over 100,000 messages, in English (the history of table 3c, whose tokens the
change leaves alone) and in Japanese (the same draw from a Japanese vocabulary, written
without spaces), each indexed under both rules as SqliteSearchIndex indexes its keyword
column (unicode61 keeping marks, bm25 order).

3h. Beside the English FTS5 column, the deployed keyword shard of those messages: the whole
file one channel's S3KeywordIndex shard is (passages, their JSON, FTS5), and its query.
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import tempfile
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

from tables import print_table
from world import MESSAGE_WORDS, T0, consumed_observation, varied_lines

from botmemory.clock import ManualClock
from botmemory.records import scope_of
from botmemory.search.keyword_layout import SHARD_SUFFIX
from botmemory.search.keyword_shards import CACHE_BYTES
from botmemory.search.keywords import _WORD_RE, MAX_TOKEN_CHARS, STOPWORDS, stem, tokens
from botmemory.search.passages import message_passages
from botmemory.search.port import SearchQuery
from botmemory.search.sqlite_index import CANDIDATE_FACTOR, SqliteSearchIndex
from localrun import gateway as gw

MESSAGES = 100_000
TIMINGS = 5
DEPTH = 200  # rows asked of FTS5 per query: recall asks at most 4 x 50
SHARD_BATCH = 10_000  # passages per add while building the shard
ENGLISH_QUERY = "who baked bread on Sunday?"
JAPANESE_QUERY = "日曜日にパンを焼いたのは誰?"
JAPANESE_WORDS = [
    "日曜日",
    "パン",
    "焼いた",
    "友達",
    "公園",
    "散歩",
    "映画",
    "見た",
    "新しい",
    "仕事",
    "始めた",
    "猫",
    "犬",
    "ラーメン",
    "食べた",
    "電車",
    "遅れた",
    "雨",
    "降った",
    "旅行",
    "京都",
    "大阪",
    "東京",
    "買い物",
    "本",
    "読んだ",
    "音楽",
    "聴いた",
    "料理",
    "作った",
    "週末",
    "家族",
    "会った",
    "朝",
    "夜",
    "コーヒー",
    "飲んだ",
    "試験",
    "合格",
    "誕生日",
    "プレゼント",
    "海",
    "山",
    "登った",
    "写真",
    "撮った",
    "ゲーム",
    "した",
    "会議",
    "終わった",
]


def today_tokens(text: str) -> list[str]:
    """The rule before bigrams: every run of word characters one token."""
    text = unicodedata.normalize("NFKC", text).casefold()
    words = (w[:MAX_TOKEN_CHARS] for w in _WORD_RE.findall(text))
    return [stem(w) for w in words if w not in STOPWORDS]


def japanese_lines(seed: int) -> Callable[[int], str]:
    draw = random.Random(seed)

    def line(_: int) -> str:
        return "".join(draw.choices(JAPANESE_WORDS, k=draw.randint(*MESSAGE_WORDS)))

    return line


def measure(
    folder: Path, name: str, texts: list[str], rule: Callable[[str], list[str]], query: str
) -> tuple[float, float, int]:
    """(index MB, median query ms, rows matched) of an FTS5 keyword column under a rule."""
    path = folder / f"{name}.sqlite3"
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            "CREATE VIRTUAL TABLE k USING fts5(terms, tokenize=\"unicode61 categories 'L* N* Co M*'\")"
        )
        conn.executemany("INSERT INTO k (terms) VALUES (?)", ((" ".join(rule(t)),) for t in texts))
        conn.commit()
        conn.execute("VACUUM")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        match = " OR ".join(f'"{term}"' for term in dict.fromkeys(rule(query))) or '""'
        sql = "SELECT rowid FROM k WHERE k MATCH ? ORDER BY bm25(k) LIMIT ?"
        timings, matched = [], 0
        for _ in range(TIMINGS):
            started = time.perf_counter()
            matched = len(conn.execute(sql, (match, DEPTH)).fetchall())
            timings.append((time.perf_counter() - started) * 1000)
        return pages * size / 1_000_000, statistics.median(timings), matched
    finally:
        conn.close()


def measure_shard(folder: Path, texts: list[str], query: str) -> tuple[float, float, int]:
    """(file MB, median query ms, rows matched) of one channel's keyword shard holding these
    messages: the file S3KeywordIndex keeps in S3 (SqliteSearchIndex without an embedder,
    one file, compacted as a write that replaced rows leaves it), searched as it searches
    a shard (keyword_answer, DEPTH rows)."""
    clock = ManualClock(T0)
    history = [
        consumed_observation(i, T0 - (len(texts) - i) * 1000, clock, text)
        for i, text in enumerate(texts)
    ]
    scope = scope_of(gw.GUILD)
    passages = message_passages(history, scope, gw.BOT)
    path = folder / f"shard{SHARD_SUFFIX}"
    index = SqliteSearchIndex(str(path), wal=False)
    try:
        for start in range(0, len(passages), SHARD_BATCH):
            index.add(passages[start : start + SHARD_BATCH])
        index.compact()
        asked = SearchQuery(
            scope=scope,
            channel_ids=[gw.CHANNEL, ""],
            text=query,
            limit=DEPTH // CANDIDATE_FACTOR,
            now_s=0,
        )
        timings, matched = [], 0
        for _ in range(TIMINGS):
            started = time.perf_counter()
            matched = len(index.keyword_answer(asked, DEPTH).candidates)
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        index.close()
    return path.stat().st_size / 1_000_000, statistics.median(timings), matched


def print_shard(column: tuple[float, float, int], shard: tuple[float, float, int]) -> None:
    print_table(
        f"3h. One channel's keyword shard at {MESSAGES:,} messages, beside 3f's FTS5 column",
        ["figure", "FTS5 column alone (3f, bigrams)", "keyword shard (deployed)"],
        [
            ("English: size, MB", column[0], shard[0]),
            (f"English: query, ms (median of {TIMINGS})", column[1], shard[1]),
            (f"English: messages the query matches (of {DEPTH} asked)", column[2], shard[2]),
        ],
        [
            "The shard is the file S3KeywordIndex keeps per channel in S3: SqliteSearchIndex",
            "without an embedder (the passages, their JSON and the FTS5 index), compacted. Its",
            "query is keyword_answer, as a search runs it on each shard, after a GetObject that",
            "answers 304 in a warm container (3g); a new container downloads the whole file",
            f"first, and keeps it in /tmp ({CACHE_BYTES // 2**20} MB of shards at most,"
            " CACHE_BYTES). The same English messages",
            "as 3f, as message passages (a short one carries the one before it), one channel.",
        ],
    )


def bench_keyword_index() -> None:
    english_line, japanese_line = varied_lines(seed=MESSAGES), japanese_lines(seed=MESSAGES)
    english = [english_line(i) for i in range(MESSAGES)]
    japanese = [japanese_line(i) for i in range(MESSAGES)]
    rows = []
    english_bigrams = (0.0, 0.0, 0)
    with tempfile.TemporaryDirectory() as folder:
        shard = measure_shard(Path(folder), english, ENGLISH_QUERY)
        for language, texts, query in (
            ("English", english, ENGLISH_QUERY),
            ("Japanese", japanese, JAPANESE_QUERY),
        ):
            before = measure(Path(folder), f"{language}-today", texts, today_tokens, query)
            after = measure(Path(folder), f"{language}-bigrams", texts, tokens, query)
            if texts is english:
                english_bigrams = after
            rows += [
                (f"{language}: index size, MB", before[0], after[0]),
                (f"{language}: query, ms (median of {TIMINGS})", before[1], after[1]),
                (
                    f"{language}: messages the query matches (of {DEPTH} asked)",
                    *before[2:],
                    after[2],
                ),
            ]
    print_table(
        f"3f. The keyword index: today's rule vs bigram tokens, {MESSAGES:,} messages",
        ["figure", "whole runs (before)", "bigrams (now)"],
        rows,
        [
            f'queries: "{ENGLISH_QUERY}" and "{JAPANESE_QUERY}"',
            "English tokens are the same under both rules; under the old rule no Japanese",
            "question matched a message (a whole sentence was one token), so its query was fast",
            "because it found nothing. Sizes are the FTS5 table after VACUUM (page_count x",
            "page_size); the embedded index also stores each passage's JSON beside it.",
        ],
    )
    print_shard(english_bigrams, shard)
