"""Settings from the environment, and the bot token from the environment or Secrets Manager."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from relay.app import build_forwarder, lock_state_dir
from relay.config import ConfigError, RelayConfig
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
