"""Every script is tokenized: text written without spaces (Japanese, Chinese, Thai) and
Korean, whose words carry their particles, is found by a question that shares its words,
through the embedded index (SQLite FTS5) and through the S3 Vectors adapter's keyword
re-rank alike; and the bad input of issue 29 gets an answer, never an error."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from botmemory.search.keywords import MAX_TOKENS, TOKENS_VERSION, fts_match, stem, tokens
from botmemory.search.port import Passage, PassageKind, SearchQuery
from botmemory.search.s3vectors_index import S3VectorsSearchIndex, metadata_of
from botmemory.search.sqlite_index import SqliteSearchIndex

SCOPE = "G#1"
NOW_S = 1_767_225_600

# (language, planted statement, fillers, question): the question shares words with the
# statement, not with the fillers, and is a question, not the statement repeated.
CASES = [
    (
        "ja",
        "来週の土曜日に大阪城でお花見をします",
        ["今日はとても暑いですね", "新しいパソコンを買いました", "駅前のラーメン屋は美味しい"],
        "お花見はどこでしますか",
    ),
    (
        "zh",
        "我下个月要去成都看大熊猫",
        ["今天的天气很好", "我的电脑坏了", "他喜欢喝咖啡"],
        "谁要去看大熊猫",
    ),
    (
        "ko",
        "다음 주에 부산에서 친구들이랑 낚시하기로 했어요",
        ["오늘 날씨가 정말 좋네요", "새 노트북을 샀다", "점심은 김치찌개를 먹었다"],
        "누가 부산으로 낚시를 가요?",
    ),
    (
        "th",
        "พรุ่งนี้ฉันจะไปเชียงใหม่กับครอบครัว",
        ["วันนี้อากาศร้อนมาก", "ฉันซื้อคอมพิวเตอร์", "ร้านกาแฟนี้อร่อย"],
        "ใครจะไปเชียงใหม่",
    ),
]


def passage(pid: str, text: str, labels: list[str] | None = None) -> Passage:
    return Passage(
        id=pid,
        kind=PassageKind.MESSAGE,
        scope=SCOPE,
        channel_id="c1",
        text=text,
        time_ms=1_000,
        authors=["111"],
        sources=[f"OBS#{pid}"],
        labels=labels or [],
    )


def query(text: str, limit: int = 20) -> SearchQuery:
    return SearchQuery(scope=SCOPE, text=text, now_s=NOW_S, limit=limit)


def corpus(statement: str, fillers: list[str]) -> list[Passage]:
    return [passage("planted", statement)] + [
        passage(f"filler-{n}", text) for n, text in enumerate(fillers)
    ]


@pytest.fixture
def sqlite_index() -> Iterator[SqliteSearchIndex]:
    index = SqliteSearchIndex()
    yield index
    index.close()


@pytest.mark.parametrize(("language", "statement", "fillers", "question"), CASES)
def test_the_embedded_index_finds_a_statement_in_a_script_without_spaces(
    sqlite_index: SqliteSearchIndex,
    language: str,
    statement: str,
    fillers: list[str],
    question: str,
) -> None:
    sqlite_index.add(corpus(statement, fillers))
    hits = sqlite_index.search(query(question))
    assert [h.passage.id for h in hits][:1] == ["planted"], language


class FixedVectors:
    name = "fake:fixed"
    dimensions = 2

    def embed(self, texts: Any) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


@pytest.mark.parametrize(("language", "statement", "fillers", "question"), CASES)
def test_the_s3_vectors_re_rank_moves_the_statement_up(
    language: str, statement: str, fillers: list[str], question: str
) -> None:
    """The vector leg returns the statement last of its candidates; the keyword re-rank,
    which shares the tokenizer, brings it first."""
    client = boto3.client(
        "s3vectors",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    docs = corpus(statement, fillers)
    nearest_first = docs[1:] + docs[:1]
    answer = {
        "vectors": [
            {"key": p.id, "metadata": metadata_of(p), "distance": 0.1 * n}
            for n, p in enumerate(nearest_first)
        ],
        "distanceMetric": "cosine",
    }
    with Stubber(client) as stub:
        stub.add_response("query_vectors", answer)
        index = S3VectorsSearchIndex("bucket", "passages", FixedVectors(), client=client)
        hits = index.search(query(question))
        stub.assert_no_pending_responses()
    assert hits[0].passage.id == "planted", language
    assert hits[0].keyword_rank == 1 and hits[0].vector_rank == len(docs)


def test_today_the_whole_run_was_one_token() -> None:
    # What made Japanese and Chinese find nothing: no question shares a run this long.
    assert "大熊猫" not in tokens("我下个月要去成都看大熊猫")
    assert {"大熊", "熊猫"} <= set(tokens("我下个月要去成都看大熊猫"))
    assert tokens("東京タワー") == ["東京", "京タ", "タワ", "ワー"]
    assert tokens("日") == ["日"]  # a lone character is its own token


def test_a_thai_letter_keeps_its_marks() -> None:
    assert tokens("กิน") == ["กิน"]  # one unit pair, not three with a lone mark in each
    assert "กิน" in tokens("ผมชอบกินข้าว")


def test_mixed_scripts_split_where_the_script_changes() -> None:
    got = tokens("Alice は iPhone15 を買った、서울에서 meeting at 3pm")
    assert {stem("alice"), "iphone15", "3pm", stem("meeting"), "서울", "에서"} <= set(got)
    assert tokens("iPhone15を買った")[:1] == ["iphone15"]
    assert "買っ" in tokens("iPhone15を買った")


def test_names_and_numbers_are_kept() -> None:
    assert "2024" in tokens("2024年に東京へ引っ越した")
    assert "๒๕๖๗" in tokens("ปี ๒๕๖๗")  # Thai digits are a number, not bigrams
    assert stem("caroline") in tokens("Carolineさんは絵を描く")


def test_full_width_forms_are_plain_ones() -> None:
    assert tokens("ＡＢＣ １２３") == tokens("abc 123")
    assert tokens("ｶﾀｶﾅ") == tokens("カタカナ")  # half-width katakana


def test_zero_width_characters_inside_a_word_hide_nothing() -> None:
    assert tokens("pot\u200dtery") == tokens("pottery")
    assert tokens("大\u200b熊\u2060猫") == tokens("大熊猫")


def test_ten_thousand_han_characters_give_a_bounded_token_count() -> None:
    got = tokens("熊" * 10_000)
    assert len(got) == MAX_TOKENS
    assert fts_match("熊猫" * 5_000) == '"熊猫" OR "猫熊"'


@pytest.mark.parametrize("text", ["😀🎉🔥", "👍🏽", "…!?。、「」", "!!! ??? ...", "\u200d\u200b"])
def test_a_query_of_only_emoji_or_punctuation_finds_nothing_without_error(
    sqlite_index: SqliteSearchIndex, text: str
) -> None:
    sqlite_index.add([passage("a", "😀 party time 🎉")])
    assert tokens(text) == []
    assert fts_match(text) is None
    assert sqlite_index.search(query(text)) == []


def test_a_long_han_query_searches_without_error(sqlite_index: SqliteSearchIndex) -> None:
    sqlite_index.add([passage("a", "我下个月要去成都看大熊猫")])
    hits = sqlite_index.search(query("成都" + "熊" * 10_000))
    assert [h.passage.id for h in hits] == ["a"]


def _write_old_file(path: Path) -> None:
    """An index file as the previous rules wrote it: whole runs as one token, names in the
    keyword text, the plain unicode61 tokenizer, user_version 0."""
    index = SqliteSearchIndex(str(path))
    index.add([passage("a", "Ada: 我下个月要去成都看大熊猫", ["Ada"])])
    index.close()
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        DROP TRIGGER passages_ai; DROP TRIGGER passages_ad; DROP TRIGGER passages_au;
        DROP TABLE passages_fts;
        UPDATE passages SET terms = 'ada 我下个月要去成都看大熊猫';
        CREATE VIRTUAL TABLE passages_fts USING fts5(
            terms, content='passages', content_rowid='pk', tokenize='unicode61');
        INSERT INTO passages_fts (passages_fts) VALUES ('rebuild');
        PRAGMA user_version = 0;
        """
    )
    conn.close()


def test_a_file_written_under_the_old_rules_is_rebuilt_on_open(tmp_path: Path) -> None:
    path = tmp_path / "search.sqlite3"
    _write_old_file(path)
    index = SqliteSearchIndex(str(path))
    try:
        assert [h.passage.id for h in index.search(query("大熊猫"))] == ["a"]
        assert index.search(query("Ada")) == []  # the label left the keyword text
    finally:
        index.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == TOKENS_VERSION
        conn.execute("INSERT INTO passages_fts (passages_fts) VALUES ('integrity-check')")
    finally:
        conn.close()
