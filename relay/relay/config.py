"""Settings, read once from the environment. Blank counts as unset."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Lambda's async Invoke takes up to 1 MB today (256 KB until late 2025); the default stays
# under the older limit too, and no setting may come near the current one.
DEFAULT_BATCH_BYTES = 200_000
MAX_BATCH_BYTES = 900_000
# Discord allows 1000 IDENTIFYs a day and resets the token beyond; stay far below it.
DEFAULT_IDENTIFY_PER_DAY = 100
MAX_IDENTIFY_PER_DAY = 900


class ConfigError(ValueError):
    """A setting is missing or out of range; the message names it."""


@dataclass(frozen=True)
class RelayConfig:
    ingest_function_name: str | None = None
    ingest_url: str | None = None
    batch_max_events: int = 100
    batch_max_bytes: int = DEFAULT_BATCH_BYTES
    batch_max_seconds: float = 2.0
    send_attempts: int = 4
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 60.0
    http_timeout_seconds: float = 10.0
    spool_dir: Path = Path("relay-state")
    spool_max_bytes: int = 256 * 1024 * 1024
    identify_max_per_day: int = DEFAULT_IDENTIFY_PER_DAY
    health_seconds: float = 60.0
    shutdown_seconds: float = 10.0
    log_level: str = "INFO"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RelayConfig:
        values = _Env(os.environ if env is None else env)
        config = cls(
            ingest_function_name=values.text("INGEST_FUNCTION_NAME"),
            ingest_url=values.text("INGEST_URL"),
            batch_max_events=values.integer("RELAY_BATCH_MAX_EVENTS", 100, 1, 10_000),
            batch_max_bytes=values.integer(
                "RELAY_BATCH_MAX_BYTES", DEFAULT_BATCH_BYTES, 1_000, MAX_BATCH_BYTES
            ),
            batch_max_seconds=values.number("RELAY_BATCH_MAX_SECONDS", 2.0, 0.01, 300),
            send_attempts=values.integer("RELAY_SEND_ATTEMPTS", 4, 1, 20),
            retry_base_seconds=values.number("RELAY_RETRY_BASE_SECONDS", 0.5, 0.001, 60),
            retry_max_seconds=values.number("RELAY_RETRY_MAX_SECONDS", 60.0, 0.01, 3600),
            http_timeout_seconds=values.number("RELAY_HTTP_TIMEOUT_SECONDS", 10.0, 0.1, 300),
            spool_dir=Path(values.text("RELAY_SPOOL_DIR") or "relay-state"),
            spool_max_bytes=values.integer(
                "RELAY_SPOOL_MAX_BYTES", 256 * 1024 * 1024, 1_000_000, 1 << 40
            ),
            identify_max_per_day=values.integer(
                "RELAY_IDENTIFY_MAX_PER_DAY", DEFAULT_IDENTIFY_PER_DAY, 1, MAX_IDENTIFY_PER_DAY
            ),
            health_seconds=values.number("RELAY_HEALTH_SECONDS", 60.0, 0.05, 86_400),
            shutdown_seconds=values.number("RELAY_SHUTDOWN_SECONDS", 10.0, 0.1, 600),
            log_level=(values.text("RELAY_LOG_LEVEL") or "INFO").upper(),
        )
        if bool(config.ingest_function_name) == bool(config.ingest_url):
            raise ConfigError("set exactly one of INGEST_FUNCTION_NAME or INGEST_URL")
        if config.ingest_url and not config.ingest_url.startswith(("http://", "https://")):
            raise ConfigError("INGEST_URL must be an http:// or https:// URL")
        if config.log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError("RELAY_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR")
        return config


class _Env:
    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def text(self, name: str) -> str | None:
        value = self._env.get(name, "").strip()
        return value or None

    def number(self, name: str, default: float, low: float, high: float) -> float:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a number, got {raw!r}") from None
        if not low <= value <= high:
            raise ConfigError(f"{name} must be between {low:g} and {high:g}, got {raw}")
        return value

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
        if not low <= value <= high:
            raise ConfigError(f"{name} must be between {low} and {high}, got {raw}")
        return value
