"""The bot token: from DISCORD_BOT_TOKEN, or read from Secrets Manager once at start.

The same rule as the core's `botmemory.discord.rest.bot_token_from_environment` (the relay
image carries no core package, so the rule is written twice and
tests/botmemory/discord/test_bot_token_rule.py holds both to one table of cases).

Never from a file in the image, and never logged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from relay.config import ConfigError


def bot_token(env: Mapping[str, str] | None = None, secrets_client: Any = None) -> str:
    env = os.environ if env is None else env
    token = env.get("DISCORD_BOT_TOKEN", "").strip()
    secret_name = env.get("DISCORD_BOT_TOKEN_SECRET", "").strip()
    if token and secret_name:
        raise ConfigError("set DISCORD_BOT_TOKEN or DISCORD_BOT_TOKEN_SECRET, not both")
    if token:
        return token
    if not secret_name:
        raise ConfigError("set DISCORD_BOT_TOKEN, or DISCORD_BOT_TOKEN_SECRET to a secret's name")
    if secrets_client is None:
        import boto3

        secrets_client = boto3.client("secretsmanager")
    value = secrets_client.get_secret_value(SecretId=secret_name).get("SecretString") or ""
    return _token_from_secret(value, secret_name)


def _token_from_secret(value: str, secret_name: str) -> str:
    """A plain-string secret is the token; a JSON one holds it under "token"."""
    text = value.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(token, str):
            raise ConfigError(f'secret {secret_name} is JSON without a "token" string')
        text = token.strip()
    if not text:
        raise ConfigError(f"secret {secret_name} is empty")
    return text
