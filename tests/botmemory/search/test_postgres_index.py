"""The keyword leg on PostgreSQL (botmemory.search.postgres_index) against a real database
(tests/support/postgres.py): the embedded index's ranking exactly, one statement a search and
a round, migrations once, expiry and purges that delete, counts no two channels share, and
hostile text that changes nothing."""

from __future__ import annotations

import random

import pytest

from botmemory.search import postgres_sql, rules
from botmemory.search.keywords import MAX_TOKENS, query_terms
from botmemory.search.port import Passage, PassageKind, SearchQuery
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.postgres_sql import Statement
from botmemory.search.postgres_transport import LocalTransport
from botmemory.search.sqlite_index import CANDIDATE_FACTOR, SqliteSearchIndex
from tests.support.passages import message_passage

GUILD = "100"
CHANNEL = "200"
OTHER = "201"
WORDS = [
    "apple",
    "banana",
    "cherry",
    "guitar",
    "house",
    "island",
    "jungle",
    "kite",
    "lemon",
    "mango",
    "night",
    "ocean",
    "piano",
    "queen",
    "river",
    "umbrella",
    "violin",
    "painting",
    "painted",
    "mentor",
    "mentored",
    "Tokyo",
    "東京タワー",
    "東京",
    "ferry",
    "Thaddeus",
]


def corpus(n: int = 300, seed: int = 7) -> list[Passage]:
    draw = random.Random(seed)
    return [
        message_passage(
            str(1_000_000 + i * 1000),
            " ".join(draw.choice(WORDS) for _ in range(draw.randint(2, 24))),
            CHANNEL if i % 3 else OTHER,
            GUILD,
        )
        for i in range(n)
    ]


def ask(text: str, **extra: object) -> SearchQuery:
    return SearchQuery(scope=GUILD, text=text, limit=10, now_s=0, **extra)  # type: ignore[arg-type]


def rows(index: PostgresKeywordIndex, sql: str) -> list[tuple[object, ...]]:
    return index.transport.execute(Statement(sql))


def every_row(index: PostgresKeywordIndex) -> str:
    """Every row of every table of the keyword leg, as text (the erasure scan)."""
    return "\n".join(
        str(r[0])
        for table in ("kw_passages", "kw_terms", "kw_sizes")
        for r in rows(index, f"SELECT t::text FROM {table} t")  # nosec B608 # fixed names
    )


QUESTIONS = ["apple painting", "mentor river", "東京 ferry", "Thaddeus", "violin ocean queen"]
SPANS: list[list[tuple[int, int]]] = [
    [],
    [(1_050_000, 1_090_000)],  # short: read whole, newest first, after its BM25 order
    [(1_000_000, 1_100_000), (1_200_000, 1_250_000)],
]


@pytest.mark.parametrize("feedback", [True, False])
def test_it_ranks_exactly_as_the_embedded_index(
    pg_index: PostgresKeywordIndex, feedback: bool
) -> None:
    passages = corpus()
    pg_index.add(passages)
    embedded = SqliteSearchIndex()
    embedded.add(passages)
    variant = rules.TODAY if feedback else rules.TODAY.without("feedback_pass")
    with rules.applied(variant):
        for question in QUESTIONS:
            for during in SPANS:
                query = ask(question, during=during)
                ours = [h.passage.id for h in pg_index.search(query)]
                depth = CANDIDATE_FACTOR * query.limit
                theirs = [
                    pid for pid, _ in embedded._keyword_leg(query_terms(question), query, depth)
                ]
                assert ours == theirs, (question, during)
    embedded.close()


def test_a_search_is_one_statement_and_a_round_one_statement(
    pg_index: PostgresKeywordIndex,
) -> None:
    before = pg_index.transport.calls  # type: ignore[attr-defined]
    pg_index.write(corpus(40), reembed=64)
    pg_index.search(ask("apple painting", during=SPANS[1]))
    assert pg_index.transport.calls - before == 2  # type: ignore[attr-defined]


def test_channels_and_kinds_filter_and_scopes_never_mix(pg_index: PostgresKeywordIndex) -> None:
    pg_index.add(
        [
            message_passage("1", "Thaddeus rides the ferry", CHANNEL, GUILD),
            message_passage("2", "Thaddeus rides the ferry", OTHER, GUILD),
            message_passage("3", "Thaddeus rides the ferry", CHANNEL, "999"),
            message_passage("4", "Thaddeus rides the ferry", CHANNEL, "dm"),
        ]
    )
    assert [h.passage.id for h in pg_index.search(ask("Thaddeus", channel_ids=[CHANNEL]))] == [
        f"M#{CHANNEL}#1"
    ]
    assert pg_index.search(ask("Thaddeus", kinds=[PassageKind.FACT])) == []
    assert len(pg_index.search(ask("Thaddeus"))) == 2


def test_counts_are_kept_per_channel_and_dms_apart_from_servers(
    pg_index: PostgresKeywordIndex,
) -> None:
    """A round writes only its own channel's count rows: no row is written by every channel
    of a server, and a DM's rounds never touch a guild's."""
    pg_index.add([message_passage("1", "ferry ferry Thaddeus", CHANNEL, GUILD)])
    before = {
        r[:3]: r[3] for r in rows(pg_index, "SELECT server, term, bucket, docs FROM kw_terms")
    }
    pg_index.add([message_passage("2", "ferry harbour", OTHER, GUILD)])
    pg_index.add([message_passage("3", "ferry at night", "300", "dm")])
    after = {r[:3]: r[3] for r in rows(pg_index, "SELECT server, term, bucket, docs FROM kw_terms")}
    assert {k: v for k, v in after.items() if k in before} == before  # untouched
    assert {(s, b) for s, _, b in after} == {
        (GUILD, f"c{CHANNEL}"),
        (GUILD, f"c{OTHER}"),
        ("dm", "c300"),
    }
    sizes = rows(pg_index, "SELECT server, bucket, documents, tokens FROM kw_sizes ORDER BY 1, 2")
    assert sizes == [(GUILD, f"c{CHANNEL}", 1, 3), (GUILD, f"c{OTHER}", 1, 2), ("dm", "c300", 1, 2)]


def test_a_rewrite_moves_the_counts_and_a_removal_leaves_no_word(
    pg_index: PostgresKeywordIndex,
) -> None:
    pg_index.add([message_passage("1", "my cousin Thaddeus", CHANNEL, GUILD)])
    pg_index.add([message_passage("1", "my cousin Bartholomew", CHANNEL, GUILD)])  # an edit
    assert "thaddeus" not in every_row(pg_index) and "Thaddeus" not in every_row(pg_index)
    assert pg_index.search(ask("Bartholomew"))

    pg_index.remove([f"M#{CHANNEL}#1"])

    assert "bartholomew" not in every_row(pg_index).lower()
    assert rows(pg_index, "SELECT count(*) FROM kw_sizes WHERE documents <> 0") == [(0,)]


def test_expiry_is_a_bounded_delete_by_each_row_s_own_expiry(
    pg_index: PostgresKeywordIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_sql, "DELETE_PAGE", 3)
    old = [
        message_passage(str(n), f"secret plan number {n}", CHANNEL, GUILD).model_copy(
            update={"expires_at": 100}
        )
        for n in range(1, 8)
    ]
    kept = message_passage("9", "a plan that lasts", CHANNEL, GUILD).model_copy(
        update={"expires_at": 10_000}
    )
    pg_index.add([*old, kept])

    assert pg_index.expire(now_s=5_000, max_statements=1) == 3  # one page a statement
    assert pg_index.expire(now_s=5_000) == 4

    assert "secret" not in every_row(pg_index)
    assert [p.id for p in pg_index.passages()] == [kept.id]
    plan = rows(pg_index, "EXPLAIN " + postgres_sql.expire(5_000).sql.replace(":now", "5000"))
    assert "kw_passages_expiry" in str(plan)  # found through the expiry index


def test_a_server_purge_deletes_its_rows_and_a_racing_write_is_skipped(
    pg_index: PostgresKeywordIndex,
) -> None:
    pg_index.add([message_passage("1", "Thaddeus", CHANNEL, GUILD)])
    pg_index.add([message_passage("2", "Thaddeus", CHANNEL, "555")])

    assert pg_index.drop_scope(GUILD) == 1
    pg_index.add([message_passage("3", "Thaddeus again", CHANNEL, GUILD)])  # a round racing it

    assert pg_index.purged_skips == 1
    assert [p.scope for p in pg_index.passages()] == ["555"]
    assert rows(pg_index, f"SELECT count(*) FROM kw_terms WHERE server = '{GUILD}'") == [(0,)]


def test_migrations_run_once_and_a_schema_older_than_the_code_is_brought_up(
    pg_index: PostgresKeywordIndex,
) -> None:
    assert pg_index.migrate() == pg_index.migrate() == postgres_sql.SCHEMA_VERSION
    rows(pg_index, "DROP TABLE kw_terms")
    rows(pg_index, "DELETE FROM kw_schema")

    pg_index.add([message_passage("1", "Thaddeus", CHANNEL, GUILD)])  # migrated, then written

    assert [h.passage.id for h in pg_index.search(ask("Thaddeus"))] == [f"M#{CHANNEL}#1"]


def test_no_session_of_the_keyword_database_compiles_statements_with_jit(
    pg_index: PostgresKeywordIndex, pg_dsn: str
) -> None:
    # JIT compiling the search statement cost 0.1 s to 2.2 s on a big history (docs/search.md).
    assert rows(pg_index, "SHOW jit") == [("off",)]  # the session that migrated
    later = LocalTransport(pg_dsn)  # a session opened after: a Data API pooled one too
    try:
        assert later.execute(postgres_sql.Statement("SHOW jit")) == [("off",)]
    finally:
        later.close()


def test_a_database_at_an_older_version_whose_tables_are_all_there_is_migrated_by_a_write(
    pg_index: PostgresKeywordIndex, pg_dsn: str
) -> None:
    rows(pg_index, "DELETE FROM kw_schema WHERE version = 2")  # as schema 1 left it
    rows(
        pg_index,
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I RESET jit', current_database()); END $$",
    )

    pg_index.add([message_passage("1", "Thaddeus", CHANNEL, GUILD)])  # no statement fails

    assert rows(pg_index, "SELECT max(version) FROM kw_schema") == [(postgres_sql.SCHEMA_VERSION,)]
    later = LocalTransport(pg_dsn)
    try:
        assert later.execute(postgres_sql.Statement("SHOW jit")) == [("off",)]
    finally:
        later.close()


HOSTILE = [
    "Robert'); DROP TABLE kw_passages;-- and :scope ::text $1 %s %(x)s \\ \" ' ; */ /*",
    "nul\x00inside the \x00 text",
    "$migrate$ END $$; DELETE FROM kw_terms; $$",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_sql_metacharacters_and_nul_are_only_data(
    pg_index: PostgresKeywordIndex, text: str
) -> None:
    passage = message_passage("1", text, CHANNEL, GUILD)
    pg_index.add([passage, message_passage("2", "an ordinary word", CHANNEL, GUILD)])

    found = pg_index.search(ask(text))

    assert found and found[0].passage == passage  # stored and read back unchanged, NUL too
    assert pg_index.search(ask("ordinary"))  # the tables are all there
    assert pg_index.search(SearchQuery(scope=f"{GUILD}\x00", text="ordinary", now_s=0)) == []
    assert pg_index.search(ask("ordinary", channel_ids=[f"{CHANNEL}\x00"])) == []


def test_a_query_of_five_thousand_tokens_is_answered(pg_index: PostgresKeywordIndex) -> None:
    pg_index.add(corpus(50))
    long = " ".join(f"w{n}" for n in range(MAX_TOKENS)) + " Thaddeus"

    assert isinstance(pg_index.search(ask(long)), list)


def test_an_id_with_a_nul_is_a_counted_skip(pg_index: PostgresKeywordIndex) -> None:
    bad = message_passage("1", "x", CHANNEL, GUILD).model_copy(update={"id": "M#1\x00#2"})

    pg_index.add([bad, message_passage("2", "fine", CHANNEL, GUILD)])

    assert pg_index.bad_skips == 1
    assert [p.id for p in pg_index.passages()] == [f"M#{CHANNEL}#2"]


def test_the_counts_always_equal_a_recount_of_the_rows(pg_index: PostgresKeywordIndex) -> None:
    passages = corpus(120)
    pg_index.add(passages)
    pg_index.add(corpus(60, seed=8))  # rewrites of the same ids, other words
    pg_index.remove([p.id for p in passages[::4]])
    recount = rows(
        pg_index,
        "SELECT server, term, bucket, count(*)::integer FROM kw_passages, unnest(keys) AS k(term) "
        "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
    )
    kept = rows(pg_index, "SELECT server, term, bucket, docs FROM kw_terms ORDER BY 1, 2, 3")
    assert kept == recount
    sizes = rows(
        pg_index,
        "SELECT server, bucket, count(*), sum(length) FROM kw_passages GROUP BY 1, 2 ORDER BY 1, 2",
    )
    assert rows(
        pg_index, "SELECT server, bucket, documents, tokens FROM kw_sizes ORDER BY 1, 2"
    ) == [(s, b, int(str(d)), int(str(t))) for s, b, d, t in sizes]


def test_a_stored_row_that_is_not_a_passage_is_a_counted_skip(
    pg_index: PostgresKeywordIndex,
) -> None:
    pg_index.add([message_passage(n, "Thaddeus on the ferry", CHANNEL, GUILD) for n in ("1", "2")])
    rows(pg_index, f"UPDATE kw_passages SET passage = '{{\"not\": 1}}' WHERE id = 'M#{CHANNEL}#1'")

    found = pg_index.search(ask("Thaddeus"))

    assert [h.passage.id for h in found] == [f"M#{CHANNEL}#2"]
    assert pg_index.bad_rows == 1


def test_a_round_deletes_rows_past_their_own_expiry_with_no_call_more(
    pg_index: PostgresKeywordIndex,
) -> None:
    """Expiry rides on the rounds (the database is awake then): the round's one statement
    deletes what has expired, whatever server it was, by the expiry index."""
    now_s = 1_767_225_600  # the fixture's clock
    gone = message_passage("1", "secret plan", CHANNEL, "999").model_copy(
        update={"expires_at": now_s - 1}
    )
    kept = message_passage("2", "lasting plan", CHANNEL, GUILD).model_copy(
        update={"expires_at": now_s + 60}
    )
    pg_index.add([gone, kept])  # the first write: `gone` was written expired
    before = pg_index.transport.calls  # type: ignore[attr-defined]

    pg_index.add([message_passage("3", "a new round", CHANNEL, GUILD)])

    assert pg_index.transport.calls - before == 1  # type: ignore[attr-defined]
    assert pg_index.expired == 1
    assert "secret" not in every_row(pg_index)
    assert {p.id for p in pg_index.passages()} == {kept.id, f"M#{CHANNEL}#3"}


def test_a_common_word_alone_scores_only_the_newest_rows_holding_it(
    pg_index: PostgresKeywordIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound on a query's work: rows are picked by the rarest terms within a budget of
    documents; a query of common words alone scores the newest rows that hold one."""
    monkeypatch.setattr(postgres_sql, "ROW_BUDGET", 2)
    monkeypatch.setattr(postgres_sql, "WINDOW_ROWS", 3)
    pg_index.add(
        [message_passage(str(n), f"weather report {n}", CHANNEL, GUILD) for n in range(1, 9)]
    )
    pg_index.add([message_passage("20", "weather and a zeppelin", CHANNEL, GUILD)])

    rare = [h.passage.id for h in pg_index.search(ask("weather zeppelin"))]
    common = [h.passage.id for h in pg_index.search(ask("weather"))]
    unknown = [h.passage.id for h in pg_index.search(ask("weather xylophone"))]

    assert rare == [f"M#{CHANNEL}#20"]  # "weather" alone no longer picks rows
    assert sorted(common) == sorted(f"M#{CHANNEL}#{n}" for n in (20, 8, 7))  # the newest 3
    assert sorted(unknown) == sorted(common)  # a word no passage holds picks nothing


def test_the_rarest_terms_pick_rows_within_the_budget_and_the_window_reads_only_the_newest(
    pg_index: PostgresKeywordIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_sql, "ROW_BUDGET", 3)
    monkeypatch.setattr(postgres_sql, "WINDOW_ROWS", 2)
    pg_index.add(
        [message_passage("1", "amber", CHANNEL, GUILD)]
        + [message_passage(str(n), "basalt", CHANNEL, GUILD) for n in (2, 3)]
        + [message_passage(str(n), "cobalt", CHANNEL, GUILD) for n in (4, 5, 6, 7)]
        + [message_passage(str(n), "quiet words", CHANNEL, GUILD) for n in (8, 9)]
    )

    both = {h.passage.id for h in pg_index.search(ask("amber basalt"))}  # 1 + 2 documents
    rarest = {h.passage.id for h in pg_index.search(ask("amber cobalt"))}  # 1 + 4: over 3
    window = pg_index.search(ask("cobalt"))  # 4 documents: the newest 2 rows hold no cobalt

    assert both == {f"M#{CHANNEL}#{n}" for n in (1, 2, 3)}
    assert rarest == {f"M#{CHANNEL}#1"}
    assert window == []


def test_a_named_day_of_common_words_reads_that_days_newest_rows(
    pg_index: PostgresKeywordIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_sql, "ROW_BUDGET", 1)
    monkeypatch.setattr(postgres_sql, "WINDOW_ROWS", 2)
    day = 86_400_000
    pg_index.add(
        [
            message_passage(str(n), "weather", CHANNEL, GUILD).model_copy(
                update={"time_ms": n * day // 4}
            )
            for n in range(1, 13)
        ]
    )

    found = {h.passage.id for h in pg_index.search(ask("weather", during=[(day, 2 * day)]))}

    # The day holds passages 4 to 7 (its listing shows them all); the undated passes read the
    # newest 2 of all time (11 and 12), never the rest.
    assert found == {f"M#{CHANNEL}#{n}" for n in (4, 5, 6, 7, 11, 12)}


def test_a_shortened_expiry_brings_rows_in_and_never_lengthens_one(
    pg_index: PostgresKeywordIndex,
) -> None:
    """A server's shortened retention (botmemory.people.retention_job): the rows of passages
    whose table items now expire sooner get that expiry, column and stored body, and leave
    search once it passes; a row expiring sooner already keeps its own."""
    now_s = 1_767_225_600  # the fixture's clock
    later = message_passage("1", "long plan", CHANNEL, GUILD).model_copy(
        update={"expires_at": now_s + 300 * 86_400}
    )
    sooner = message_passage("2", "short plan", CHANNEL, GUILD).model_copy(
        update={"expires_at": now_s + 60}
    )
    pg_index.add([later, sooner])

    assert pg_index.shorten_expiry([later.id, sooner.id, "M#absent#9"], now_s + 3_600) == 3

    stored = {p.id: p.expires_at for p in pg_index.passages()}
    assert stored == {later.id: now_s + 3_600, sooner.id: now_s + 60}
    column = rows(pg_index, "SELECT id, expires_at FROM kw_passages ORDER BY id")
    assert [(str(i), int(str(e))) for i, e in column] == sorted(stored.items())
    hits = pg_index.search(ask("plan").model_copy(update={"now_s": now_s + 7_200}))
    assert hits == []
