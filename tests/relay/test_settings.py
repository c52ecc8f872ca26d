"""Settings from the environment, and the bot token from the environment or Secrets Manager."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from relay.app import build_forwarder, lock_state_dir
from relay.config import ConfigError, RelayConfig, Shard
from relay.credentials import bot_token
from relay.sinks import HttpSink

SINK = {"INGEST_FUNCTION_NAME": "IngestFunction"}


def test_defaults_stay_well_under_lambdas_async_payload_limit() -> None:
    config = RelayConfig.from_env(SINK)
    assert config.batch_max_bytes <= 256_000  # under even the old 256 KB limit
    assert config.identify_max_per_day <= 100


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "exactly one of INGEST_FUNCTION_NAME or INGEST_URL"),
        ({**SINK, "INGEST_URL": "http://127.0.0.1:8787/ingest"}, "exactly one"),
        ({"INGEST_URL": "127.0.0.1:8787/ingest"}, "http:// or https://"),
        ({**SINK, "RELAY_BATCH_MAX_BYTES": "1000001"}, "RELAY_BATCH_MAX_BYTES must be between"),
        ({**SINK, "RELAY_IDENTIFY_MAX_PER_DAY": "1000"}, "between 1 and 900"),
        ({**SINK, "RELAY_BATCH_MAX_SECONDS": "soon"}, "must be a number"),
        ({**SINK, "RELAY_LOG_LEVEL": "chatty"}, "RELAY_LOG_LEVEL"),
    ],
)
def test_bad_settings_are_refused_by_name(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RelayConfig.from_env(env)


def test_settings_are_read_and_blank_counts_as_unset(tmp_path: Path) -> None:
    config = RelayConfig.from_env(
        {
            "INGEST_URL": "http://127.0.0.1:8787/ingest",
            "INGEST_FUNCTION_NAME": "  ",
            "RELAY_BATCH_MAX_EVENTS": "50",
            "RELAY_BATCH_MAX_SECONDS": "0.5",
            "RELAY_SPOOL_DIR": str(tmp_path),
            "RELAY_LOG_LEVEL": "debug",
        }
    )
    assert (config.batch_max_events, config.batch_max_seconds) == (50, 0.5)
    assert config.log_level == "DEBUG"
    forwarder = build_forwarder(config)
    assert isinstance(forwarder._sink, HttpSink)
    assert (tmp_path / "batches").is_dir()


class FakeSecrets:
    def __init__(self, value: str) -> None:
        self.value = value
        self.asked: list[str] = []

    def get_secret_value(self, SecretId: str) -> dict[str, Any]:
        self.asked.append(SecretId)
        return {"SecretString": self.value}


def test_the_token_comes_from_the_environment() -> None:
    assert bot_token({"DISCORD_BOT_TOKEN": " abc.def \n"}) == "abc.def"


def test_the_token_comes_from_secrets_manager_plain_or_json() -> None:
    plain = FakeSecrets("abc.def\n")
    assert bot_token({"DISCORD_BOT_TOKEN_SECRET": "discord-memory/bot-token"}, plain) == "abc.def"
    assert plain.asked == ["discord-memory/bot-token"]
    wrapped = FakeSecrets('{"token": "xyz"}')
    assert bot_token({"DISCORD_BOT_TOKEN_SECRET": "s"}, wrapped) == "xyz"


@pytest.mark.parametrize(
    ("env", "secret", "message"),
    [
        ({}, None, "set DISCORD_BOT_TOKEN"),
        ({"DISCORD_BOT_TOKEN": "a", "DISCORD_BOT_TOKEN_SECRET": "s"}, None, "not both"),
        ({"DISCORD_BOT_TOKEN_SECRET": "s"}, FakeSecrets("  "), "empty"),
        ({"DISCORD_BOT_TOKEN_SECRET": "s"}, FakeSecrets('{"key": "x"}'), "without a"),
    ],
)
def test_a_missing_token_is_a_clear_error(
    env: dict[str, str], secret: FakeSecrets | None, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        bot_token(env, secret)


def test_a_second_relay_on_the_same_spool_waits_for_the_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = lock_state_dir(tmp_path)
    second: list[Any] = []
    waiter = threading.Thread(target=lambda: second.append(lock_state_dir(tmp_path, 0.01)))
    with caplog.at_level(logging.WARNING):
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive() and second == []
        first.close()  # the first relay exits
        waiter.join(5)
    assert len(second) == 1
    assert "another relay is using" in caplog.text
    second[0].close()


# --- sharding ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        ({"SHARD_ID": "0"}, "set both SHARD_ID and SHARD_COUNT, or neither"),
        ({"SHARD_COUNT": "2"}, "set both SHARD_ID and SHARD_COUNT, or neither"),
        (
            {"SHARD_ID": "2", "SHARD_COUNT": "2"},
            r"SHARD_ID must be between 0 and 1 \(with SHARD_COUNT=2\)",
        ),
        ({"SHARD_ID": "-1", "SHARD_COUNT": "2"}, "SHARD_ID must be between 0 and 1"),
        ({"SHARD_ID": "0", "SHARD_COUNT": "0"}, "SHARD_COUNT must be between 1 and 900"),
        ({"SHARD_ID": "one", "SHARD_COUNT": "2"}, "SHARD_ID must be a whole number"),
        (
            {"SHARD_ID": "0", "SHARD_COUNT": "10", "RELAY_IDENTIFY_MAX_PER_DAY": "100"},
            r"between 1 and 90 \(with SHARD_COUNT=10: the shards share the token's daily",
        ),
    ],
)
def test_bad_shard_settings_are_refused_by_name(shard: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RelayConfig.from_env({**SINK, **shard})


def test_shard_settings_are_read_and_blank_counts_as_unset(tmp_path: Path) -> None:
    unsharded = RelayConfig.from_env({**SINK, "SHARD_ID": " ", "RELAY_SPOOL_DIR": str(tmp_path)})
    assert unsharded.shard is None
    assert unsharded.state_dir == tmp_path  # as before sharding existed
    last = RelayConfig.from_env(
        {**SINK, "SHARD_ID": "3", "SHARD_COUNT": "4", "RELAY_SPOOL_DIR": str(tmp_path)}
    )
    assert last.shard == Shard(3, 4)
    assert last.state_dir == tmp_path / "shard-3"


def test_the_shards_share_the_tokens_daily_identifies() -> None:
    def bound(count: int) -> int:
        env = {**SINK, "SHARD_ID": "0", "SHARD_COUNT": str(count)}
        return RelayConfig.from_env(env).identify_max_per_day

    assert bound(1) == bound(9) == 100  # the unsharded default, while it fits
    assert bound(10) == 90 and bound(900) == 1
    assert all(bound(n) * n <= 900 for n in (1, 2, 7, 10, 13, 100, 900))


def test_shards_on_one_host_keep_apart_spools_and_locks(tmp_path: Path) -> None:
    configs = [
        RelayConfig.from_env(
            {**SINK, "SHARD_ID": str(n), "SHARD_COUNT": "2", "RELAY_SPOOL_DIR": str(tmp_path)}
        )
        for n in (0, 1)
    ]
    held: list[Any] = []
    # Both lock at once: a shared directory would leave the second waiting forever.
    locker = threading.Thread(
        target=lambda: held.extend(lock_state_dir(c.state_dir) for c in configs)
    )
    locker.start()
    locker.join(5)
    assert len(held) == 2
    for handle in held:
        handle.close()
    forwarders = [build_forwarder(c) for c in configs]
    assert [f._spool.directory for f in forwarders] == [
        tmp_path / "shard-0" / "batches",
        tmp_path / "shard-1" / "batches",
    ]


def test_the_shard_reaches_the_discord_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import relay.gateway
    from relay.app import run_gateway

    made: dict[str, Any] = {}

    class Runner:
        def __init__(self, token: str, factory: Any, ledger: Any, *, first_delay: float) -> None:
            made.update(client=factory(), first_delay=first_delay, ledger=ledger)

        async def run(self, stop: Any) -> int:
            return 0

    monkeypatch.setattr(relay.gateway, "GatewayRunner", Runner)
    config = RelayConfig.from_env(
        {
            "INGEST_URL": "http://127.0.0.1:9/ingest",
            "SHARD_ID": "2",
            "SHARD_COUNT": "3",
            "RELAY_SPOOL_DIR": str(tmp_path),
        }
    )
    assert run_gateway(config, build_forwarder(config), "token") == 0
    client = made["client"]
    assert (client.shard_id, client.shard_count) == (2, 3)
    assert made["first_delay"] == 2 * relay.gateway.IDENTIFY_SPACING_SECONDS
    assert made["ledger"]._path == tmp_path / "shard-2" / "identify.json"


@pytest.mark.parametrize(("value", "expected"), [("", "text"), ("JSON", "json")])
def test_the_log_format_is_text_or_json(value: str, expected: str) -> None:
    assert RelayConfig.from_env({**SINK, "RELAY_LOG_FORMAT": value}).log_format == expected
    with pytest.raises(ConfigError, match="RELAY_LOG_FORMAT must be text or json"):
        RelayConfig.from_env({**SINK, "RELAY_LOG_FORMAT": "xml"})
