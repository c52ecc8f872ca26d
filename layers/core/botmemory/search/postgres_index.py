"""The deployed keyword leg on PostgreSQL (MEMORY_KEYWORD_INDEX=postgres:...): Aurora
PostgreSQL Serverless v2 through the RDS Data API on AWS, a local PostgreSQL elsewhere
(botmemory.search.postgres_transport). The engine indexes for us: a GIN index finds the rows
holding a token, a B-tree the rows of a time span, another the rows past their expiry.

Ranking is the embedded index's (botmemory.search.sqlite_index): the same tokens
(botmemory.search.keywords), BM25 as FTS5 computes it with the server's counts kept in the
database, the feedback pass and the dated pass, fused by reciprocal rank with the rules in
force (botmemory.search.rules). All passes are one statement (botmemory.search.postgres_sql):
recall makes one call, beside the embedding call. A round's write is one statement too: the
passages, the counts they move, and the page of passages still waiting for vectors.

Deleting deletes: removal by id; expiry by each row's own expiry (a bounded, indexed DELETE
inside every write statement, so it runs while the database is awake, and `expire`); a
server's purge. The counts move with the rows and a term's count row goes when it reaches 0,
so no erased word stays in a live row (dead rows wait for vacuum, and Aurora's backups for
their retention: docs/privacy.md).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

from botmemory.clock import Clock, SystemClock
from botmemory.search import postgres_sql as sql
from botmemory.search import rules
from botmemory.search.fusion import reciprocal_rank_fusion
from botmemory.search.keywords import (
    FEEDBACK_PASSAGES,
    FEEDBACK_TERMS,
    MIN_FEEDBACK_CHARS,
    clip_query,
    query_terms,
    tokens,
)
from botmemory.search.passages import keyword_text
from botmemory.search.port import Passage, SearchHit, SearchQuery
from botmemory.search.postgres_transport import (
    KeywordIndexUnavailable,
    Row,
    SchemaMissing,
    Transport,
)
from botmemory.search.sqlite_index import CANDIDATE_FACTOR
from botmemory.storage.keys import server_scope_of

__all__ = ["KeywordIndexUnavailable", "PostgresKeywordIndex"]

log = logging.getLogger(__name__)

# Passages one write statement carries (a round writes tens; the Data API takes 64 KiB of SQL
# and parameters are bounded too, so a backlog is written in pages).
WRITE_PAGE = 200
# Ids one removal statement carries.
REMOVE_PAGE = 1000
# How long a server's purge marker keeps writes out (a round racing the purge).
PURGE_SETTLE_MS = 3_600_000
_PASSAGES_PAGE = 500


def _clean(value: str) -> str:
    """PostgreSQL text holds no NUL: an id, scope or channel with one names nothing stored."""
    return value.replace("\x00", "")


def _passes(
    rows: list[Row], query: SearchQuery, depth: int
) -> tuple[dict[str, str], list[list[str]]]:
    """The search statement's answer as each passage's JSON and the rankings to fuse, as the
    embedded index composes them: the first pass, the widened one when there were feedback
    words, and the dated one (its BM25 order, then the newest of its short spans) when the
    query names times."""
    bodies: dict[str, str] = {}
    passes: dict[int, list[tuple[int, str]]] = {}
    for pass_no, rank, pid, body in rows:
        if int(pass_no or 0) == 0:
            bodies[str(pid)] = str(body)
        else:
            passes.setdefault(int(pass_no or 0), []).append((int(rank or 0), str(pid)))
    ordered = {n: [pid for _, pid in sorted(ranked)] for n, ranked in passes.items()}
    rankings = [ordered.get(1, [])]
    if ordered.get(2):
        rankings.append(ordered[2])
    if query.during:
        dated = ordered.get(3, [])
        if len(dated) < depth:
            dated = list(dict.fromkeys([*dated, *ordered.get(4, [])]))
        rankings.append(dated[:depth])
    return bodies, rankings


class PostgresKeywordIndex:
    """The keyword leg over every passage of every server, in one database."""

    def __init__(self, transport: Transport, clock: Clock | None = None) -> None:
        self.transport = transport
        self._clock = clock or SystemClock()
        self.purged_skips = 0  # passages not written: their server was being purged
        self.bad_skips = 0  # passages not written: an id, scope or channel with a NUL
        self.bad_rows = 0  # stored rows search could not read (skipped)
        self.expired = 0  # rows past their expiry that writes deleted beside their own

    # -- statements ------------------------------------------------------------------------------

    def _run(self, statement: sql.Statement) -> list[Row]:
        """Run a statement; a schema older than the code is migrated once, then it runs again."""
        try:
            return self.transport.execute(statement)
        except SchemaMissing:
            log.info("keyword index schema missing: migrating")
            self.migrate()
            return self.transport.execute(statement)

    def migrate(self) -> int:
        """Run the migrations the database lacks (idempotent); returns the schema version."""
        self.transport.execute(sql.migrate())
        rows = self.transport.execute(sql.schema_version())
        return int(rows[0][0] or 0) if rows else 0

    # -- writing ---------------------------------------------------------------------------------

    def _row(self, passage: Passage) -> dict[str, object] | None:
        if any("\x00" in v for v in (passage.id, passage.scope, passage.channel_id)):
            self.bad_skips += 1
            log.warning("passage with a NUL in its id, scope or channel skipped")
            return None
        words = tokens(keyword_text(passage))
        counts = Counter(words)
        return {
            "id": passage.id,
            "server": server_scope_of(passage.scope),
            "bucket": sql.bucket_of(passage.channel_id, passage.id),
            "scope": passage.scope,
            "kind": passage.kind.value,
            "channel_id": passage.channel_id,
            "time_ms": passage.time_ms,
            "expires_at": passage.expires_at,
            # JSON escapes every control character: the text column never holds a NUL.
            "passage": passage.model_dump_json(),
            "terms": " ".join(words),
            "tf": dict(counts),
            "keys": list(counts),
            "length": len(words),
        }

    def write(self, passages: Sequence[Passage], reembed: int = 0) -> list[Passage]:
        """Insert or replace by id (one statement a page: a round is one call); answers up to
        `reembed` passages of the first passage's server still waiting for vectors."""
        pending: list[Passage] = []
        for start in range(0, len(passages), WRITE_PAGE):
            page = passages[start : start + WRITE_PAGE]
            rows = [row for row in map(self._row, page) if row is not None]
            if not rows:
                continue
            server = str(rows[0]["server"])
            statement = sql.upsert(
                json.dumps(rows, ensure_ascii=False),
                self._clock.now_ms(),
                server if start == 0 and reembed > 0 else None,
                reembed,
            )
            for what, value in self._run(statement):
                if what == "pending" and isinstance(value, str):
                    pending.append(Passage.model_validate_json(value))
                elif what == "expired":
                    self.expired += int(value or 0)
                elif what == "schema" and int(value or 0) < sql.SCHEMA_VERSION:
                    # Tables as before, something else new (a setting): migrate once now.
                    log.info("keyword index schema older than the code: migrating")
                    self.migrate()
                elif what == "skipped" and int(value or 0):
                    self.purged_skips += int(value or 0)
                    log.warning(
                        "keyword index: passages of a purged server not written",
                        extra={"skipped": int(value or 0)},
                    )
        return pending

    def add(self, passages: Sequence[Passage]) -> int:
        self.write(passages)
        return len(passages)

    def mark_vectors_pending(self, passages: Sequence[Passage], pending: bool) -> None:
        ids = [_clean(p.id) for p in passages]
        for start in range(0, len(ids), REMOVE_PAGE):
            page = json.dumps(ids[start : start + REMOVE_PAGE], ensure_ascii=False)
            self._run(sql.mark_vectors_pending(page, pending))

    # -- deleting --------------------------------------------------------------------------------

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        """Delete by id (every server's: ids are unique); `scope` changes nothing."""
        distinct = list(dict.fromkeys(_clean(i) for i in ids))
        for start in range(0, len(distinct), REMOVE_PAGE):
            page = json.dumps(distinct[start : start + REMOVE_PAGE], ensure_ascii=False)
            self._run(sql.remove(page))
        return len(distinct)

    def shorten_expiry(self, ids: Iterable[str], expires_at: int) -> int:
        """Rows of these passages expire by `expires_at` where they would outlive it (the
        table's items expire sooner: botmemory.search.index_sync); returns how many ids."""
        distinct = list(dict.fromkeys(_clean(i) for i in ids))
        for start in range(0, len(distinct), REMOVE_PAGE):
            page = json.dumps(distinct[start : start + REMOVE_PAGE], ensure_ascii=False)
            self._run(sql.shorten_expiry(page, expires_at))
        return len(distinct)

    def expire(self, now_s: int, max_statements: int = 50) -> int:
        """Delete what has expired by each row's own expiry, a bounded page a statement, at
        most `max_statements` of them (the sweep's run); returns how many rows went."""
        gone = 0
        for _ in range(max_statements):
            rows = self._run(sql.expire(now_s))
            deleted = int(rows[0][0] or 0) if rows else 0
            gone += deleted
            if deleted < sql.DELETE_PAGE:
                break
        return gone

    def drop_scope(self, scope: str) -> int:
        """A server's purge: its marker first (a racing round's write is skipped), then its
        rows a page at a time, then its counts; returns how many rows went."""
        server = _clean(server_scope_of(scope))
        now = self._clock.now_ms()
        self._run(sql.mark_purged(server, now + PURGE_SETTLE_MS))
        gone = 0
        while True:
            rows = self._run(sql.purge_server(server))
            deleted = int(rows[0][0] or 0) if rows else 0
            gone += deleted
            if deleted == 0:
                break
        self._run(sql.forget_counts(server))
        return gone

    # -- reading ---------------------------------------------------------------------------------

    def search(self, query: SearchQuery) -> list[SearchHit]:
        """Every keyword pass in one statement, fused by reciprocal rank as the embedded
        index fuses them (sqlite_index._keyword_leg)."""
        if query.channel_ids == [] or query.kinds == [] or "\x00" in query.scope:
            return []
        text, _ = clip_query(query.text)
        terms = query_terms(text) if text is not None else []
        if not terms:
            return []
        if query.channel_ids is not None:
            channels = [c for c in query.channel_ids if "\x00" not in c]
            if not channels:
                return []
            query = query.model_copy(update={"channel_ids": channels})
        depth = CANDIDATE_FACTOR * query.limit
        spec = sql.SearchSpec(
            server=server_scope_of(query.scope),
            terms_json=json.dumps(terms, ensure_ascii=False),
            depth=depth,
            # The rule is read here, as keywords.feedback_terms reads it for the other indexes.
            feedback_terms=FEEDBACK_TERMS if rules.current().feedback_pass else 0,
            feedback_passages=FEEDBACK_PASSAGES,
            feedback_min_chars=MIN_FEEDBACK_CHARS,
        )
        bodies, rankings = _passes(self._run(sql.search(query, spec)), query, depth)
        if len(rankings) == 1:
            ranked = rankings[0]
        else:
            fused = reciprocal_rank_fusion(rankings, k=rules.current().legs_k)
            ranked = [pid for pid, _ in fused]
        found = [p for p in (self._passage(bodies.get(pid)) for pid in ranked[:depth]) if p]
        return [
            SearchHit(passage=passage, score=1.0 / rank, keyword_rank=rank)
            # Defence in depth: a passage never leaves its scope, whatever a row holds.
            for rank, passage in enumerate((p for p in found if p.scope == query.scope), start=1)
        ]

    def _passage(self, body: str | None) -> Passage | None:
        """A stored passage, or None (logged, counted) for a row that is not one."""
        try:
            return Passage.model_validate_json(body or "")
        except ValueError as error:
            self.bad_rows += 1
            log.warning("unreadable keyword row skipped", extra={"error": repr(error)[:200]})
            return None

    def passages(self) -> Iterator[Passage]:
        """Every stored passage, expired or not, a page at a time."""
        after = ""
        while True:
            rows = self._run(sql.page_of_passages(after, _PASSAGES_PAGE))
            if not rows:
                return
            for _, body in rows:
                yield Passage.model_validate_json(str(body))
            after = str(rows[-1][0])
