"""The deployed keyword leg (botmemory.search.keyword_shards) on moto's S3, in process:
where shards live, what a search may reach (never another channel's words, never another
server's), what a removal leaves in S3 (nothing of the words), and writers that race."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from botmemory.clock import ManualClock
from botmemory.search import keyword_shards
from botmemory.search.keyword_layout import channel_prefix
from botmemory.search.keyword_shards import S3KeywordIndex, ShardBusy
from botmemory.search.port import Passage, PassageKind, SearchQuery
from tests.support.passages import message_passage

BUCKET = "keyword-shards-test"
GUILD = "100"
OTHER_GUILD = "900"
CHANNEL = "200"
PRIVATE = "300"
NOW_S = 1_767_225_600
# Small message ids ("M#200#1") are snowflakes of Discord's first month.
MONTH = "m2015-01"
SHARD = f"keywords/g100/c200/{MONTH}.sqlite"


def message(pid: str, text: str, channel: str = CHANNEL, guild: str = GUILD) -> Passage:
    return message_passage(pid, text, channel, guild)


def fact(fid: str, text: str, guild: str = GUILD) -> Passage:
    return Passage(
        id=f"F#{guild}#u1#{fid}",
        kind=PassageKind.FACT,
        scope=guild,
        channel_id="",
        text=text,
        time_ms=1,
    )


IN_CHANNEL = [CHANNEL, ""]  # what recall asks in CHANNEL (MEMORY_SEARCH_SCOPE=channel)


def query(text: str, channels: list[str] | None = IN_CHANNEL, guild: str = GUILD) -> SearchQuery:
    return SearchQuery(scope=guild, channel_ids=channels, text=text, now_s=NOW_S)


def index_on(s3: Any, tmp_path: Path, name: str = "a", **kwargs: Any) -> S3KeywordIndex:
    return S3KeywordIndex(BUCKET, "keywords", client=s3, cache_dir=str(tmp_path / name), **kwargs)


def stored(s3: Any) -> dict[str, bytes]:
    listing = s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listing}


def ids(hits: list[Any]) -> list[str]:
    return [h.passage.id for h in hits]


def test_each_channel_has_its_shard_and_a_servers_facts_theirs(s3: Any, tmp_path: Path) -> None:
    index = index_on(s3, tmp_path)
    index.add([message("1", "hello"), message("2", "hi", channel=PRIVATE), fact("f1", "likes tea")])
    index.add([message("3", "hola", channel="400", guild="dm")])

    assert sorted(stored(s3)) == [
        f"keywords/dm/c400/{MONTH}.sqlite",
        f"keywords/g100/c200/{MONTH}.sqlite",
        f"keywords/g100/c300/{MONTH}.sqlite",
        "keywords/g100/facts.sqlite",
    ]


def test_a_search_finds_the_channels_words_and_the_servers_facts_by_word(
    s3: Any, tmp_path: Path
) -> None:
    index = index_on(s3, tmp_path)
    index.add(
        [
            message("1", "Caroline adopted a greyhound called Zephyr"),
            message("2", "the weather is fine today"),
            fact("f1", "Caroline walks Zephyr every morning"),
        ]
    )

    assert sorted(ids(index.search(query("Zephyr")))) == ["F#100#u1#f1", "M#200#1"]
    assert ids(index.search(query("weather"))) == ["M#200#2"]


def test_a_private_channels_words_never_reach_another_channel_or_server(
    s3: Any, tmp_path: Path
) -> None:
    index = index_on(s3, tmp_path)
    index.add([message("1", "the launch code is mauve-otter-42", channel=PRIVATE)])
    index.add([message("2", "mauve-otter-42", guild=OTHER_GUILD)])

    assert index.search(query("mauve otter 42")) == []  # asked in CHANNEL
    assert ids(index.search(query("mauve otter 42", [PRIVATE]))) == ["M#300#1"]
    # A whole-server search (recall then drops what the channel may not show) lists this
    # server's shards only.
    assert ids(index.search(query("mauve otter 42", channels=None))) == ["M#300#1"]


def test_a_removed_passage_leaves_no_trace_of_its_words_in_s3(s3: Any, tmp_path: Path) -> None:
    index = index_on(s3, tmp_path)
    chatter = [message(str(n), f"ordinary chatter number {n}") for n in range(1, 40)]
    # One write: the words share an FTS segment, which a delete alone does not rewrite.
    index.add([*chatter, message("50", "my secret word is zorbquxel")])
    assert b"zorbquxel" in stored(s3)[SHARD]

    index.remove(["M#200#50"], scope=GUILD)

    body = stored(s3)[SHARD]
    assert b"zorbquxel" not in body and b"secret word" not in body
    assert index.search(query("zorbquxel")) == []
    assert len(index.search(query("chatter"))) == 39


def test_an_edit_leaves_no_trace_of_the_old_words(s3: Any, tmp_path: Path) -> None:
    index = index_on(s3, tmp_path)
    index.add([message(str(n), f"ordinary chatter number {n}") for n in range(1, 40)])
    index.add([message("50", "I live at 12 Wombleton Crescent")])

    index.add([message("50", "never mind, forget that")])

    assert b"wombleton" not in stored(s3)[SHARD].lower()
    assert ids(index.search(query("forget"))) == ["M#200#50"]


def test_removal_without_a_scope_finds_the_shard_by_the_id(s3: Any, tmp_path: Path) -> None:
    index = index_on(s3, tmp_path)
    index.add([message("1", "zebra crossing"), fact("f1", "owns a zebra")])

    index.remove(["M#200#1", "F#100#u1#f1"])

    assert index.search(query("zebra")) == []


def test_another_containers_write_is_seen_at_the_next_search(s3: Any, tmp_path: Path) -> None:
    reader = index_on(s3, tmp_path, "reader")
    writer = index_on(s3, tmp_path, "writer")
    writer.add([message("1", "first words")])
    assert ids(reader.search(query("words"))) == ["M#200#1"]  # now cached by the reader

    writer.add([message("2", "second words")])
    writer.remove(["M#200#1"], scope=GUILD)

    assert ids(reader.search(query("words"))) == ["M#200#2"]


class RacingS3:
    """An S3 client on which another writer changes the shard just before this one's first
    conditional write (or before every write, `always`)."""

    def __init__(self, s3: Any, other: S3KeywordIndex, always: bool = False) -> None:
        self._s3 = s3
        self._other = other
        self._always = always
        self.puts = 0

    def put_object(self, **request: Any) -> Any:
        self.puts += 1
        if self.puts == 1 or self._always:
            self._other.add([message(str(100 + self.puts), f"rival words {self.puts}")])
        return self._s3.put_object(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)


def test_a_write_that_loses_a_race_is_redone_and_both_writes_survive(
    s3: Any, tmp_path: Path
) -> None:
    other = index_on(s3, tmp_path, "other")
    other.add([message("1", "seed words")])
    racing = RacingS3(s3, other)
    index = S3KeywordIndex(BUCKET, "keywords", client=racing, cache_dir=str(tmp_path / "a"))

    index.add([message("2", "my words")])

    assert index.lost_races == 1
    assert sorted(ids(index.search(query("words")))) == ["M#200#1", "M#200#101", "M#200#2"]


def test_a_shard_always_changed_underneath_gives_up_with_shard_busy(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_shards, "WRITE_ATTEMPTS", 3)
    other = index_on(s3, tmp_path, "other")
    racing = RacingS3(s3, other, always=True)
    index = S3KeywordIndex(BUCKET, "keywords", client=racing, cache_dir=str(tmp_path / "a"))

    with pytest.raises(ShardBusy):
        index.add([message("2", "my words")])

    assert index.lost_races == 3
    assert "M#200#2" not in ids(other.search(query("words")))


def test_a_server_purge_deletes_its_shards_and_no_others(s3: Any, tmp_path: Path) -> None:
    index = index_on(s3, tmp_path)
    index.add([message("1", "alpha"), fact("f1", "alpha fact")])
    index.add([message("2", "alpha", guild=OTHER_GUILD)])

    assert index.drop_scope(GUILD) == 2

    assert sorted(stored(s3)) == [f"keywords/g900/c200/{MONTH}.sqlite"]
    assert index.search(query("alpha")) == []


def test_the_cache_keeps_within_its_bytes(s3: Any, tmp_path: Path) -> None:
    index = index_on(s3, tmp_path, cache_bytes=1)
    for channel in ("201", "202", "203"):
        index.add([message("1", "cached words", channel=channel)])

    assert len(list((tmp_path / "a").iterdir())) == 1  # the newest shard only
    assert ids(index.search(query("cached", ["201"]))) == ["M#201#1"]  # read again from S3


@pytest.mark.parametrize(
    "text",
    ["🎉🎉🔥", "?!... ---", "\u200d\u200d", ""],
    ids=["emoji", "punctuation", "zero-width joiners", "empty"],
)
def test_a_query_with_no_word_finds_nothing_and_reads_nothing(
    s3: Any, tmp_path: Path, text: str
) -> None:
    index = index_on(s3, tmp_path)
    index.add([message("1", "🎉🎉🔥 party ?!...")])

    assert index.search(query(text)) == []


def test_cjk_words_are_found_in_a_shard(s3: Any, tmp_path: Path) -> None:
    index = index_on(s3, tmp_path)
    index.add([message("1", "昨日は東京で寿司を食べました"), message("2", "明天我们去北京看长城")])

    assert ids(index.search(query("寿司"))) == ["M#200#1"]
    assert ids(index.search(query("长城"))) == ["M#200#2"]


@pytest.mark.parametrize("channel", ["../../etc", "200/../300", "abc", "2" * 21])
def test_a_channel_id_that_is_not_a_snowflake_never_names_a_key(channel: str) -> None:
    with pytest.raises(ValueError):
        channel_prefix("keywords", GUILD, channel)


class Ledger:
    """The purge markers (MemoryRepository keeps them in the table)."""

    def __init__(self) -> None:
        self.until: dict[str, int] = {}

    def mark_index_purged(self, scope: str, now_ms: int, until_ms: int) -> None:
        self.until[scope] = until_ms

    def index_purged(self, scope: str, now_ms: int) -> bool:
        return now_ms < self.until.get(scope, 0)


def test_a_write_racing_a_server_purge_never_creates_its_shards_again(
    s3: Any, tmp_path: Path
) -> None:
    ledger = Ledger()
    clock = ManualClock(1_767_225_600_000)
    index = index_on(s3, tmp_path, purges=ledger, clock=clock)
    index.add([message("1", "alpha"), message("2", "beta", guild=OTHER_GUILD)])
    ledger.mark_index_purged(GUILD, clock.now_ms(), clock.now_ms() + 3_600_000)
    index.drop_scope(GUILD)

    index.add([message("3", "late round"), fact("f1", "late fact")])
    index.add([message("4", "gamma", guild=OTHER_GUILD)])  # another server: written

    assert index.purged_skips == 2
    assert sorted(stored(s3)) == [f"keywords/g900/c200/{MONTH}.sqlite"]
    clock.advance(ms=3_600_001)  # the marker has lapsed: the server may be written again
    index.add([message("5", "a new start")])
    assert SHARD in stored(s3)


def snowflake_of(at_ms: int) -> str:
    return str((at_ms - 1_420_070_400_000) << 22)


def test_messages_live_in_their_months_shard_and_an_edit_stays_there(
    s3: Any, tmp_path: Path
) -> None:
    index = S3KeywordIndex(BUCKET, "keywords", client=s3, cache_dir=str(tmp_path / "a"))
    may, june = snowflake_of(1_683_000_000_000), snowflake_of(1_686_000_000_000)
    index.add([message(may, "we adopted a puppy"), message(june, "the puppy chewed my shoe")])
    edited = message(may, "we adopted a puppy called Biscuit").model_copy(
        update={"time_ms": 1_690_000_000_000}  # edited in July: still May's message
    )
    index.add([edited])

    assert sorted(stored(s3)) == [
        "keywords/g100/c200/m2023-05.sqlite",
        "keywords/g100/c200/m2023-06.sqlite",
    ]
    assert [h.passage.id for h in index.search(query("Biscuit"))] == [f"M#200#{may}"]
    assert len(index.search(query("puppy"))) == 2


def test_shards_are_ranked_together_by_the_counts_of_all_of_them(s3: Any, tmp_path: Path) -> None:
    index = index_on(s3, tmp_path)
    # In May "garden" is in every message: alone, May's shard rates it worth nothing.
    may = [message(snowflake_of(1_683_000_000_000 + n), f"garden talk {n}") for n in range(9)]
    may.append(message(snowflake_of(1_683_000_100_000), "garden marrow prize"))
    june = [message(snowflake_of(1_686_000_000_000 + n), f"weather talk {n}") for n in range(30)]
    june.append(message(snowflake_of(1_686_000_100_000), "the marrow show"))
    index.add(may + june)

    hits = index.search(query("garden marrow"))

    # Across both months "garden" is rare enough to count: the message with both words wins.
    assert hits[0].passage.text == "garden marrow prize"
    assert hits[1].passage.text == "the marrow show"


def test_a_warm_search_lists_each_folder_and_downloads_nothing(s3: Any, tmp_path: Path) -> None:
    counting = CountingS3(s3)
    index = S3KeywordIndex(BUCKET, "keywords", client=counting, cache_dir=str(tmp_path / "a"))
    index.add([message("1", "first words"), fact("f1", "fact words")])
    counting.calls.clear()

    assert len(index.search(query("words"))) == 2

    assert sorted(counting.calls) == ["get_object", "list_objects_v2"]  # the facts: a 304


class CountingS3:
    def __init__(self, s3: Any) -> None:
        self._s3 = s3
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self._s3, name)
