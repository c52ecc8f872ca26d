"""Tables 3f and 3h: the keyword leg on PostgreSQL (botmemory.search.postgres_index) at the
size of a big server, on a temporary local cluster (localrun.postgres).

3f. One server whose channel talks at 100 messages a minute, with HISTORIES passages of
history: the work of a consolidation round (20 passages: statements, rows written, bytes
sent) and the keyword query's p50/p95 at each size. History is loaded in bulk by SQL (the
rows a round writes, with words drawn Zipf-like from a VOCABULARY-word vocabulary, and their
counts), then rounds and queries run through the index itself, as the functions run them.
3h. A question naming a day: the plan of its search statement at the largest size (which
index reads which rows; no pass reads the whole table).

Latency here is a local cluster on this machine. On AWS each statement is one RDS Data API
call to Aurora Serverless v2; DATA_API_MS is the added latency we assume (docs/search.md).
`make bench ARGS=...` has no knob: HISTORIES is the list below.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

from tables import print_table

from botmemory.search.keywords import FEEDBACK_PASSAGES, FEEDBACK_TERMS, MIN_FEEDBACK_CHARS
from botmemory.search.port import Passage, PassageKind, SearchQuery
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.postgres_sql import SearchSpec, Statement
from botmemory.search.postgres_sql import search as search_statement
from botmemory.search.postgres_transport import LocalTransport, Row, Transport
from localrun.postgres import create_database, temporary_cluster

HISTORIES = (100_000, 1_000_000, 10_000_000)
VOCABULARY = 20_000
ROUND = 20  # passages a consolidation round writes
ROUNDS = 10  # rounds measured at each size
QUERIES = 40  # keyword queries measured at each size
PER_MINUTE = 100  # the channel's messages a minute: history's times
SERVER = "100000000000000001"
CHANNEL = "200000000000000001"
START_MS = 1_767_225_600_000
MINUTE_MS = 60_000
BUDGET_MS = 800  # MEMORY_SEARCH_TIMEOUT_MS
# Added per statement on AWS, assumed: the Data API's HTTPS round trip to a running Aurora
# Serverless v2 instance (docs/search.md gives the reasoning and what resuming adds).
DATA_API_MS = 30

_LOAD = """
INSERT INTO kw_passages
    (id, server, bucket, scope, kind, channel_id, time_ms, expires_at, passage, terms, tf, keys,
     length)
SELECT 'M#' || :channel || '#' || n, :server, 'c' || :channel, :server, 'message', :channel,
       CAST(:start AS bigint) + n * CAST(:step AS bigint), NULL,
       json_build_object('id', 'M#' || :channel || '#' || n, 'kind', 'message', 'scope', CAST(:server AS text),
                         'channel_id', CAST(:channel AS text), 'text', w.terms,
                         'time_ms', CAST(:start AS bigint) + n * CAST(:step AS bigint))::text,
       w.terms, w.tf, w.keys, w.length
FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS n
CROSS JOIN LATERAL (
    SELECT string_agg(word, ' ') AS terms, count(*)::integer AS length,
           (SELECT jsonb_object_agg(k, c) FROM (
               SELECT word AS k, count(*) AS c FROM unnest(array_agg(word)) AS word GROUP BY word
           ) AS counted) AS tf,
           array(SELECT DISTINCT x FROM unnest(array_agg(word)) AS x) AS keys
    FROM (
        SELECT 'w' || floor(power(random(), 3) * :vocabulary)::integer AS word
        FROM generate_series(1, 8 + (n % 17))
    ) AS words
) AS w
"""

# The counts of a bulk-loaded history, recounted whole (the rounds keep them after that).
_RECOUNT = (
    "DELETE FROM kw_terms WHERE server = :server",
    "DELETE FROM kw_sizes WHERE server = :server",
    "INSERT INTO kw_terms (server, term, bucket, docs) SELECT server, k, bucket, count(*) "
    "FROM kw_passages, unnest(keys) AS k WHERE server = :server GROUP BY server, k, bucket",
    "INSERT INTO kw_sizes (server, bucket, documents, tokens) SELECT server, bucket, count(*), "
    "sum(length) FROM kw_passages WHERE server = :server GROUP BY server, bucket",
)


class CountingTransport:
    """The local transport, counting statements and the bytes of their parameters."""

    def __init__(self, inner: LocalTransport) -> None:
        self.inner = inner
        self.statements = 0
        self.bytes_sent = 0

    def execute(self, statement: Statement) -> list[Row]:
        self.statements += 1
        self.bytes_sent += len(statement.sql.encode()) + sum(
            len(str(v).encode()) for v in statement.params.values()
        )
        return self.inner.execute(statement)


def _load(transport: Transport, first: int, last: int) -> None:
    """Rows first..last of the history, by SQL; the GIN index built after, not row by row."""
    if first > last:
        return
    step = MINUTE_MS // PER_MINUTE
    transport.execute(Statement("DROP INDEX IF EXISTS kw_passages_keys"))
    for start in range(first, last + 1, 50_000):
        params: dict[str, str | int | None] = {
            "channel": CHANNEL,
            "server": SERVER,
            "start": START_MS,
            "step": step,
            "first": start,
            "last": min(start + 49_999, last),
            "vocabulary": VOCABULARY,
        }
        transport.execute(Statement(_LOAD, params))
    transport.execute(
        Statement("CREATE INDEX IF NOT EXISTS kw_passages_keys ON kw_passages USING gin (keys)")
    )
    for sql in _RECOUNT:
        transport.execute(Statement(sql, {"server": SERVER}))
    transport.execute(Statement("VACUUM ANALYZE kw_passages"))
    transport.execute(Statement("ANALYZE kw_terms"))


def _round(n: int, draw: random.Random) -> list[Passage]:
    words = [f"w{int(draw.random() ** 3 * VOCABULARY)}" for _ in range(12)]
    return [
        Passage(
            id=f"M#{CHANNEL}#r{n}-{i}",
            kind=PassageKind.MESSAGE,
            scope=SERVER,
            channel_id=CHANNEL,
            text=" ".join(draw.sample(words, 8)),
            time_ms=START_MS + 10**12 + n * MINUTE_MS + i,
        )
        for i in range(ROUND)
    ]


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _written(transport: LocalTransport) -> int:
    rows = transport.execute(
        Statement(
            "SELECT sum(n_tup_ins + n_tup_upd + n_tup_del)::bigint FROM pg_stat_user_tables "
            "WHERE relname IN ('kw_passages', 'kw_terms', 'kw_sizes')"
        )
    )
    return int(str(rows[0][0] or 0))


def measure_size(dsn: str, history: int, loaded: int) -> dict[str, Any]:
    """Grow the history to `history` rows, then measure ROUNDS rounds and QUERIES queries."""
    local = LocalTransport(dsn)
    counting = CountingTransport(local)
    index = PostgresKeywordIndex(counting)
    if loaded == 0:
        index.migrate()
    _load(local, loaded + 1, history)
    draw = random.Random(history)
    statements, rows_written, sent = [], [], []
    for n in range(ROUNDS):
        passages = _round(history + n, draw)
        before_statements, before_bytes = counting.statements, counting.bytes_sent
        local.execute(Statement("SELECT pg_stat_clear_snapshot()"))
        before_rows = _written(local)
        index.write(passages, reembed=64)
        # The session's statistics are flushed at its next idle moment (PostgreSQL 15 or later).
        local.execute(Statement("SELECT pg_stat_force_next_flush()"))
        time.sleep(0.1)
        local.execute(Statement("SELECT pg_stat_clear_snapshot()"))
        statements.append(counting.statements - before_statements)
        sent.append(counting.bytes_sent - before_bytes)
        rows_written.append(_written(local) - before_rows)
    common = [f"w{k}" for k in range(0, 30)]
    rare = [f"w{k}" for k in range(VOCABULARY - 3000, VOCABULARY)]
    timed: dict[str, list[float]] = {key: [] for key in ("p", "pd", "c", "cd")}
    for q in range(QUERIES):
        # A common word and two rare ones; then common words alone (no term picks rows:
        # the newest rows are read), each as asked and naming a day.
        for key, words in (
            ("p", [draw.choice(common), draw.choice(rare), draw.choice(rare)]),
            ("c", draw.sample(common, 3)),
        ):
            query = SearchQuery(
                scope=SERVER, channel_ids=[CHANNEL, ""], text=" ".join(words), now_s=0
            )
            day = START_MS + (q * 7919 % history) * (MINUTE_MS // PER_MINUTE)
            named = query.model_copy(update={"during": [(day, day + 86_400_000)]})
            for asked, into in ((query, key), (named, key + "d")):
                started = time.perf_counter()
                index.search(asked)
                timed[into].append((time.perf_counter() - started) * 1000)
    size = local.execute(Statement("SELECT pg_database_size(current_database())"))
    local.close()
    return {
        "history": history,
        "statements": statistics.mean(statements),
        "rows": statistics.mean(rows_written),
        "bytes": statistics.mean(sent),
        **{f"{key}50": _percentile(values, 0.5) for key, values in timed.items()},
        **{f"{key}95": _percentile(values, 0.95) for key, values in timed.items()},
        "worst95": max(_percentile(values, 0.95) for values in timed.values()),
        "database_mb": int(str(size[0][0])) / 2**20,
    }


# What a plan line must name to be shown in 3h: the scans and the indexes they read.
_PLAN_WORDS = ("Scan", "BitmapAnd", "Index Cond")
_PLAN_NOISE = ("CTE Scan", "Function Scan", "Subquery Scan")


def dated_plan(dsn: str, history: int) -> list[str]:
    """The scans of a search statement naming a day, a common word and two rare ones (3h)."""
    local = LocalTransport(dsn)
    day = START_MS + (history // 2) * (MINUTE_MS // PER_MINUTE)
    words = ["w3", f"w{VOCABULARY - 7}", f"w{VOCABULARY - 1500}"]
    query = SearchQuery(
        scope=SERVER,
        channel_ids=[CHANNEL, ""],
        text=" ".join(words),
        now_s=0,
        during=[(day, day + 86_400_000)],
    )
    spec = SearchSpec(
        server=SERVER,
        terms_json=json.dumps(words),
        depth=80,
        feedback_terms=FEEDBACK_TERMS,
        feedback_passages=FEEDBACK_PASSAGES,
        feedback_min_chars=MIN_FEEDBACK_CHARS,
    )
    statement = search_statement(query, spec)
    plan = local.execute(
        Statement("EXPLAIN (ANALYZE, COSTS OFF) " + statement.sql, statement.params)
    )
    local.close()
    lines = [str(line[0]) for line in plan]
    return [
        " ".join(line.split())[:110]
        for line in lines
        if any(word in line for word in _PLAN_WORDS)
        and not any(word in line for word in _PLAN_NOISE)
    ]


def keyword_rows(figures: Sequence[dict[str, Any]]) -> list[tuple[object, ...]]:
    def each(key: str, form: str) -> tuple[object, ...]:
        return tuple(format(f[key], form) for f in figures)

    def pair(key: str) -> tuple[object, ...]:
        return tuple(f"{f[key + '50']:.0f} / {f[key + '95']:.0f}" for f in figures)

    return [
        ("statements a round (20 passages)",) + each("statements", ".0f"),
        ("rows written a round (passages, counts)",) + each("rows", ".0f"),
        ("bytes sent a round (SQL and parameters)",) + each("bytes", ",.0f"),
        ("query p50 / p95, ms (local)",) + pair("p"),
        ("  naming a day",) + pair("pd"),
        ("common words only",) + pair("c"),
        ("  naming a day",) + pair("cd"),
        (f"worst p95 + {DATA_API_MS} ms Data API, ms (budget {BUDGET_MS})",)
        + tuple(f"{f['worst95'] + DATA_API_MS:.0f}" for f in figures),
        ("database size, MB",) + each("database_mb", ",.0f"),
    ]


def bench_keyword_postgres(histories: Sequence[int] = HISTORIES) -> list[dict[str, Any]]:
    figures = []
    with temporary_cluster() as cluster:
        dsn = create_database(cluster, "bench_keywords")
        loaded = 0
        for history in histories:
            figures.append(measure_size(dsn, history, loaded))
            loaded = history
            print(f"(3f: {history:,} passages measured: {figures[-1]})", flush=True)
        plan = dated_plan(dsn, histories[-1])
    print_table(
        "3f. The keyword leg on PostgreSQL: one server, a channel at 100 messages a minute",
        ["figure", *(f"{h:,} passages" for h in histories)],
        keyword_rows(figures),
        [
            f"Each column: {ROUNDS} rounds of {ROUND} passages and {QUERIES} queries of each",
            "kind (a common word and two rare ones; three common words, which no term's rows",
            "answer within the budget, so the newest rows are read), as asked and naming a day,",
            "in the channel and the server's facts, on a temporary local PostgreSQL",
            "(localrun.postgres) grown in bulk to the size shown (10^7: about 20 minutes).",
            "A round is one statement whatever the history: its passages, the counts of its",
            "own channel's terms, and the page of passages waiting for vectors.",
            f"On AWS each statement is one Data API call; {DATA_API_MS} ms added is assumed",
            "(docs/search.md: resuming from a pause takes about 15 s, during which recall",
            "answers from the vectors alone, counted as RecallKeywordLegFailed).",
        ],
    )
    print_table(
        f"3h. A question naming a day, at {histories[-1]:,} passages: what each pass reads",
        ["plan (EXPLAIN ANALYZE of the search statement: its scans)"],
        [(line,) for line in plan],
        [
            "kw_passages_keys: the GIN index of tokens (the rows holding the rarest terms);",
            "kw_passages_scope_time: (scope, time_ms). The dated pass ANDs both bitmaps: it",
            "reads only that day's rows holding a term. No pass reads the whole table.",
        ],
    )
    return figures


if __name__ == "__main__":
    import sys

    bench_keyword_postgres(tuple(int(a) for a in sys.argv[1:]) or HISTORIES)
