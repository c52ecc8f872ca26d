"""One rule for the bot token, in both places that read it.

The core (`make register`, the Lambda functions) and the relay (its own image, without the
core package) each read the token. The same settings and the same secret must give the
same token, or fail, in both; this table is that rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parameters.base import DEFAULT_PROVIDERS
from moto import mock_aws

from botmemory.discord.rest import bot_token_from_environment
from relay.credentials import bot_token

SECRET = "discord-memory/bot-token"
FAILS = None

CASES: list[tuple[str, dict[str, str], str | None, str | None]] = [
    # (case, environment, secret's value or None when there is no such secret, token or FAILS)
    ("token variable", {"DISCORD_BOT_TOKEN": " abc.def \n"}, None, "abc.def"),
    ("plain secret", {"DISCORD_BOT_TOKEN_SECRET": SECRET}, " abc.def\n", "abc.def"),
    ("JSON secret", {"DISCORD_BOT_TOKEN_SECRET": SECRET}, '{"token": " xyz "}', "xyz"),
    ("empty variable", {"DISCORD_BOT_TOKEN": " ", "DISCORD_BOT_TOKEN_SECRET": SECRET}, "t", "t"),
    ("neither", {}, None, FAILS),
    ("both", {"DISCORD_BOT_TOKEN": "a", "DISCORD_BOT_TOKEN_SECRET": SECRET}, "b", FAILS),
    ("empty secret", {"DISCORD_BOT_TOKEN_SECRET": SECRET}, "  \n", FAILS),
    ("JSON without token", {"DISCORD_BOT_TOKEN_SECRET": SECRET}, '{"key": "x"}', FAILS),
    ("JSON token not text", {"DISCORD_BOT_TOKEN_SECRET": SECRET}, '{"token": 7}', FAILS),
    ("broken JSON", {"DISCORD_BOT_TOKEN_SECRET": SECRET}, '{"token": "x"', FAILS),
    ("JSON empty token", {"DISCORD_BOT_TOKEN_SECRET": SECRET}, '{"token": " "}', FAILS),
    ("no such secret", {"DISCORD_BOT_TOKEN_SECRET": SECRET}, None, FAILS),
]


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # Powertools caches its provider and values: a fresh one per case, created inside moto.
    monkeypatch.delitem(DEFAULT_PROVIDERS, "secrets", raising=False)
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")


def outcome(read: Any) -> str | None:
    try:
        return str(read())
    except Exception:  # each reader has its own error type; the rule is that both fail
        return FAILS


@pytest.mark.parametrize(
    ("env", "stored", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_core_and_relay_read_the_bot_token_by_one_rule(
    secrets: Any, env: dict[str, str], stored: str | None, expected: str | None
) -> None:
    if stored is not None:
        secrets.create_secret(Name=SECRET, SecretString=stored)

    core = outcome(lambda: bot_token_from_environment(env))
    relay = outcome(lambda: bot_token(env, secrets))

    assert (core, relay) == (expected, expected)
