"""A SearchIndex on the standard library's sqlite3 with FTS5: the local and test adapter.

The FTS5 table indexes `keywords.tokens()` output of each passage's keyword text (joined by
spaces) under unicode61, told to keep combining marks inside tokens, so documents and
queries are split and stemmed by the same Python rules. A file written under other rules
(its user_version is not keywords.TOKENS_VERSION) has its keyword column rebuilt on open.

With an embedder, vectors are stored beside each passage and compared in Python: fine at
local scale, and the vector leg is capped at the newest rows that pass the filters. One leg
failing never takes the other down: a passage whose embedding fails is written for keywords
with no vector (marked for re-embedding: a later write embeds a page of such rows), and a
search whose query embedding fails answers from keywords (SearchHits.vector_error says why).
"""

from __future__ import annotations

import logging
import math
import operator
import sqlite3
import threading
from array import array
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from botmemory.search import rules
from botmemory.search.fusion import reciprocal_rank_fusion
from botmemory.search.keywords import (
    TOKENS_VERSION,
    clip_query,
    feedback_terms,
    match_of,
    query_terms,
    tokens,
)
from botmemory.search.passages import keyword_text
from botmemory.search.port import (
    LISTED_SPAN_MS,
    KeywordsOnly,
    Passage,
    SearchHit,
    SearchHits,
    SearchQuery,
)

if TYPE_CHECKING:
    from botmemory.search.embeddings import Embedder

log = logging.getLogger(__name__)

# Rows the vector leg compares per query, newest first: bounds a Python-side scan.
VECTOR_SCAN_ROWS = 4000
# Candidates the keyword leg passes to fusion, as a multiple of the query's limit. The
# vector leg passes the query's limit, as S3 Vectors does (its topK): a deeper vector list
# only lets far neighbours outrank the keyword leg's finds at the block's edge (`make eval`,
# docs/eval.md: the embedded hybrid held 1,235 / 1,344 / 1,401 of 1,536 questions at 2,000
# / 4,000 / 8,000 characters with the limit, 1,237 / 1,340 / 1,399 with four times it).
CANDIDATE_FACTOR = 4
_BUSY_TIMEOUT_S = 10.0  # another process (the local dev stack) may hold the write lock
_PAGE_ROWS = 500
# Rows without a vector of the current model embedded per write, beside its own passages.
REEMBED_ROWS = 64

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS passages (
        pk INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        scope TEXT NOT NULL,
        channel_id TEXT NOT NULL,
        time_ms INTEGER NOT NULL,
        expires_at INTEGER,
        passage TEXT NOT NULL,
        terms TEXT NOT NULL,
        vector BLOB,
        vector_model TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS passages_scope_time ON passages (scope, time_ms)",
    # The rows a write re-embeds: those whose embedding failed (or predate the embedder).
    "CREATE INDEX IF NOT EXISTS passages_unembedded ON passages (pk) WHERE vector IS NULL",
    # Written by the keyword shards of earlier versions (removed): kept so that a removal
    # still clears a file they left, never read.
    "CREATE TABLE IF NOT EXISTS vectors_pending (id TEXT PRIMARY KEY)",
    # External content: the text lives once, in passages.terms; triggers keep FTS in step.
    """CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(
        terms, content='passages', content_rowid='pk',
        tokenize="unicode61 categories 'L* N* Co M*'"
    )""",
    """CREATE TRIGGER IF NOT EXISTS passages_ai AFTER INSERT ON passages BEGIN
        INSERT INTO passages_fts (rowid, terms) VALUES (new.pk, new.terms);
    END""",
    """CREATE TRIGGER IF NOT EXISTS passages_ad AFTER DELETE ON passages BEGIN
        INSERT INTO passages_fts (passages_fts, rowid, terms) VALUES ('delete', old.pk, old.terms);
    END""",
    # Only when the words change: adding a vector later leaves the FTS row as it is.
    """CREATE TRIGGER IF NOT EXISTS passages_au AFTER UPDATE OF terms ON passages BEGIN
        INSERT INTO passages_fts (passages_fts, rowid, terms) VALUES ('delete', old.pk, old.terms);
        INSERT INTO passages_fts (rowid, terms) VALUES (new.pk, new.terms);
    END""",
)

# An upsert, not INSERT OR REPLACE: REPLACE deletes without firing the delete trigger
# (recursive_triggers is off), which would leave a stale FTS row behind.
_UPSERT = """
INSERT INTO passages
    (id, kind, scope, channel_id, time_ms, expires_at, passage, terms, vector, vector_model)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    kind = excluded.kind, scope = excluded.scope, channel_id = excluded.channel_id,
    time_ms = excluded.time_ms, expires_at = excluded.expires_at,
    passage = excluded.passage, terms = excluded.terms,
    vector = excluded.vector, vector_model = excluded.vector_model
"""

_KEYWORD_SQL = """
SELECT p.id, p.passage, bm25(passages_fts), p.terms FROM passages_fts
JOIN passages AS p ON p.pk = passages_fts.rowid
WHERE passages_fts MATCH ? AND {where}
ORDER BY bm25(passages_fts), p.time_ms DESC, p.id LIMIT ?
"""

# What was said within a time span, newest first (the dated pass's listing).
_LISTED_SQL = """
SELECT p.id, p.passage, p.terms FROM passages AS p WHERE {where}
ORDER BY p.time_ms DESC, p.id LIMIT ?
"""

_VECTOR_SQL = """
SELECT p.id, p.passage, p.vector FROM passages AS p
WHERE p.vector IS NOT NULL AND p.vector_model = ? AND {where}
ORDER BY p.time_ms DESC, p.id LIMIT ?
"""

_REEMBED_SQL = """
SELECT pk, passage FROM passages WHERE vector IS NULL OR vector_model IS NOT ? ORDER BY pk LIMIT ?
"""

# What a file written under older keyword rules drops before _SCHEMA builds it again.
_OLD_KEYWORDS = (
    "DROP TRIGGER IF EXISTS passages_ai",
    "DROP TRIGGER IF EXISTS passages_ad",
    "DROP TRIGGER IF EXISTS passages_au",
    "DROP TABLE IF EXISTS passages_fts",
)

Param = str | int | bytes | None
Candidate = tuple[str, str]  # (passage id, passage JSON)


def _unit_vector(values: Sequence[float]) -> array[float]:
    """float32, scaled to length 1 so cosine similarity is a dot product."""
    norm = math.sqrt(math.fsum(v * v for v in values))
    return array("f", (v / norm for v in values) if norm > 0.0 else values)


def _filters(query: SearchQuery, spans: Sequence[tuple[int, int]] = ()) -> tuple[str, list[Param]]:
    """The WHERE clause every leg shares: scope always, channels and kinds when given,
    and expiry; and within these time spans when given (SearchQuery.during). Only fixed SQL
    and placeholders: no query text enters the statement."""
    clauses = ["p.scope = ?", "(p.expires_at IS NULL OR p.expires_at >= ?)"]
    params: list[Param] = [query.scope, query.now_s]
    if query.channel_ids is not None:
        clauses.append(f"p.channel_id IN ({', '.join('?' * len(query.channel_ids))})")
        params.extend(query.channel_ids)
    if query.kinds is not None:
        clauses.append(f"p.kind IN ({', '.join('?' * len(query.kinds))})")
        params.extend(kind.value for kind in query.kinds)
    if spans:
        within = " OR ".join(["(p.time_ms >= ? AND p.time_ms < ?)"] * len(spans))
        clauses.append(f"({within})")
        params.extend(edge for span in spans for edge in span)
    return " AND ".join(clauses), params


def _ranked_by_similarity(
    target: array[float], rows: list[tuple[str, str, bytes]], depth: int
) -> list[Candidate]:
    """Rows with a positive cosine to the target, best first (ties keep the newer row)."""
    scored: list[tuple[float, int, Candidate]] = []
    for position, (passage_id, body, blob) in enumerate(rows):
        vector = array("f")
        vector.frombytes(blob)
        if len(vector) != len(target):
            continue  # written under another dimension setting: not comparable
        similarity = sum(map(operator.mul, target, vector))
        if similarity > 0.0:
            scored.append((-similarity, position, (passage_id, body)))
    scored.sort(key=lambda entry: (entry[0], entry[1]))
    return [candidate for _, _, candidate in scored[:depth]]


def _fuse(keyword: list[Candidate], vector: list[Candidate], limit: int) -> list[SearchHit]:
    bodies = dict(keyword) | dict(vector)
    keyword_ids = [passage_id for passage_id, _ in keyword]
    vector_ids = [passage_id for passage_id, _ in vector]
    keyword_rank = {passage_id: i for i, passage_id in enumerate(keyword_ids, start=1)}
    vector_rank = {passage_id: i for i, passage_id in enumerate(vector_ids, start=1)}
    return [
        SearchHit(
            passage=Passage.model_validate_json(bodies[passage_id]),
            score=score,
            keyword_rank=keyword_rank.get(passage_id),
            vector_rank=vector_rank.get(passage_id),
        )
        for passage_id, score in reciprocal_rank_fusion(
            [keyword_ids, vector_ids], k=rules.current().legs_k
        )[:limit]
    ]


def _rebuild_keywords(conn: sqlite3.Connection) -> None:
    """Recompute every row's keyword text under today's rules (the FTS table, dropped here,
    is built again from it by the caller)."""
    for statement in _OLD_KEYWORDS:
        conn.execute(statement)
    last_pk = 0
    while rows := conn.execute(
        "SELECT pk, passage FROM passages WHERE pk > ? ORDER BY pk LIMIT ?", (last_pk, _PAGE_ROWS)
    ).fetchall():
        conn.executemany(
            "UPDATE passages SET terms = ? WHERE pk = ?",
            [
                (" ".join(tokens(keyword_text(Passage.model_validate_json(str(body))))), pk)
                for pk, body in rows
            ],
        )
        last_pk = int(rows[-1][0])


class SqliteSearchIndex:
    """SearchIndex on one SQLite connection shared by threads behind a lock."""

    def __init__(self, path: str = ":memory:", embedder: Embedder | None = None) -> None:
        self._embedder = embedder
        self._lock = threading.Lock()
        # Autocommit: transactions are begun explicitly, so 3.11 and 3.13 behave alike.
        self._conn = sqlite3.connect(
            path, timeout=_BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
        )
        # Deleted rows are overwritten, not left in free pages: deleted means gone.
        self._conn.execute("PRAGMA secure_delete=ON").fetchall()
        if path not in (":memory:", ""):
            # WAL lets the other process of the dev stack read while this one writes.
            self._conn.execute("PRAGMA journal_mode=WAL").fetchall()
        with self._transaction() as conn:
            conn.execute(_SCHEMA[0])  # the passages table, which a rebuild reads
            stale = conn.execute("PRAGMA user_version").fetchone()[0] != TOKENS_VERSION
            if stale:
                _rebuild_keywords(conn)
            for statement in _SCHEMA:
                conn.execute(statement)
            if stale:
                conn.execute("INSERT INTO passages_fts (passages_fts) VALUES ('rebuild')")
                conn.execute(f"PRAGMA user_version = {int(TOKENS_VERSION)}")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            # IMMEDIATE takes the write lock up front, so a busy file waits here, not mid-way.
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, params: Sequence[Param]) -> list[Any]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _vectors(self, texts: Sequence[str]) -> list[bytes]:
        assert self._embedder is not None  # nosec B101 # narrows the type: called only with an embedder
        vectors = self._embedder.embed(texts)
        if len(vectors) != len(texts):
            raise ValueError(
                f"embedder {self._embedder.name} returned {len(vectors)} vectors "
                f"for {len(texts)} texts"
            )
        return [_unit_vector(vector).tobytes() for vector in vectors]

    def add(self, passages: Sequence[Passage]) -> int:
        """Insert or replace by id; embeds all texts in one call first (outside the lock,
        as it may be a network call), then a page of rows still without a vector. Returns
        the number of passages written; raises KeywordsOnly, after writing them, when their
        embedding failed."""
        if not passages:
            return 0
        vectors: list[bytes | None] = [None] * len(passages)
        failure: Exception | None = None
        if self._embedder is not None:
            try:
                vectors = list(self._vectors([p.text for p in passages]))
            except Exception as exc:  # the vector leg only: keywords are written anyway
                failure = exc
        model = self._embedder.name if self._embedder is not None else None
        rows = [
            (
                p.id,
                p.kind.value,
                p.scope,
                p.channel_id,
                p.time_ms,
                p.expires_at,
                p.model_dump_json(),
                " ".join(tokens(keyword_text(p))),
                vector,
                model if vector is not None else None,
            )
            for p, vector in zip(passages, vectors, strict=True)
        ]
        with self._transaction() as conn:
            conn.executemany(_UPSERT, rows)
        if failure is not None:
            log.warning("passages indexed without vectors", extra={"error": repr(failure)[:300]})
            raise KeywordsOnly(len(passages), failure)
        self._reembed()
        return len(passages)

    def _reembed(self) -> None:
        """Vectors for a page of rows that have none of the current model (their embedding
        failed when written): the embedder answers again, so they rejoin the vector leg."""
        if self._embedder is None:
            return
        rows = self._read(_REEMBED_SQL, [self._embedder.name, REEMBED_ROWS])
        if not rows:
            return
        bodies = [Passage.model_validate_json(str(body)) for _, body in rows]
        try:
            vectors = self._vectors([p.text for p in bodies])
        except Exception as exc:  # they stay marked; the next write tries again
            log.warning("re-embedding failed", extra={"error": repr(exc)[:300]})
            return
        with self._transaction() as conn:
            # Only the vector: a row rewritten meanwhile keeps its newer words (and a vector
            # of those is written by its own add).
            conn.executemany(
                "UPDATE passages SET vector = ?, vector_model = ? WHERE pk = ? AND passage = ?",
                [
                    (vector, self._embedder.name, pk, body)
                    for (pk, body), vector in zip(rows, vectors, strict=True)
                ],
            )

    def search(self, query: SearchQuery) -> list[SearchHit]:
        """Keyword (FTS5 bm25) and, with an embedder, vector candidates fused by RRF.

        A vector leg failure (the embedding call) leaves the keyword leg to answer alone:
        the hits carry the error (SearchHits.vector_error) for the caller to count."""
        text, _ = clip_query(query.text)
        if text is None or query.channel_ids == [] or query.kinds == []:
            return []
        depth = CANDIDATE_FACTOR * query.limit
        keyword = self._keyword_leg(query_terms(text), query, depth)
        where, params = _filters(query)
        failure: Exception | None = None
        try:
            vector = self._vector_leg(text, where, params, query.limit)
        except Exception as exc:  # fail-open to the keyword leg
            log.warning("vector leg failed; keywords only", extra={"error": repr(exc)[:300]})
            vector, failure = [], exc
        hits = SearchHits(_fuse(keyword, vector, query.limit))
        hits.vector_error = failure
        return hits

    def _keyword_leg(self, terms: list[str], query: SearchQuery, depth: int) -> list[Candidate]:
        """FTS5 bm25 over the terms, then again widened with the words the best passages
        share (keywords.feedback_terms), and over the query's time spans alone when it
        names some (SearchQuery.during), the orders fused by reciprocal rank."""
        where, params = _filters(query)
        first = self._keyword_rows(terms, where, params, depth)
        extra = feedback_terms(terms, [words for _, _, words in first])
        passes = [first]
        if extra:
            passes.append(self._keyword_rows([*terms, *extra], where, params, depth))
        if query.during:
            passes.append(self._dated_rows(terms, query, depth))
        if len(passes) == 1:
            return [(pid, body) for pid, body, _ in first]
        bodies = {pid: body for rows in passes for pid, body, _ in rows}
        fused = reciprocal_rank_fusion(
            [[pid for pid, _, _ in rows] for rows in passes], k=rules.current().legs_k
        )
        return [(pid, bodies[pid]) for pid, _ in fused[:depth]]

    def _keyword_rows(
        self, terms: list[str], where: str, params: list[Param], depth: int
    ) -> list[tuple[str, str, str]]:
        """(id, passage JSON, tokens) by FTS5 bm25, best first."""
        match = match_of(terms)
        if match is None:
            return []
        rows = self._read(_KEYWORD_SQL.format(where=where), [match, *params, depth])
        return [(str(pid), str(body), str(words)) for pid, body, _, words in rows]

    def _dated_rows(
        self, terms: list[str], query: SearchQuery, depth: int
    ) -> list[tuple[str, str, str]]:
        """The dated pass: what was said within the query's time spans, by bm25 over the
        terms, then, within the spans short enough to read whole (a day, not a month:
        port.LISTED_SPAN_MS), the rest of what was said there, newest first: "how was John
        feeling on 10 April?" shares no word with "I just needed some time alone"."""
        rows = self._keyword_rows(terms, *_filters(query, query.during), depth)
        short = [span for span in query.during if span[1] - span[0] <= LISTED_SPAN_MS]
        if short and len(rows) < depth:
            where, params = _filters(query, short)
            listed = self._read(_LISTED_SQL.format(where=where), [*params, depth])
            rows += [(str(pid), str(body), str(words)) for pid, body, words in listed]
        return list({row[0]: row for row in rows}.values())[:depth]

    def _vector_leg(
        self, text: str, where: str, params: list[Param], depth: int
    ) -> list[Candidate]:
        if self._embedder is None:
            return []
        # Embedded before taking the lock: a slow provider must not stall writers.
        from botmemory.search.embeddings import embed_query  # only with an embedder

        target = _unit_vector(embed_query(self._embedder, text))
        rows = self._read(
            _VECTOR_SQL.format(where=where), [self._embedder.name, *params, VECTOR_SCAN_ROWS]
        )
        typed = [(str(pid), str(body), bytes(blob)) for pid, body, blob in rows]
        return _ranked_by_similarity(target, typed, depth)

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        """Delete by id (the trigger drops the FTS row too); absent ids are fine. One file holds
        every scope: `scope` changes nothing."""
        distinct = list(dict.fromkeys(ids))
        if distinct:
            with self._transaction() as conn:
                conn.executemany("DELETE FROM passages WHERE id = ?", [(i,) for i in distinct])
                conn.executemany(
                    "DELETE FROM vectors_pending WHERE id = ?", [(i,) for i in distinct]
                )
        return len(distinct)

    def shorten_expiry(self, ids: Iterable[str], expires_at: int) -> int:
        """These passages expire by `expires_at` where they would outlive it."""
        distinct = list(dict.fromkeys(ids))
        if distinct:
            with self._transaction() as conn:
                conn.executemany(
                    "UPDATE passages SET expires_at = ?, passage = json_set(passage, "
                    "'$.expires_at', ?) WHERE id = ? AND (expires_at IS NULL OR expires_at > ?)",
                    [(expires_at, expires_at, i, expires_at) for i in distinct],
                )
        return len(distinct)

    def passages(self) -> Iterator[Passage]:
        """Every stored passage, expired or not, a page at a time so no lock is held
        while the caller works."""
        last_pk = 0
        while True:
            rows = self._read(
                "SELECT pk, passage FROM passages WHERE pk > ? ORDER BY pk LIMIT ?",
                (last_pk, _PAGE_ROWS),
            )
            if not rows:
                return
            for _, body in rows:
                yield Passage.model_validate_json(str(body))
            last_pk = int(rows[-1][0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
