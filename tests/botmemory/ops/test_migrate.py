"""Legacy memory migration: every source format, validation before any write, idempotent
re-runs, replaced texts, and recall of the result with memory off and on."""

from __future__ import annotations

import json
import pickle
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from botmemory.clock import ManualClock
from botmemory.ops import migrate as migrate_module
from botmemory.ops.migrate import legacy_episode_id, load_source, main, migrate
from botmemory.recall.contract import RecallRequest
from botmemory.records import Episode
from botmemory.runtime import build_services
from botmemory.settings.config import Settings, get_settings
from botmemory.storage.items import from_item
from botmemory.storage.keys import episode_sk
from localrun.storage import put_episode
from tests.conftest import START_MS, TABLE, scan_all

GUILD = "100000000000000001"
CH_A = "200000000000000001"
CH_B = "200000000000000002"
CH_EMPTY = "200000000000000003"
USER = "300000000000000001"

LEGACY = {
    CH_A: "The team ships on Fridays.\nAlice owns the deploy scripts.",
    CH_B: "Bob prefers short answers.\u202e",
    CH_EMPTY: "  \n ",
}


@pytest.fixture(autouse=True)
def table_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI reads TABLE_NAME through the cached settings: start each test fresh."""
    monkeypatch.setenv("TABLE_NAME", TABLE)
    monkeypatch.delenv("MEMORY_MODEL", raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], clock: ManualClock) -> Run:
    """Run the CLI in-process; returns exit code, stdout and stderr."""

    def _run(*argv: str | Path) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([str(a) for a in argv], clock=clock)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return _run


def write_json(tmp_path: Path, data: Any, name: str = "memory.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def write_sqlite(tmp_path: Path, tables: dict[str, tuple[str, list[tuple[Any, Any]]]]) -> Path:
    """tables: name -> (column definitions, rows of the first two columns)."""
    path = tmp_path / "bot.db"
    with sqlite3.connect(path) as connection:
        for name, (columns, rows) in tables.items():
            connection.execute(f"CREATE TABLE {name} ({columns})")
            first_two = [c.split()[0] for c in columns.split(",")][:2]
            connection.executemany(
                f"INSERT INTO {name} ({', '.join(first_two)}) VALUES (?, ?)", rows
            )
    connection.close()
    return path


def state(dynamodb: Any, channel_id: str) -> dict[str, Any]:
    item = dynamodb.get_item(
        TableName=TABLE, Key={"pk": {"S": f"CH#{channel_id}"}, "sk": {"S": "STATE"}}
    ).get("Item", {})
    return from_item(item)


def episode_items(dynamodb: Any, channel_id: str) -> list[dict[str, Any]]:
    return [
        from_item(i)
        for i in scan_all(dynamodb)
        if i["pk"]["S"] == f"CH#{channel_id}" and i["sk"]["S"].startswith("EP#")
    ]


def snapshot(dynamodb: Any) -> list[dict[str, Any]]:
    return sorted(scan_all(dynamodb), key=lambda i: (i["pk"]["S"], i["sk"]["S"]))


def assert_migrated(
    dynamodb: Any, channel_id: str, text: str, *, created_ms: int = START_MS
) -> None:
    assert state(dynamodb, channel_id)["legacy_memory"] == text
    (episode,) = episode_items(dynamodb, channel_id)
    episode_id = legacy_episode_id(channel_id, text)
    assert episode["episode_id"] == episode_id
    assert episode["sk"] == episode_sk(created_ms, episode_id)
    assert episode["legacy"] is True
    assert episode["summary"] == text
    assert episode["start_ms"] == episode["end_ms"] == episode["created_ms"] == created_ms
    # A migrated legacy episode never expires and names nobody.
    for absent in ("expires_at", "participant_ids", "participant_names"):
        assert absent not in episode


# Sources -------------------------------------------------------------------------------


def test_json_source_sets_legacy_memory_and_one_episode_per_channel(
    dynamodb: Any, run: Run, tmp_path: Path
) -> None:
    # A channel mid-consolidation: its lock and cursor must survive the migration.
    dynamodb.put_item(
        TableName=TABLE,
        Item={
            "pk": {"S": f"CH#{CH_A}"},
            "sk": {"S": "STATE"},
            "lock_owner": {"S": "run-1"},
            "lease_until": {"N": str(START_MS + 60_000)},
            "fence": {"N": "7"},
        },
    )

    code, out, _ = run(write_json(tmp_path, LEGACY))

    assert code == 0
    assert_migrated(dynamodb, CH_A, LEGACY[CH_A])
    assert_migrated(dynamodb, CH_B, "Bob prefers short answers.")  # scrubbed
    lock = state(dynamodb, CH_A)
    assert (lock["lock_owner"], lock["lease_until"], lock["fence"]) == (
        "run-1",
        START_MS + 60_000,
        7,
    )
    assert state(dynamodb, CH_EMPTY) == {} and episode_items(dynamodb, CH_EMPTY) == []
    for line in (
        "channels read: 3",
        "legacy strings set: 2",
        "episodes written: 2",
        "episodes replaced: 0",
        "unchanged: 0",
        "empty skipped: 1",
        f"{CH_EMPTY}: empty, skipped",
    ):
        assert line in out


def test_sqlite_table_is_found_and_named(dynamodb: Any, run: Run, tmp_path: Path) -> None:
    db = write_sqlite(
        tmp_path,
        {
            "settings": ("key TEXT, value TEXT", [("prefix", "!")]),
            "channel_memory": (
                "Channel_ID INTEGER, Memory_Text TEXT, updated TEXT",
                [(int(CH_A), LEGACY[CH_A]), (int(CH_B), None)],  # NULL counts as empty
            ),
        },
    )

    code, out, err = run(db)

    assert code == 0, err
    assert "'channel_memory'" in err and "'Channel_ID'" in err and "'Memory_Text'" in err
    assert_migrated(dynamodb, CH_A, LEGACY[CH_A])
    assert "empty skipped: 1" in out


def test_sqlite_with_explicit_table_and_columns(dynamodb: Any, run: Run, tmp_path: Path) -> None:
    # Two tables fit the naming rule, and the real one uses other names: the operator says.
    db = write_sqlite(
        tmp_path,
        {
            "channel_memory_old": ("channel TEXT, memory TEXT", [(CH_A, "stale")]),
            "channel_memory_backup": ("channel TEXT, memory TEXT", [(CH_A, "stale")]),
            "notes": ("chan TEXT, body TEXT", [(CH_A, LEGACY[CH_A])]),
        },
    )

    code, _, err = run(db)
    assert code == 2 and "several tables" in err and "--table" in err
    assert scan_all(dynamodb) == []

    code, _, err = run(
        db, "--table", "notes", "--channel-column", "chan", "--memory-column", "body"
    )
    assert code == 0, err
    assert_migrated(dynamodb, CH_A, LEGACY[CH_A])


def test_a_named_pickle_is_migrated_after_a_warning(
    dynamodb: Any, run: Run, tmp_path: Path
) -> None:
    path = tmp_path / "memory.pkl"
    path.write_bytes(pickle.dumps({int(CH_A): LEGACY[CH_A], CH_B: LEGACY[CH_B]}))

    code, out, err = run(path, "--format", "pickle")

    assert code == 0, err
    assert "unpickling executes code" in err and str(path) in err
    assert_migrated(dynamodb, CH_A, LEGACY[CH_A])
    assert "episodes written: 2" in out


def test_the_pickle_warning_comes_before_any_unpickling(
    dynamodb: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    path = tmp_path / "memory.pkl"
    path.write_bytes(pickle.dumps({CH_A: "x"}))
    seen_before_load: list[str] = []

    def watching_load(handle: Any) -> Any:
        seen_before_load.append(capsys.readouterr().err)
        return {CH_A: "x"}

    monkeypatch.setattr(migrate_module.pickle, "load", watching_load)

    assert load_source(path, "pickle") == {CH_A: "x"}
    assert "unpickling executes code" in seen_before_load[0]


def test_a_pickle_is_never_auto_detected(
    dynamodb: Any, run: Run, tmp_path: Path, monkeypatch: Any
) -> None:
    path = tmp_path / "memory.pkl"
    path.write_bytes(pickle.dumps({CH_A: LEGACY[CH_A]}))

    def refuse(*_: Any) -> Any:
        raise AssertionError("unpickled without --format pickle")

    monkeypatch.setattr(migrate_module.pickle, "load", refuse)

    code, _, err = run(path)

    assert code == 2
    assert "--format pickle" in err and "unpickling executes code" not in err
    assert scan_all(dynamodb) == []


# Dry run and re-runs -------------------------------------------------------------------


def test_dry_run_writes_nothing_and_says_what_would_change(
    dynamodb: Any, run: Run, tmp_path: Path
) -> None:
    code, out, _ = run(write_json(tmp_path, LEGACY), "--dry-run")

    assert code == 0
    assert scan_all(dynamodb) == []
    episode_id = legacy_episode_id(CH_A, LEGACY[CH_A])
    assert f"{CH_A}: would set legacy memory, would write episode {episode_id}" in out
    assert "dry run: nothing was written" in out
    assert "legacy strings set: 2" in out and "episodes written: 2" in out


def test_dry_run_after_a_change_reports_the_replacement(
    dynamodb: Any, run: Run, tmp_path: Path, clock: ManualClock
) -> None:
    assert run(write_json(tmp_path, {CH_A: "old text"}))[0] == 0
    before = snapshot(dynamodb)

    code, out, _ = run(write_json(tmp_path, {CH_A: "new text"}), "--dry-run")

    assert code == 0 and snapshot(dynamodb) == before
    assert "would replace 1 old legacy episode(s)" in out and "episodes replaced: 1" in out


def test_second_run_changes_nothing(
    dynamodb: Any, run: Run, tmp_path: Path, clock: ManualClock
) -> None:
    source = write_json(tmp_path, LEGACY)
    assert run(source)[0] == 0
    before = snapshot(dynamodb)
    clock.advance(days=3)  # a later run at another time must still find its episodes

    code, out, _ = run(source)

    assert code == 0
    assert snapshot(dynamodb) == before
    assert f"{CH_A}: unchanged" in out and f"{CH_B}: unchanged" in out
    for line in ("legacy strings set: 0", "episodes written: 0", "episodes replaced: 0"):
        assert line in out
    assert "unchanged: 2" in out and "empty skipped: 1" in out


def test_changed_text_replaces_the_old_legacy_episode(
    dynamodb: Any, run: Run, tmp_path: Path, clock: ManualClock, settings: Settings
) -> None:
    services = build_services(settings, dynamodb=dynamodb, clock=clock)
    ordinary = Episode(
        channel_id=CH_A,
        episode_id="ordinary",
        sk=episode_sk(START_MS - 1000, "ordinary"),
        summary="A consolidated episode, not legacy.",
        participant_ids=[USER],
        participant_names=["alice"],
        start_ms=START_MS - 2000,
        end_ms=START_MS - 1000,
        created_ms=START_MS - 1000,
        expires_at=(START_MS // 1000) + 86_400,
    )
    put_episode(services.repository, ordinary, GUILD)
    assert run(write_json(tmp_path, {CH_A: "Version one."}))[0] == 0
    clock.advance(seconds=60)

    code, out, _ = run(write_json(tmp_path, {CH_A: "Version two."}))

    assert code == 0
    assert "legacy strings set: 1" in out and "episodes replaced: 1" in out
    assert state(dynamodb, CH_A)["legacy_memory"] == "Version two."
    by_id = {e["episode_id"]: e for e in episode_items(dynamodb, CH_A)}
    assert set(by_id) == {"ordinary", legacy_episode_id(CH_A, "Version two.")}
    assert by_id[legacy_episode_id(CH_A, "Version two.")]["created_ms"] == START_MS + 60_000


def test_scope_is_recorded_on_the_legacy_episode(dynamodb: Any, run: Run, tmp_path: Path) -> None:
    assert run(write_json(tmp_path, {CH_A: "x"}), "--scope", GUILD)[0] == 0
    assert episode_items(dynamodb, CH_A)[0]["scope"] == GUILD

    code, _, err = run(write_json(tmp_path, {CH_B: "x"}), "--scope", "not-a-guild")
    assert code == 2 and "--scope" in err


# Bad sources ---------------------------------------------------------------------------


def _no_table_db(tmp_path: Path) -> Path:
    return write_sqlite(tmp_path, {"settings": ("key TEXT, value TEXT", [("a", "b")])})


def _json_text(text: str) -> Callable[[Path], Path]:
    def write(tmp_path: Path) -> Path:
        path = tmp_path / "memory.json"
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_json_text('{"1": "ok",'), "not valid JSON"),
        (_json_text(json.dumps([[CH_A, "x"]])), "expected a JSON object"),
        (
            _json_text(json.dumps({CH_A: "fine", "abc": "x"})),
            "entry 'abc': channel id is not a Discord snowflake",
        ),
        (_json_text(json.dumps({CH_A: "fine", "-5": "x"})), "entry '-5': channel id"),
        (
            _json_text(json.dumps({CH_A: "fine", CH_B: 42})),
            f"entry '{CH_B}': memory is not a string (got int)",
        ),
        (
            _json_text(json.dumps({CH_A: "fine", CH_B: {"nested": "x"}})),
            f"entry '{CH_B}': memory is not a string (got an object)",
        ),
        (
            _json_text(f'{{"{CH_A}": "one", "{CH_A}": "two"}}'),
            "appears more than once",
        ),
        (
            _json_text(json.dumps({CH_A: "x" * 300_001})),
            f"entry '{CH_A}': memory is 300001 bytes",
        ),
        (_no_table_db, "found no channel id and memory columns"),
        (lambda p: p / "missing.json", "cannot read"),
    ],
    ids=[
        "invalid-json",
        "json-list",
        "not-snowflake",
        "negative-id",
        "memory-int",
        "memory-object",
        "duplicate-channel",
        "too-large",
        "sqlite-no-table",
        "missing-file",
    ],
)
def test_a_bad_source_exits_2_names_the_problem_and_writes_nothing(
    dynamodb: Any, run: Run, tmp_path: Path, make: Callable[[Path], Path], expected: str
) -> None:
    code, out, err = run(make(tmp_path))

    assert code == 2
    assert expected in err, err
    assert out == ""
    assert scan_all(dynamodb) == []


def test_sqlite_options_are_refused_for_json(dynamodb: Any, run: Run, tmp_path: Path) -> None:
    code, _, err = run(write_json(tmp_path, {CH_A: "x"}), "--table", "memories")
    assert code == 2 and "SQLite only" in err
    assert scan_all(dynamodb) == []


def test_an_aws_error_exits_1_with_its_message(
    dynamodb: Any, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TABLE_NAME", "NoSuchTable")
    get_settings.cache_clear()

    code, _, err = run(write_json(tmp_path, {CH_A: "x"}))

    assert code == 1
    assert "AWS request failed" in err and "ResourceNotFoundException" in err


# Recall of migrated memory -------------------------------------------------------------


def test_memory_off_recall_returns_the_legacy_string(
    dynamodb: Any, clock: ManualClock, tmp_path: Path
) -> None:
    services = build_services(Settings(table_name=TABLE), dynamodb=dynamodb, clock=clock)
    report = migrate(
        load_source(write_json(tmp_path, LEGACY)), services.repository, clock, dry_run=False
    )
    assert report.episodes_written == 2

    result = services.recaller.recall(RecallRequest(guild_id=GUILD, channel_id=CH_A, user_id=USER))

    assert result.enabled is False
    # One quoted note per line of the legacy string.
    assert all(f'- "{line}"' in result.memory for line in LEGACY[CH_A].splitlines())
    assert result.episodes == []


def test_memory_on_recall_shows_the_legacy_episode(
    dynamodb: Any, clock: ManualClock, settings: Settings
) -> None:
    services = build_services(settings, dynamodb=dynamodb, clock=clock)
    long_text = "Deploys happen on Fridays. " * 100  # longer than any episode may be
    entries = {CH_A: LEGACY[CH_A], CH_B: long_text}

    report = migrate(entries, services.repository, clock, dry_run=False)

    assert report.clipped == 1 and any("clipped" in line for line in report.lines())
    for channel_id, text in entries.items():
        result = services.recaller.recall(
            RecallRequest(guild_id=GUILD, channel_id=channel_id, user_id=USER)
        )
        assert result.enabled is True
        (episode,) = result.episodes
        assert episode.id == legacy_episode_id(channel_id, text.strip())
        assert episode.summary in result.memory
        assert len(episode.summary) <= settings.episode_chars
    assert state(dynamodb, CH_B)["legacy_memory"] == long_text.strip()  # kept whole
