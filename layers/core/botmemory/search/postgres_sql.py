"""The keyword leg's SQL on PostgreSQL (botmemory.search.postgres_index): the one place that
builds it, for both transports (the RDS Data API on AWS, a local driver for tests, `make dev`,
the eval and the bench).

Every statement is fixed text with named `:placeholders`; values travel only as parameters
(strings, integers or NULL). Lists travel as one JSON text parameter each (the Data API takes no
array parameters) and are unpacked by the database. Nothing a user wrote is ever formatted into
the SQL: the only text that varies is which fixed fragments a statement has (a channel filter
or not, how many time spans).

What is stored (table kw_passages, one row per passage): the passage as JSON, and the project's
own tokens (botmemory.search.keywords: bigrams for scripts without spaces, Porter2 for English),
as the text of tokens in order (the feedback pass reads it), their counts (jsonb, term -> count,
for BM25) and their distinct set (text[], GIN-indexed: which rows hold a term). Ranking is BM25
as FTS5 computes it (k1 = 1.2, b = 0.75, its IDF floored at 1e-6) with the counts of the
passage's server: documents and tokens (kw_sizes) and documents holding each term (kw_terms),
kept per server and *bucket* (a channel, or one of a few buckets of a server's facts), so a
round writes only its own channel's rows and no row is written by every channel of a server;
DMs count under the server `dm` and never touch a guild's rows. A query sums the buckets.

Counts follow every write and delete inside the same statement, so a round is one statement;
a term whose count falls to 0 has its row deleted (an erased word leaves no count behind).
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field

from botmemory.search.port import LISTED_SPAN_MS, SearchQuery

SCHEMA_VERSION = 2
# One lock id for migrations (pg_advisory_xact_lock): concurrent first calls run them once.
_MIGRATION_LOCK = 51_5105_1
# Buckets a server's facts are counted in (by their subject): facts of one person are written
# by whichever channel's round learns them, so they share no row with a channel's counts.
FACT_BUCKETS = 8
# BM25 as FTS5's bm25() (botmemory.search.sqlite_index ranks with it).
K1 = 1.2
B = 0.75
MIN_IDF = 1e-6
# What bounds a pass's work at any history size (`make bench` 3f): it scores the rows holding
# the query's rarest terms, taken rarest first while the documents holding them add up to at
# most ROW_BUDGET (the GIN index finds them; the other terms still count in their scores).
# When even the rarest term is held by more, it scores those of the newest WINDOW_ROWS rows
# of the scope (of each span a question names) that hold a term (the time index, read
# backwards). No conversation `make eval` replays comes near the budget: there the ranking is
# exactly BM25 over every matching row.
ROW_BUDGET = 5_000
WINDOW_ROWS = 5_000
# Rows deleted per expiry or purge statement: each is a bounded, indexed DELETE.
DELETE_PAGE = 2000

Param = str | int | None


@dataclass(frozen=True)
class Statement:
    """One SQL statement and its named parameters."""

    sql: str
    params: dict[str, Param] = field(default_factory=dict)


_PLACEHOLDER = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def placeholders(sql: str) -> list[str]:
    """The parameter names a statement uses (`::type` casts are not placeholders)."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(sql)))


def pyformat(sql: str) -> str:
    """The statement in a DB-API driver's `%(name)s` style (the local transport)."""
    return _PLACEHOLDER.sub(r"%(\1)s", sql.replace("%", "%%"))


def bucket_of(channel_id: str, passage_id: str) -> str:
    """The counts bucket of a passage: its channel, or for a fact (no channel) one of
    FACT_BUCKETS chosen by its id's subject ("F#<scope>#<user>#<fact>")."""
    if channel_id:
        return f"c{channel_id}"
    parts = passage_id.split("#")
    subject = parts[2] if len(parts) > 2 else passage_id
    return f"f{zlib.crc32(subject.encode('utf-8', 'replace')) % FACT_BUCKETS}"


# -- schema -----------------------------------------------------------------------------------

# Version 1. kw_passages.server is the passage's server (a guild id or `dm`): purges and counts
# go by it. expires_at is the table's TTL (epoch seconds), per row: expiry deletes by it.
_V1 = """
CREATE TABLE IF NOT EXISTS kw_passages (
    id text PRIMARY KEY,
    server text NOT NULL,
    bucket text NOT NULL,
    scope text NOT NULL,
    kind text NOT NULL,
    channel_id text NOT NULL,
    time_ms bigint NOT NULL,
    expires_at bigint,
    passage text NOT NULL,
    terms text NOT NULL,
    tf jsonb NOT NULL,
    keys text[] NOT NULL,
    length integer NOT NULL,
    vectors_pending boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS kw_passages_keys ON kw_passages USING gin (keys);
CREATE INDEX IF NOT EXISTS kw_passages_scope_time ON kw_passages (scope, time_ms);
CREATE INDEX IF NOT EXISTS kw_passages_server ON kw_passages (server);
CREATE INDEX IF NOT EXISTS kw_passages_expiry ON kw_passages (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS kw_passages_pending ON kw_passages (server)
    WHERE vectors_pending;
CREATE TABLE IF NOT EXISTS kw_terms (
    server text NOT NULL,
    term text NOT NULL,
    bucket text NOT NULL,
    docs integer NOT NULL,
    PRIMARY KEY (server, term, bucket)
);
-- A server purge's marker: no write puts a purged server's passages back while it lives.
CREATE TABLE IF NOT EXISTS kw_purged (
    server text PRIMARY KEY,
    until_ms bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS kw_sizes (
    server text NOT NULL,
    bucket text NOT NULL,
    documents bigint NOT NULL,
    tokens bigint NOT NULL,
    PRIMARY KEY (server, bucket)
);
"""

# Version 2: no JIT compilation for this database's sessions. The search statement's estimated
# cost passes PostgreSQL's jit_above_cost on a big history, and compiling it took 0.1 s to
# 2.2 s of a query that runs in 20 ms (`make bench` 3f, docs/search.md). ALTER DATABASE
# reaches every session opened after it (the Data API's pooled ones too); the migrating
# session is set at once. A role that may not alter the database keeps JIT (a notice).
_V2 = """
PERFORM set_config('jit', 'off', false);
BEGIN
    EXECUTE format('ALTER DATABASE %I SET jit = off', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'keyword index: JIT left on (no privilege to alter the database)';
END;
"""

MIGRATIONS: tuple[tuple[int, str], ...] = ((1, _V1), (2, _V2))


def migrate() -> Statement:
    """Every migration the database lacks, in one statement (a DO block): under an advisory
    lock, each version once, recorded in kw_schema. Safe to run again, and from many callers
    at once."""
    steps = "\n".join(
        f"""IF NOT EXISTS (SELECT 1 FROM kw_schema WHERE version = {int(version)}) THEN
{body}
INSERT INTO kw_schema (version) VALUES ({int(version)});
END IF;"""  # nosec B608 # fixed fragments and placeholders: values travel as parameters
        for version, body in MIGRATIONS
    )
    sql = f"""DO $migrate$
BEGIN
PERFORM pg_advisory_xact_lock({_MIGRATION_LOCK});
CREATE TABLE IF NOT EXISTS kw_schema (version integer PRIMARY KEY);
{steps}
END
$migrate$"""
    return Statement(sql)


def schema_version() -> Statement:
    return Statement("SELECT coalesce(max(version), 0) FROM kw_schema")


# -- counts ---------------------------------------------------------------------------------------

# From `delta (server, bucket, term, n)` and `sized (server, bucket, documents, tokens)` CTEs:
# the counts moved by n, rows that reach 0 deleted. Keys are locked in one order (the sort),
# so two statements moving the same rows never deadlock. A row a statement has already changed
# is skipped by its own FOR UPDATE, so each writer first reads the locked rows whole (the
# `(SELECT count(*) ...) >= 0` conditions run before anything is written).
_COUNTS = """
, moved AS (
    SELECT server, bucket, term, sum(n)::integer AS n FROM delta GROUP BY server, bucket, term
),
current_terms AS (
    SELECT t.server, t.bucket, t.term, t.docs FROM kw_terms t
    JOIN moved m ON m.server = t.server AND m.term = t.term AND m.bucket = t.bucket
    ORDER BY t.server, t.term, t.bucket
    FOR UPDATE OF t
),
terms_gone AS (
    DELETE FROM kw_terms t USING moved m, current_terms c
    WHERE (SELECT count(*) FROM current_terms) >= 0
      AND t.server = m.server AND t.term = m.term AND t.bucket = m.bucket
      AND c.server = m.server AND c.term = m.term AND c.bucket = m.bucket
      AND c.docs + m.n <= 0
    RETURNING 1
),
terms_kept AS (
    INSERT INTO kw_terms (server, term, bucket, docs)
    SELECT m.server, m.term, m.bucket, m.n FROM moved m
    LEFT JOIN current_terms c ON c.server = m.server AND c.term = m.term AND c.bucket = m.bucket
    WHERE (SELECT count(*) FROM current_terms) >= 0
      AND coalesce(c.docs, 0) + m.n > 0 AND m.n <> 0
    ORDER BY m.server, m.term, m.bucket
    ON CONFLICT (server, term, bucket) DO UPDATE SET docs = kw_terms.docs + excluded.docs
    RETURNING 1
),
resized AS (
    SELECT server, bucket, sum(documents)::bigint AS documents, sum(tokens)::bigint AS tokens
    FROM sized GROUP BY server, bucket
),
sizes_kept AS (
    INSERT INTO kw_sizes (server, bucket, documents, tokens)
    SELECT server, bucket, documents, tokens FROM resized
    WHERE documents <> 0 OR tokens <> 0
    ORDER BY server, bucket
    ON CONFLICT (server, bucket) DO UPDATE
    SET documents = kw_sizes.documents + excluded.documents,
        tokens = kw_sizes.tokens + excluded.tokens
    RETURNING 1
)"""

_ROW_COLUMNS = (
    "id text, server text, bucket text, scope text, kind text, channel_id text, "
    "time_ms bigint, expires_at bigint, passage text, terms text, tf jsonb, keys text[], "
    "length integer"
)


# Expired rows a write statement deletes beside its own (any server's): expiry rides on the
# rounds, which find the database awake, rather than waking a paused one on a schedule.
EXPIRE_WITH_WRITE = 200


def upsert(
    rows_json: str, now_ms: int, pending_server: str | None, pending_limit: int
) -> Statement:
    """Insert or replace passages (`rows_json`: a JSON array of rows, PostgresKeywordIndex's
    `_row`), moving the counts by the difference, and answer with up to `pending_limit`
    passages of `pending_server` whose vectors are still missing (the deployed hybrid embeds
    them again); and up to EXPIRE_WITH_WRITE rows past their own expiry deleted, by the
    expiry index: one statement, so a round costs one call. Rows whose passage is being
    replaced keep no vectors mark. It also answers the schema's version, so a database older
    than the code is migrated by the next write, without a call of its own."""
    sql = f"""
WITH input AS (
    SELECT DISTINCT ON (id) * FROM json_to_recordset(CAST(:rows AS json)) AS r({_ROW_COLUMNS})
    WHERE NOT EXISTS (
        SELECT 1 FROM kw_purged g WHERE g.server = r.server AND g.until_ms > :now_ms
    )
),
old AS (
    SELECT p.id, p.server, p.bucket, p.keys, p.length FROM kw_passages p
    JOIN input i ON i.id = p.id
    ORDER BY p.id
    FOR UPDATE OF p
),
written AS (
    INSERT INTO kw_passages
        (id, server, bucket, scope, kind, channel_id, time_ms, expires_at, passage, terms, tf,
         keys, length)
    SELECT id, server, bucket, scope, kind, channel_id, time_ms, expires_at, passage, terms, tf,
           keys, length
    FROM input WHERE (SELECT count(*) FROM old) >= 0
    ORDER BY id
    ON CONFLICT (id) DO UPDATE SET
        server = excluded.server, bucket = excluded.bucket, scope = excluded.scope,
        kind = excluded.kind, channel_id = excluded.channel_id, time_ms = excluded.time_ms,
        expires_at = excluded.expires_at, passage = excluded.passage, terms = excluded.terms,
        tf = excluded.tf, keys = excluded.keys, length = excluded.length,
        vectors_pending = false
    RETURNING id
),
expired AS (
    DELETE FROM kw_passages p WHERE p.id IN (
        SELECT e.id FROM kw_passages e
        WHERE e.expires_at IS NOT NULL AND e.expires_at < :now_s
          AND e.id NOT IN (SELECT id FROM input)
        ORDER BY e.expires_at LIMIT {EXPIRE_WITH_WRITE}
    )
    RETURNING p.server, p.bucket, p.keys, p.length
),
delta AS (
    SELECT i.server, i.bucket, k.term, 1 AS n FROM input i CROSS JOIN unnest(i.keys) AS k(term)
    UNION ALL
    SELECT o.server, o.bucket, k.term, -1 FROM old o CROSS JOIN unnest(o.keys) AS k(term)
    UNION ALL
    SELECT e.server, e.bucket, k.term, -1 FROM expired e CROSS JOIN unnest(e.keys) AS k(term)
),
sized AS (
    SELECT server, bucket, 1::bigint AS documents, length::bigint AS tokens FROM input
    UNION ALL
    SELECT server, bucket, -1, -length FROM old
    UNION ALL
    SELECT server, bucket, -1, -length FROM expired
){_COUNTS}
SELECT 'written', count(*)::text FROM written
UNION ALL
SELECT 'schema', coalesce(max(version), 0)::text FROM kw_schema
UNION ALL
SELECT 'expired', count(*)::text FROM expired
UNION ALL
SELECT 'skipped', count(*)::text FROM json_to_recordset(CAST(:rows AS json)) AS r(server text)
WHERE EXISTS (SELECT 1 FROM kw_purged g WHERE g.server = r.server AND g.until_ms > :now_ms)
UNION ALL
SELECT 'pending', p.passage FROM (
    SELECT passage FROM kw_passages
    WHERE server = :pending_server AND vectors_pending AND id NOT IN (SELECT id FROM input)
      AND (expires_at IS NULL OR expires_at >= :now_s)
    ORDER BY time_ms DESC, id LIMIT :pending_limit
) AS p
"""  # nosec B608 # fixed fragments and placeholders: values travel as parameters
    params: dict[str, Param] = {
        "rows": rows_json,
        "now_ms": now_ms,
        "now_s": now_ms // 1000,
        "pending_server": pending_server,
        "pending_limit": pending_limit,
    }
    return Statement(sql, params)


def _deleting(where: str) -> str:
    """A DELETE of the rows `where` selects (at most DELETE_PAGE of them, by an index), the
    counts moved back, the number deleted answered."""
    return f"""
WITH gone AS (
    DELETE FROM kw_passages p WHERE p.id IN ({where})
    RETURNING p.server, p.bucket, p.keys, p.length
),
delta AS (
    SELECT g.server, g.bucket, k.term, -1 AS n FROM gone g CROSS JOIN unnest(g.keys) AS k(term)
),
sized AS (
    SELECT server, bucket, -1::bigint AS documents, -length::bigint AS tokens FROM gone
){_COUNTS}
SELECT count(*) FROM gone
"""  # nosec B608 # fixed fragments and placeholders: values travel as parameters


def remove(ids_json: str) -> Statement:
    """Delete passages by id (a JSON array; absent ids are fine)."""
    where = "SELECT json_array_elements_text(CAST(:ids AS json))"
    return Statement(_deleting(where), {"ids": ids_json})


def shorten_expiry(ids_json: str, expires_at: int) -> Statement:
    """These passages expire by `expires_at` (epoch seconds) where they would outlive it: the
    table's items they copy expire sooner now (a server's shortened retention)."""
    return Statement(
        "UPDATE kw_passages SET expires_at = :expires, passage = "
        "jsonb_set(CAST(passage AS jsonb), '{expires_at}', to_jsonb(:expires))::text WHERE id IN "
        "(SELECT json_array_elements_text(CAST(:ids AS json))) "
        "AND (expires_at IS NULL OR expires_at > :expires)",
        {"ids": ids_json, "expires": expires_at},
    )


def expire(now_s: int) -> Statement:
    """Delete up to DELETE_PAGE passages whose own expiry has passed (the expiry index)."""
    where = (
        "SELECT id FROM kw_passages WHERE expires_at IS NOT NULL AND expires_at < :now "
        f"ORDER BY expires_at LIMIT {DELETE_PAGE}"  # nosec B608 # fixed fragments and placeholders: values travel as parameters
    )
    return Statement(_deleting(where), {"now": now_s})


def purge_server(server: str) -> Statement:
    """Delete up to DELETE_PAGE passages of a server (run until it answers 0)."""
    where = f"SELECT id FROM kw_passages WHERE server = :server LIMIT {DELETE_PAGE}"  # nosec B608 # fixed fragments and placeholders: values travel as parameters
    return Statement(_deleting(where), {"server": server})


def mark_purged(server: str, until_ms: int) -> Statement:
    """A server's purge marker, before its rows go (kept until `until_ms`)."""
    return Statement(
        "INSERT INTO kw_purged (server, until_ms) VALUES (:server, :until_ms) "
        "ON CONFLICT (server) DO UPDATE SET until_ms = greatest(kw_purged.until_ms, excluded.until_ms)",
        {"server": server, "until_ms": until_ms},
    )


def forget_counts(server: str) -> Statement:
    """A purged server's counts (after its passages: none should be left, but a count that
    drifted is a word kept)."""
    return Statement(
        "WITH t AS (DELETE FROM kw_terms WHERE server = :server RETURNING 1) "
        "DELETE FROM kw_sizes WHERE server = :server",
        {"server": server},
    )


def mark_vectors_pending(ids_json: str, pending: bool) -> Statement:
    return Statement(
        "UPDATE kw_passages SET vectors_pending = CAST(:pending AS boolean) "
        "WHERE id IN (SELECT json_array_elements_text(CAST(:ids AS json)))",
        {"ids": ids_json, "pending": "true" if pending else "false"},
    )


def page_of_passages(after_id: str, limit: int) -> Statement:
    """Every stored passage, a page at a time by id (audits and the erasure tests)."""
    return Statement(
        "SELECT id, passage FROM kw_passages WHERE id > :after ORDER BY id LIMIT :limit",
        {"after": after_id, "limit": limit},
    )


# -- search ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchSpec:
    """What one search statement needs beyond the query: its tokens, the candidates per pass
    (`depth`), and the feedback words to add (0: no feedback pass)."""

    server: str
    terms_json: str
    depth: int
    feedback_terms: int
    feedback_passages: int
    feedback_min_chars: int


def _filters(query: SearchQuery, params: dict[str, Param]) -> str:
    """The WHERE clause every pass shares, on alias p: scope, expiry, channels and kinds."""
    clauses = ["p.scope = :scope", "(p.expires_at IS NULL OR p.expires_at >= :now)"]
    params["scope"] = query.scope
    params["now"] = query.now_s
    if query.channel_ids is not None:
        clauses.append("p.channel_id IN (SELECT json_array_elements_text(CAST(:channels AS json)))")
        params["channels"] = json.dumps(list(query.channel_ids))
    if query.kinds is not None:
        clauses.append("p.kind IN (SELECT json_array_elements_text(CAST(:kinds AS json)))")
        params["kinds"] = json.dumps([kind.value for kind in query.kinds])
    return " AND ".join(clauses)


def _spans(name: str, spans: list[tuple[int, int]], params: dict[str, Param]) -> str:
    """`p.time_ms` within any of these spans, each edge a parameter."""
    within = []
    for n, (start, end) in enumerate(spans):
        params[f"{name}{n}_from"], params[f"{name}{n}_to"] = start, end
        within.append(f"(p.time_ms >= :{name}{n}_from AND p.time_ms < :{name}{n}_to)")
    return "(" + " OR ".join(within) + ")"


def _ranked(
    name: str,
    weights: str,
    where: str,
    params: dict[str, Param],
    spans: list[tuple[int, int]] | None = None,
    when: str = "TRUE",
) -> str:
    """A pass (when `when` holds): rows holding any term of `weights` (term, docs, idf) that
    pass `where` (and lie in `spans`), scored by BM25, best first (ties: the newer passage,
    then the id), ranked 1..depth. Which rows are scored: those the rarest terms pick within
    ROW_BUDGET (the GIN index, with the time index for spans: a bitmap AND of both; a term no
    passage holds picks nothing); when no term is that rare, the newest WINDOW_ROWS rows of the scope in each span (or of all time)
    holding one."""
    within = _spans(f"{name}_s", spans, params) if spans else "TRUE"
    # The window's rows come by the time index alone, one span at a time.
    windows = " UNION ALL ".join(
        f"""(SELECT * FROM kw_passages p
              WHERE NOT EXISTS (SELECT 1 FROM {name}_picked) AND {when} AND p.scope = :scope
                AND p.time_ms >= :{name}_w{n}_from AND p.time_ms < :{name}_w{n}_to
              ORDER BY p.time_ms DESC LIMIT :window)"""  # nosec B608 # fixed fragments and placeholders: values travel as parameters
        for n in range(len(spans or [(0, 0)]))
    )
    for n, (start, end) in enumerate(spans or [(-(2**62), 2**62)]):
        params[f"{name}_w{n}_from"], params[f"{name}_w{n}_to"] = start, end
    score = (
        f"SELECT sum(w.idf * f.tf * {K1 + 1} / (f.tf + {K1} * ({1 - B} + {B} * c.length / s.avgdl)))"
        f" FROM {weights} w CROSS JOIN LATERAL (SELECT (c.tf ->> w.term)::float8 AS tf) f"
        " WHERE f.tf IS NOT NULL"  # nosec B608 # fixed fragments and placeholders: values travel as parameters
    )
    return f"""
{name}_picked AS (
    SELECT term FROM (
        SELECT term, sum(docs) OVER (ORDER BY docs, term) AS running FROM {weights}
        WHERE docs > 0
    ) AS r WHERE running <= :row_budget
),
{name} AS (
    SELECT x.id, x.passage, x.terms, row_number() OVER (
        ORDER BY x.score DESC, x.time_ms DESC, x.id) AS rank
    FROM (
        SELECT c.id, c.passage, c.terms, c.time_ms, ({score}) AS score
        FROM (
            SELECT p.id, p.passage, p.terms, p.time_ms, p.tf, p.length FROM kw_passages p
            WHERE {when} AND p.keys && ARRAY(SELECT term FROM {name}_picked)
              AND {within} AND {where}
            UNION ALL
            SELECT p.id, p.passage, p.terms, p.time_ms, p.tf, p.length FROM ({windows}) AS p
            WHERE (p.keys && ARRAY(SELECT term FROM {weights})) IS TRUE AND {where}
        ) AS c CROSS JOIN sizes s
        ORDER BY score DESC, c.time_ms DESC, c.id
        LIMIT :depth
    ) AS x
)"""  # nosec B608 # fixed fragments and placeholders: values travel as parameters


def _weights(name: str, terms: str) -> str:
    """(term, idf) of the terms a CTE lists, from the server's counts."""
    return f"""
{name} AS (
    SELECT q.term, d.docs,
           greatest(ln(greatest((s.n - d.docs + 0.5) / (d.docs + 0.5), 1e-300)), {MIN_IDF}) AS idf
    FROM {terms} q CROSS JOIN sizes s CROSS JOIN LATERAL (
        SELECT coalesce(sum(t.docs), 0)::float8 AS docs FROM kw_terms t
        WHERE t.server = :server AND t.term = q.term
    ) AS d
)"""  # nosec B608 # fixed fragments and placeholders: values travel as parameters


def search(query: SearchQuery, spec: SearchSpec) -> Statement:
    """Every keyword pass of one query in one statement (one round trip): BM25 over the
    query's terms; again widened by the words the best passages share (the feedback pass,
    when `spec.feedback_terms`); and when the query names times, BM25 within them alone and
    the newest of what was said within its short spans (the dated pass). Answers rows
    (pass, rank, id, NULL): pass 1 first, 2 widened, 3 dated, 4 listed; then (0, 0, id,
    passage JSON) once for each passage they hold."""
    params: dict[str, Param] = {
        "server": spec.server,
        "terms": spec.terms_json,
        "depth": spec.depth,
        "feedback": spec.feedback_terms,
        "best": spec.feedback_passages,
        "min_chars": spec.feedback_min_chars,
        "row_budget": ROW_BUDGET,
        "window": WINDOW_ROWS,
    }
    where = _filters(query, params)
    ctes = [
        """
sizes AS (
    SELECT coalesce(sum(documents), 0)::float8 AS n,
           greatest(coalesce(sum(tokens), 0)::float8 / greatest(sum(documents), 1), 1.0) AS avgdl
    FROM kw_sizes WHERE server = :server
)""",
        """
asked AS (
    SELECT t.term, t.ord FROM json_array_elements_text(CAST(:terms AS json))
    WITH ORDINALITY AS t(term, ord)
)""",
        _weights("asked_idf", "asked"),
        _ranked("first_pass", "asked_idf", where, params),
        """
best_words AS (
    SELECT b.rank, w.tok, w.pos FROM first_pass b
    CROSS JOIN LATERAL unnest(string_to_array(b.terms, ' ')) WITH ORDINALITY AS w(tok, pos)
    WHERE b.rank <= :best AND b.terms <> ''
)""",
        """
extra AS (
    SELECT tok AS term FROM best_words
    WHERE char_length(tok) >= :min_chars AND tok NOT IN (SELECT term FROM asked)
    GROUP BY tok HAVING count(DISTINCT rank) >= 2
    ORDER BY count(*) DESC, min(rank * 100000 + pos)
    LIMIT :feedback
)""",
        """
wider AS (SELECT term FROM asked UNION ALL SELECT term FROM extra)""",
        _weights("wider_idf", "wider"),
        _ranked("wide_pass", "wider_idf", where, params, when="EXISTS (SELECT 1 FROM extra)"),
    ]
    passes = [
        "SELECT 1 AS pass, rank, id, passage FROM first_pass",
        "SELECT 2, rank, id, passage FROM wide_pass",
    ]
    if query.during:
        ctes.append(_ranked("dated_pass", "asked_idf", where, params, spans=query.during))
        passes.append("SELECT 3, rank, id, passage FROM dated_pass")
        short = [span for span in query.during if span[1] - span[0] <= LISTED_SPAN_MS]
        if short:
            ctes.append(
                f"""
listed AS (
    SELECT p.id, p.passage, row_number() OVER (ORDER BY p.time_ms DESC, p.id) AS rank
    FROM (
        SELECT p.id, p.passage, p.time_ms FROM kw_passages p
        WHERE {_spans("l", short, params)} AND {where}
        ORDER BY p.time_ms DESC, p.id LIMIT :depth
    ) AS p
)"""  # nosec B608 # fixed fragments and placeholders: values travel as parameters
            )
            passes.append("SELECT 4, rank, id, passage FROM listed")
    # Each passage's JSON once, however many passes hold it (the Data API answers at most 1 MiB).
    ctes.append("\nranked AS (\n    " + "\n    UNION ALL\n    ".join(passes) + "\n)")
    sql = (
        "WITH"
        + ",".join(ctes)  # nosec B608 # fixed fragments: values travel as parameters
        + """
SELECT pass, rank, id, NULL AS passage FROM ranked
UNION ALL
SELECT 0, 0, id, min(passage) FROM ranked GROUP BY id
"""  # nosec B608 # fixed fragments and placeholders: values travel as parameters
    )
    return Statement(sql, params)
