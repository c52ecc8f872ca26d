from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path

import pytest

from botmemory.search.fusion import LEGS_K, reciprocal_rank_fusion
from botmemory.search.keywords import tokens
from botmemory.search.port import Passage, PassageKind, SearchHit, SearchQuery
from botmemory.search.sqlite_index import SqliteSearchIndex, _fuse

NOW_S = 1_767_225_600
SCOPE = "G#1"


def passage(
    pid: str,
    text: str,
    *,
    scope: str = SCOPE,
    channel: str = "c1",
    kind: PassageKind = PassageKind.MESSAGE,
    time_ms: int = 1_000,
    expires_at: int | None = None,
) -> Passage:
    return Passage(
        id=pid,
        kind=kind,
        scope=scope,
        channel_id=channel,
        text=text,
        time_ms=time_ms,
        expires_at=expires_at,
    )


def query(text: str, **kwargs: object) -> SearchQuery:
    fields: dict[str, object] = {"scope": SCOPE, "text": text, "now_s": NOW_S}
    fields.update(kwargs)
    return SearchQuery.model_validate(fields)


def ids(hits: Sequence[SearchHit]) -> list[str]:
    return [hit.passage.id for hit in hits]


class BagOfConcepts:
    """A deterministic fake embedder: each dimension is a concept, and a text's vector
    counts the words that name it, synonyms included, so "ceramics" lands near "pottery"
    though they share no token."""

    name = "fake-concepts"
    CONCEPTS: tuple[frozenset[str], ...] = (
        frozenset({"pottery", "ceramics", "clay", "kiln"}),
        frozenset({"marathon", "race", "running", "jog"}),
        frozenset({"lisbon", "portugal", "moved"}),
        frozenset({"workshop", "class", "lesson"}),
    )
    dimensions = len(CONCEPTS)

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.fail = False

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.fail:
            raise RuntimeError("embedding provider down")
        self.calls.append(list(texts))
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        words = [w.strip(".,?!").lower() for w in text.split()]
        return [float(sum(w in concept for w in words)) for concept in self.CONCEPTS]


MakeIndex = Callable[..., SqliteSearchIndex]


@pytest.fixture
def make() -> Iterator[MakeIndex]:
    """Builds indexes and closes them all at teardown (an unclosed connection warns)."""
    made: list[SqliteSearchIndex] = []

    def build(path: str = ":memory:", embedder: BagOfConcepts | None = None) -> SqliteSearchIndex:
        made.append(SqliteSearchIndex(path, embedder))
        return made[-1]

    yield build
    for idx in made:
        idx.close()


@pytest.fixture
def index(make: MakeIndex) -> SqliteSearchIndex:
    idx = make()
    idx.add(
        [
            passage("pottery", "Alice goes to a pottery class every Tuesday"),
            passage("marathon", "Bob ran the Berlin marathon in 2022"),
            passage("lisbon", "Carol moved to Lisbon last spring"),
            passage("camping", "We went camping near the lake in 2019"),
        ]
    )
    return idx


def fts_rowids(path: Path, term: str) -> list[int]:
    """The FTS index read directly, so a stale entry shows even if a join would hide it."""
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute(
            "SELECT rowid FROM passages_fts WHERE passages_fts MATCH ?", (f'"{term}"',)
        ).fetchall()
        connection.execute("INSERT INTO passages_fts (passages_fts) VALUES ('integrity-check')")
        return [int(row[0]) for row in rows]
    finally:
        connection.close()


# --- keyword leg ------------------------------------------------------------------------


def test_stemming_matches(index: SqliteSearchIndex) -> None:
    assert ids(index.search(query("potteries"))) == ["pottery"]
    assert ids(index.search(query("who is camp"))) == ["camping"]


def test_numbers_are_searchable(index: SqliteSearchIndex) -> None:
    assert ids(index.search(query("2022"))) == ["marathon"]
    assert ids(index.search(query("what happened in 2019?"))) == ["camping"]
    assert index.search(query("2021")) == []


def test_names_are_searchable(index: SqliteSearchIndex) -> None:
    assert ids(index.search(query("Carol"))) == ["lisbon"]
    assert ids(index.search(query("what does alice do"))) == ["pottery"]


def test_stopword_only_query_returns_nothing(index: SqliteSearchIndex) -> None:
    assert index.search(query("what is the")) == []
    assert index.search(query("?!")) == []


def test_hits_carry_ranks_and_respect_the_limit(index: SqliteSearchIndex) -> None:
    hits = index.search(query("2022 2019 carol alice", limit=2))
    assert len(hits) == 2
    assert [hit.keyword_rank for hit in hits] == [1, 2]
    assert all(hit.vector_rank is None for hit in hits)
    assert hits[0].score > hits[1].score


def test_better_keyword_match_ranks_first(make: MakeIndex) -> None:
    idx = make()
    idx.add(
        [
            passage("one", "pottery"),
            passage("both", "pottery class"),
            passage("other", "marathon"),
        ]
    )
    assert ids(idx.search(query("pottery class"))) == ["both", "one"]


HOSTILE = [
    '"',
    'pottery"',
    '"pottery',
    "NEAR(pottery class",
    "NEAR(",
    "pottery*",
    "*",
    "^pottery",
    "terms:pottery",
    "col:pottery",
    "passages_fts:pottery",
    "(pottery",
    "pottery))",
    "pottery AND NOT marathon",
    "pottery OR",
    "{terms kind}: pottery",
    "pottery\x00\x01\x1b[31m",
    "pottery " + "x" * 1_000_000,
    "pottery " * 200_000,
    "",
    "\x00",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_query_never_raises_nor_matches_everything(
    index: SqliteSearchIndex, text: str
) -> None:
    # Exactly the passages that share a word with the query: no operator, prefix, column
    # filter or NEAR group from the text takes effect.
    wanted = set(tokens(text))
    expected = {p.id for p in index.passages() if wanted & set(tokens(p.text))}
    found = set(ids(index.search(query(text))))
    assert found == expected
    assert len(found) < 4


# --- filters ----------------------------------------------------------------------------


def test_scope_is_never_crossed(make: MakeIndex) -> None:
    idx = make()
    idx.add([passage("secret", "the pottery kiln code is 4417", scope="G#1")])
    assert idx.search(query("pottery kiln 4417", scope="G#2")) == []
    assert idx.search(query("pottery kiln 4417", scope="dm")) == []
    assert ids(idx.search(query("pottery kiln 4417", scope="G#1"))) == ["secret"]


def test_scope_is_never_crossed_by_the_vector_leg(make: MakeIndex) -> None:
    idx = make(embedder=BagOfConcepts())
    idx.add([passage("secret", "pottery", scope="G#1")])
    assert idx.search(query("ceramics", scope="G#2")) == []
    assert ids(idx.search(query("ceramics", scope="G#1"))) == ["secret"]


def test_channel_filter(make: MakeIndex) -> None:
    idx = make()
    idx.add(
        [
            passage("a", "pottery in channel one", channel="c1"),
            passage("b", "pottery in channel two", channel="c2"),
            passage("c", "pottery in channel three", channel="c3"),
        ]
    )
    assert sorted(ids(idx.search(query("pottery", channel_ids=["c1", "c3"])))) == ["a", "c"]
    assert ids(idx.search(query("pottery", channel_ids=["c2"]))) == ["b"]
    assert idx.search(query("pottery", channel_ids=[])) == []
    assert len(idx.search(query("pottery"))) == 3


def test_kinds_filter(make: MakeIndex) -> None:
    idx = make()
    idx.add(
        [
            passage("m", "pottery message", kind=PassageKind.MESSAGE),
            passage("f", "pottery fact", kind=PassageKind.FACT, channel=""),
            passage("e", "pottery episode", kind=PassageKind.EPISODE),
        ]
    )
    assert ids(idx.search(query("pottery", kinds=[PassageKind.FACT]))) == ["f"]
    found = idx.search(query("pottery", kinds=[PassageKind.MESSAGE, PassageKind.EPISODE]))
    assert sorted(ids(found)) == ["e", "m"]
    assert idx.search(query("pottery", kinds=[])) == []


def test_expired_passages_are_never_returned(make: MakeIndex) -> None:
    embedder = BagOfConcepts()
    idx = make(embedder=embedder)
    idx.add(
        [
            passage("gone", "pottery", expires_at=NOW_S - 1),
            passage("last-second", "pottery", expires_at=NOW_S),
            passage("later", "pottery", expires_at=NOW_S + 3600),
            passage("forever", "pottery"),
        ]
    )
    assert sorted(ids(idx.search(query("pottery")))) == ["forever", "last-second", "later"]
    assert "gone" not in ids(idx.search(query("ceramics")))  # the vector leg filters too
    assert "gone" in {p.id for p in idx.passages()}  # stored, just never returned


# --- writes -----------------------------------------------------------------------------


def test_upsert_by_id_replaces(tmp_path: Path, make: MakeIndex) -> None:
    path = tmp_path / "index.db"
    idx = make(str(path))
    assert idx.add([passage("p1", "pottery class")]) == 1
    assert idx.add([passage("p1", "marathon training")]) == 1

    assert [p.text for p in idx.passages()] == ["marathon training"]
    assert idx.search(query("pottery")) == []
    assert ids(idx.search(query("marathon"))) == ["p1"]
    assert fts_rowids(path, "potteri") == []  # no stale FTS entry for the old text
    assert len(fts_rowids(path, "marathon")) == 1


def test_duplicate_ids_in_one_batch_keep_the_last(make: MakeIndex) -> None:
    idx = make()
    idx.add([passage("p1", "pottery"), passage("p1", "marathon")])
    assert [p.text for p in idx.passages()] == ["marathon"]
    assert idx.search(query("pottery")) == []


def test_remove_deletes_from_both_tables(tmp_path: Path, make: MakeIndex) -> None:
    path = tmp_path / "index.db"
    idx = make(str(path))
    idx.add([passage("p1", "pottery class"), passage("p2", "marathon")])

    assert idx.remove(["p1", "p1", "absent"]) == 2
    assert idx.search(query("pottery")) == []
    assert [p.id for p in idx.passages()] == ["p2"]
    assert fts_rowids(path, "potteri") == []
    assert idx.remove(iter(["p1"])) == 1  # idempotent
    assert idx.remove([]) == 0


def test_passages_round_trip_every_field_across_pages(make: MakeIndex) -> None:
    idx = make()
    original = Passage(
        id="x",
        kind=PassageKind.FACT,
        scope=SCOPE,
        channel_id="",
        text="likes pottery",
        time_ms=5,
        authors=["u1"],
        sources=["FACT#1"],
        expires_at=NOW_S,
    )
    idx.add([original])
    idx.add([passage(f"m{i}", f"message {i}") for i in range(1_234)])
    stored = list(idx.passages())
    assert len(stored) == 1_235
    assert stored[0] == original


def test_add_nothing_writes_nothing(make: MakeIndex) -> None:
    embedder = BagOfConcepts()
    idx = make(embedder=embedder)
    assert idx.add([]) == 0
    assert embedder.calls == []


# --- vector leg and fusion --------------------------------------------------------------


def test_vector_leg_promotes_a_passage_the_keyword_leg_misses(make: MakeIndex) -> None:
    docs = [
        passage("kw-only", "ceramics catalogue for the museum shop", time_ms=3),
        passage("vec-only", "Alice has a weekly pottery lesson with clay", time_ms=2),
        passage("unrelated", "Bob ran a marathon", time_ms=1),
    ]
    plain = make()
    plain.add(docs)
    assert ids(plain.search(query("ceramics workshop"))) == ["kw-only"]

    idx = make(embedder=BagOfConcepts())
    idx.add(docs)
    hits = idx.search(query("ceramics workshop"))
    by_id = {hit.passage.id: hit for hit in hits}
    # Seen by both legs beats seen by one; the vector-only passage is now found at all.
    assert ids(hits) == ["kw-only", "vec-only"]
    assert by_id["vec-only"].keyword_rank is None and by_id["vec-only"].vector_rank == 1
    assert by_id["kw-only"].keyword_rank == 1 and by_id["kw-only"].vector_rank == 2
    assert hits[0].score == pytest.approx(1 / (LEGS_K + 1) + 1 / (LEGS_K + 2))
    assert hits[1].score == pytest.approx(1 / (LEGS_K + 1))


def test_a_legs_first_place_outranks_a_middling_place_in_both() -> None:
    # One leg's best (first by keywords, 31st by vectors) against a passage eighth in both:
    # with RRF's usual k of 60 the middling one wins; the search legs' k keeps the best.
    others = [passage(f"o{i}", f"filler {i}") for i in range(40)]
    best, middling = passage("best", "the answer"), passage("middling", "near it")

    def candidates(order: list[Passage]) -> list[tuple[str, str]]:
        return [(p.id, p.model_dump_json()) for p in order]

    keyword = candidates([best, *others[:6], middling, *others[6:20]])
    vector = candidates([*others[20:27], middling, *others[27:40], *others[:9], best])
    assert [id for id, _ in vector].index("best") == 30  # 31st
    assert ids(_fuse(keyword, vector, 2))[0] == "best"
    usual = reciprocal_rank_fusion([[id for id, _ in keyword], [id for id, _ in vector]], k=60)
    assert usual[0][0] == "middling"


def test_the_vector_leg_passes_as_many_candidates_as_the_query_asks(make: MakeIndex) -> None:
    # As S3 Vectors' topK: a far neighbour (4th by meaning) adds nothing to a keyword find.
    idx = make(embedder=BagOfConcepts())
    idx.add([passage(f"clay{n}", "clay and a kiln", time_ms=10 + n) for n in range(3)])
    idx.add([passage("word", "pottery, marathon, race, running", time_ms=1)])
    hits = idx.search(query("pottery", limit=2))
    found = {hit.passage.id: hit for hit in hits}
    assert found["word"].keyword_rank == 1
    assert found["word"].vector_rank is None
    assert all(hit.vector_rank is not None and hit.vector_rank <= 2 for hit in hits[1:])


def test_add_embeds_in_one_call(make: MakeIndex) -> None:
    embedder = BagOfConcepts()
    idx = make(embedder=embedder)
    idx.add([passage("a", "pottery"), passage("b", "marathon"), passage("c", "lisbon")])
    assert embedder.calls == [["pottery", "marathon", "lisbon"]]


def test_vector_leg_alone_answers_when_no_keyword_matches(make: MakeIndex) -> None:
    idx = make(embedder=BagOfConcepts())
    idx.add([passage("a", "pottery")])
    # "ceramics" is a token the keyword leg cannot find; only the vector leg answers.
    hits = idx.search(query("ceramics"))
    assert ids(hits) == ["a"] and hits[0].keyword_rank is None


# --- sharing ----------------------------------------------------------------------------


def _write_many(idx: SqliteSearchIndex, errors: list[BaseException], done: threading.Event) -> None:
    try:
        for i in range(200):
            idx.add([passage(f"p{i}", f"pottery note {i}"), passage(f"q{i}", "marathon")])
            if i % 10 == 0:
                idx.remove([f"q{i}"])
    except BaseException as exc:
        errors.append(exc)
    finally:
        done.set()


def _search_until(
    idx: SqliteSearchIndex, errors: list[BaseException], done: threading.Event
) -> None:
    try:
        while not done.is_set():
            for hit in idx.search(query("pottery marathon", limit=10)):
                assert hit.passage.scope == SCOPE
            list(idx.passages())
    except BaseException as exc:
        errors.append(exc)


def test_concurrent_adds_and_searches(make: MakeIndex) -> None:
    idx = make(embedder=BagOfConcepts())
    errors: list[BaseException] = []
    done = threading.Event()
    threads = [
        threading.Thread(target=_write_many, args=(idx, errors, done)),
        *(threading.Thread(target=_search_until, args=(idx, errors, done)) for _ in range(3)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert not any(thread.is_alive() for thread in threads)
    assert len(list(idx.passages())) == 400 - 20


def test_file_index_reopens_with_its_passages(tmp_path: Path, make: MakeIndex) -> None:
    path = str(tmp_path / "index.db")
    first = make(path)
    first.add([passage("p1", "Alice's pottery class in 2022")])
    first.close()
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)

    again = make(path)
    assert ids(again.search(query("potteries 2022"))) == ["p1"]
    assert [p.id for p in again.passages()] == ["p1"]


def test_two_instances_share_one_file(tmp_path: Path, make: MakeIndex) -> None:
    path = str(tmp_path / "index.db")
    writer, reader = make(path), make(path)
    writer.add([passage("p1", "pottery")])
    assert ids(reader.search(query("pottery"))) == ["p1"]
    reader.remove(["p1"])
    assert writer.search(query("pottery")) == []
