"""Migrate the earlier bot's legacy memory: one free-text memory string per channel.

    python -m botmemory.ops.migrate SOURCE [--dry-run] [--format json|sqlite|pickle] ...

Each channel's text (scrubbed of control and invisible characters) becomes:

- the STATE item's `legacy_memory` attribute, which recall returns while memory is
  off (only that attribute is set: the lock and the sweep marker stay as they are);
- one episode marked `legacy: true`, which recall shows among the channel's episodes
  while memory is on. Its id is derived from the channel and the text, so a re-run
  finds it whatever time it was written at; a changed text replaces it. It carries no
  `expires_at`: a migrated legacy episode does not expire (consolidation may still drop
  it once the channel holds more than MEMORY_EPISODES_PER_CHANNEL newer episodes; a
  re-run then writes it again). Its summary is clipped to MEMORY_EPISODE_CHARS, the cap
  of every episode, so it fits recall's episode budget; `legacy_memory` keeps the full text.

The whole source is validated before anything is written. Running it twice changes
nothing the second time. Exit codes: 0 done, 2 bad source or arguments, 1 AWS or
configuration error.
"""

from __future__ import annotations

import argparse
import json
import pickle  # nosec B403 # the operator's own earlier bot's file, read only when asked (see _read_pickle)
import re
import sqlite3
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from botmemory.clock import Clock, SystemClock
from botmemory.records import Episode
from botmemory.settings.config import ConfigError, Settings, get_settings
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository, open_repository
from botmemory.text import clip, content_hash, scrub, short_id

FORMATS = ("json", "sqlite", "pickle")
SQLITE_HEADER = b"SQLite format 3\x00"
_SNOWFLAKE = re.compile(r"[0-9]{1,20}")
# The full text is stored on the STATE item; DynamoDB items hold at most 400 KB.
MAX_LEGACY_BYTES = 300_000
_DEFAULT_EPISODE_CHARS: int = Settings.model_fields["episode_chars"].default

PICKLE_WARNING = (
    "warning: unpickling executes code from {path}: load pickles only from a source you trust."
)


class SourceError(ValueError):
    """The source cannot be migrated: unreadable, the wrong format, or an invalid entry."""


# Reading the source ------------------------------------------------------------------


class _JsonObject(list[tuple[str, Any]]):
    """A JSON object kept as its pairs, so a repeated channel id is seen, not silently dropped."""


def load_source(
    path: str | Path,
    fmt: str | None = None,
    table: str | None = None,
    channel_column: str | None = None,
    memory_column: str | None = None,
) -> dict[str, str]:
    """Read and validate a legacy memory source: channel id -> scrubbed memory ('' when empty).

    `fmt` None detects JSON and SQLite; a pickle is read only when asked for by name,
    after a warning on stderr, because unpickling runs code from the file.
    """
    path = Path(path)
    sqlite_options = table or channel_column or memory_column
    detected = fmt is None
    try:
        if fmt is None:
            with path.open("rb") as handle:
                fmt = "sqlite" if handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER else "json"
        if fmt not in FORMATS:
            raise SourceError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
        if sqlite_options and fmt != "sqlite":
            raise SourceError(
                f"--table, --channel-column and --memory-column apply to SQLite only, "
                f"and {path} is read as {fmt}"
            )
        if fmt == "sqlite":
            pairs = _read_sqlite(path, table, channel_column, memory_column)
        elif fmt == "pickle":
            pairs = _read_pickle(path)
        else:
            pairs = _read_json(path, detected=detected)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    return validate_entries(pairs)


def _read_json(path: Path, *, detected: bool) -> list[tuple[Any, Any]]:
    data = path.read_bytes()
    try:
        document = json.loads(data.decode("utf-8-sig"), object_pairs_hook=_JsonObject)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        if detected and data[:1] == b"\x80":
            raise SourceError(
                f"{path} looks like a pickle; pickles are never auto-detected because "
                "unpickling runs code from the file: pass --format pickle if you trust it"
            ) from None
        also = " and not a SQLite database" if detected else ""
        raise SourceError(f"{path} is not valid JSON ({exc}){also}") from None
    if not isinstance(document, _JsonObject):
        raise SourceError(
            f"{path}: expected a JSON object mapping channel ids to memory strings, "
            f"got {_type_name(document)}"
        )
    return list(document)


def _read_pickle(path: Path) -> list[tuple[Any, Any]]:
    print(PICKLE_WARNING.format(path=path), file=sys.stderr)
    with path.open("rb") as handle:
        try:
            document = pickle.load(handle)  # nosec B301 # the operator's own file, named on the command line, with PICKLE_WARNING printed first
        except Exception as exc:  # a pickle can fail in any way its contents choose
            raise SourceError(f"{path}: cannot unpickle: {exc}") from None
    if not isinstance(document, dict):
        raise SourceError(
            f"{path}: expected a pickled dict of channel ids to memory strings, "
            f"got {_type_name(document)}"
        )
    return list(document.items())


def _read_sqlite(
    path: Path, table: str | None, channel_column: str | None, memory_column: str | None
) -> list[tuple[Any, Any]]:
    if not path.is_file():
        raise SourceError(f"cannot read {path}: no such file")
    # Read-only: the earlier bot's database is evidence, never something to change.
    uri = path.resolve().as_uri() + "?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True)
        try:
            table, channel_column, memory_column = _pick_table(
                connection, table, channel_column, memory_column
            )
            rows = connection.execute(
                f"SELECT {_quote(channel_column)}, {_quote(memory_column)} FROM {_quote(table)}"  # nosec B608 # identifiers only, each quoted by _quote, on a database opened read-only
            ).fetchall()
        finally:
            connection.close()
    except sqlite3.Error as exc:
        raise SourceError(f"{path}: cannot read the SQLite database: {exc}") from None
    return [(channel, memory) for channel, memory in rows]


def _pick_table(
    connection: sqlite3.Connection,
    table: str | None,
    channel_column: str | None,
    memory_column: str | None,
) -> tuple[str, str, str]:
    """The table and columns to read: as given, else the one table that fits, named on stderr."""
    tables = [
        name
        for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        )
    ]
    if table is not None and table not in tables:
        raise SourceError(f"no table {table!r} in the database (tables: {', '.join(tables)})")
    fits: list[tuple[str, str, str]] = []
    for name in [table] if table is not None else tables:
        columns = [row[1] for row in connection.execute(f"PRAGMA table_info({_quote(name)})")]
        channel = _column(columns, channel_column, "channel")
        memory = _column(columns, memory_column, "memory")
        if channel and memory:
            fits.append((name, channel, memory))
    hint = "pass --table, --channel-column and --memory-column"
    if not fits:
        wanted = table or "any table"
        raise SourceError(
            f"found no channel id and memory columns in {wanted} "
            f"(tables: {', '.join(tables) or 'none'}): {hint}"
        )
    if len(fits) > 1:
        names = ", ".join(f"{t}({c}, {m})" for t, c, m in fits)
        raise SourceError(f"several tables could hold the legacy memory: {names}: {hint}")
    chosen = fits[0]
    if not (table and channel_column and memory_column):
        print(
            f"reading table {chosen[0]!r}: channel column {chosen[1]!r}, "
            f"memory column {chosen[2]!r}",
            file=sys.stderr,
        )
    return chosen


def _column(columns: list[str], given: str | None, word: str) -> str | None:
    """The named column if present; else the only one whose name contains `word`."""
    if given is not None:
        return given if given in columns else None
    matches = [c for c in columns if word in c.casefold()]
    return matches[0] if len(matches) == 1 else None


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _type_name(value: Any) -> str:
    if isinstance(value, _JsonObject | dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return type(value).__name__


# Validation --------------------------------------------------------------------------


def validate_entries(pairs: Iterable[tuple[Any, Any]]) -> dict[str, str]:
    """Check every entry before anything is written; return channel id -> scrubbed text.

    Channel ids are Discord snowflakes (integers are accepted). A memory is a string;
    null or whitespace-only counts as empty ('') and is skipped by the migration.
    """
    entries: dict[str, str] = {}
    for key, memory in pairs:
        label = f"entry {clip(str(key), 40)!r}"
        if isinstance(key, int) and not isinstance(key, bool):
            key = str(key)
        if not isinstance(key, str) or not _SNOWFLAKE.fullmatch(key):
            raise SourceError(f"{label}: channel id is not a Discord snowflake")
        if memory is None:
            memory = ""
        if not isinstance(memory, str):
            raise SourceError(f"{label}: memory is not a string (got {_type_name(memory)})")
        text = scrub(memory, keep_newlines=True)
        size = len(text.encode("utf-8"))
        if size > MAX_LEGACY_BYTES:
            raise SourceError(
                f"{label}: memory is {size} bytes, more than the {MAX_LEGACY_BYTES} "
                "a table item can safely hold"
            )
        if key in entries and entries[key] != text:
            raise SourceError(f"{label}: channel appears more than once with different memories")
        entries[key] = text
    return entries


# Migration ---------------------------------------------------------------------------


@dataclass
class ChannelOutcome:
    channel_id: str
    actions: list[str]  # empty when the channel is already migrated


@dataclass
class MigrationReport:
    dry_run: bool
    episode_chars: int
    channels_read: int = 0
    legacy_set: int = 0
    episodes_written: int = 0
    episodes_replaced: int = 0
    unchanged: int = 0
    empty: int = 0
    clipped: int = 0  # texts longer than the episode cap: their episode holds the start
    channels: list[ChannelOutcome] = field(default_factory=list)

    def lines(self) -> list[str]:
        """Per channel what changed (or would), then the counts."""
        out = []
        for outcome in self.channels:
            out.append(f"{outcome.channel_id}: {', '.join(outcome.actions) or 'unchanged'}")
        if self.dry_run:
            out.append("dry run: nothing was written; the counts say what a run would do")
        out += [
            f"channels read: {self.channels_read}",
            f"legacy strings set: {self.legacy_set}",
            f"episodes written: {self.episodes_written}",
            f"episodes replaced: {self.episodes_replaced}",
            f"unchanged: {self.unchanged}",
            f"empty skipped: {self.empty}",
        ]
        if self.clipped:
            out.append(
                f"episodes clipped to {self.episode_chars} characters: {self.clipped} "
                "(the legacy memory string keeps the full text)"
            )
        return out


def legacy_episode_id(channel_id: str, text: str) -> str:
    """Deterministic, so a re-run recognises the episode whenever it was written."""
    return short_id(content_hash("legacy", channel_id, text))


def migrate(
    entries: dict[str, str],
    repository: MemoryRepository,
    clock: Clock,
    *,
    dry_run: bool,
    scope: str | None = None,
    episode_chars: int = _DEFAULT_EPISODE_CHARS,
) -> MigrationReport:
    """Bring each channel's legacy memory string and legacy episode in line with `entries`.

    Reads the current state first and writes only what differs, one transaction per
    channel. Raises SourceError, before any write, when an entry is invalid.
    """
    entries = validate_entries(entries.items())
    report = MigrationReport(dry_run=dry_run, episode_chars=episode_chars)
    would = "would " if dry_run else ""
    for channel_id, text in entries.items():
        report.channels_read += 1
        if not text:
            report.empty += 1
            report.channels.append(ChannelOutcome(channel_id, ["empty, skipped"]))
            continue
        summary = clip(text, episode_chars)
        if summary != text:
            report.clipped += 1
        episode_id = legacy_episode_id(channel_id, text)
        legacy = repository.legacy_episodes(channel_id)
        kept = next((e for e in legacy if e.episode_id == episode_id), None)
        # Any other legacy episode holds an earlier text (or duplicates this one): it goes.
        stale = [e for e in legacy if e is not kept]
        set_text = repository.legacy_memory(channel_id) != text
        episode = None
        if kept is None:
            now = clock.now_ms()
            episode = Episode(
                channel_id=channel_id,
                episode_id=episode_id,
                sk=keys.episode_sk(now, episode_id),
                summary=summary,
                start_ms=now,
                end_ms=now,
                created_ms=now,
                expires_at=None,
            )
        actions = []
        if set_text:
            actions.append(f"{would}set legacy memory")
        if episode is not None:
            clipped = f" (clipped to {episode_chars} characters)" if summary != text else ""
            actions.append(f"{would}write episode {episode_id}{clipped}")
        if stale:
            actions.append(f"{would}replace {len(stale)} old legacy episode(s)")
        report.channels.append(ChannelOutcome(channel_id, actions))
        if not actions:
            report.unchanged += 1
            continue
        report.legacy_set += int(set_text)
        report.episodes_written += int(episode is not None)
        report.episodes_replaced += len(stale)
        if not dry_run:
            repository.save_legacy_memory(
                channel_id,
                text=text if set_text else None,
                episode=episode,
                replaced=stale,
                scope=scope,
            )
    return report


# Command line ------------------------------------------------------------------------


def _scope(value: str) -> str:
    if value != "dm" and not _SNOWFLAKE.fullmatch(value):
        raise argparse.ArgumentTypeError("must be a guild id (a Discord snowflake) or 'dm'")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m botmemory.ops.migrate",
        description=(
            "Copy the earlier bot's per-channel memory strings into the memory table: each "
            "channel's STATE item gets legacy_memory (recall with memory off) and one legacy "
            "episode (recall with memory on). The table is TABLE_NAME from the environment; "
            "AWS credentials and region come from the environment as usual. Safe to re-run."
        ),
        epilog="exit codes: 0 done, 2 bad source or arguments, 1 AWS or configuration error",
    )
    parser.add_argument(
        "source", metavar="SOURCE", help="JSON object file, SQLite database, or pickle"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would change and write nothing"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="source format; JSON and SQLite are detected, a pickle must be named "
        "(unpickling runs code from the file)",
    )
    parser.add_argument(
        "--table",
        help="SQLite table to read (default: the one table with a channel and a memory column)",
    )
    parser.add_argument("--channel-column", help="SQLite column holding the channel id")
    parser.add_argument("--memory-column", help="SQLite column holding the memory text")
    parser.add_argument(
        "--scope",
        type=_scope,
        metavar="GUILD_ID",
        help="guild id (or 'dm') recorded on the legacy episodes",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, clock: Clock | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help or a usage error: argparse has printed why
        return exc.code if isinstance(exc.code, int) else 2
    try:
        entries = load_source(
            args.source, args.format, args.table, args.channel_column, args.memory_column
        )
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        settings = get_settings()
        repository = open_repository(settings.table_name)
        report = migrate(
            entries,
            repository,
            clock or SystemClock(),
            dry_run=args.dry_run,
            scope=args.scope,
            episode_chars=settings.episode_chars,
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError) as exc:
        print(f"error: AWS request failed: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
