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
# Without a table (one relay per shard, SHARD_ID): every shard is one relay process; they share the token's daily IDENTIFYs, so each shard's
# bound is a share of MAX_IDENTIFY_PER_DAY, and no more shards than that bound allows.
MAX_SHARD_COUNT = MAX_IDENTIFY_PER_DAY
LOG_FORMATS = ("text", "json")
# With RELAY_TABLE_NAME (the fleet mode: relay.fleet), one cap for every task together,
# counted in the table: short of Discord's 1,000, past which the token is reset.
DEFAULT_FLEET_IDENTIFY_PER_DAY = 900
MAX_TASK_COUNT = 1_000
MAX_FLEET_SHARDS = 100_000


class ConfigError(ValueError):
    """A setting is missing or out of range; the message names it."""


@dataclass(frozen=True)
class Shard:
    """This relay's shard: Discord sends it the events of guilds with
    `(guild_id >> 22) % count == id`, and direct messages only to shard 0."""

    id: int
    count: int

    @property
    def state_subdir(self) -> str:
        # By id only: after a change of SHARD_COUNT, shard N finds its own backlog again.
        return f"shard-{self.id}"


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
    log_format: str = "text"
    shard: Shard | None = None
    # The privileged GUILD_MEMBERS intent (enable Server Members Intent in the Developer
    # Portal first): members leaving are forwarded (GUILD_MEMBER_REMOVE), for servers whose
    # staff have them erased. The stack's GuildMembersIntent says the same.
    guild_members_intent: bool = False
    # Discord's own endpoints unless set: a local fake Discord (tests, development). The
    # token is sent there, so only ever an address the operator controls.
    discord_api_base: str | None = None
    discord_gateway_url: str | None = None
    # The fleet mode (relay.fleet): the main stack's table holds the leases, the sessions
    # and the IDENTIFY counters; this task is one of `task_count`, each holding a range of
    # `shard_count` shards (None: Discord's recommendation, pinned in the table).
    table_name: str | None = None
    task_count: int = 1
    shard_count: int | None = None
    lease_seconds: float = 30.0
    save_seconds: float = 5.0
    poll_seconds: float = 2.0

    @property
    def fleet(self) -> bool:
        return self.table_name is not None

    @property
    def state_dir(self) -> Path:
        """The spool, the IDENTIFY ledger and the lock: one directory per shard, so two
        shards on one host never wait on each other's lock or drain each other's spool."""
        if self.shard is None:
            return self.spool_dir
        return self.spool_dir / self.shard.state_subdir

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RelayConfig:
        values = _Env(os.environ if env is None else env)
        table_name = values.text("RELAY_TABLE_NAME")
        fleet = table_name is not None
        shard = None if fleet else _shard(values)
        shards = 1 if shard is None else shard.count
        if fleet and values.text("SHARD_ID") is not None:
            raise ConfigError(
                "SHARD_ID is for one relay per shard; with RELAY_TABLE_NAME every task "
                "claims a range of shards (set SHARD_COUNT alone, or leave it to Discord)"
            )
        config = cls(
            ingest_function_name=values.text("INGEST_FUNCTION_NAME"),
            ingest_url=values.text("INGEST_URL"),
            guild_members_intent=values.flag("RELAY_GUILD_MEMBERS_INTENT"),
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
                "RELAY_IDENTIFY_MAX_PER_DAY",
                DEFAULT_FLEET_IDENTIFY_PER_DAY,
                1,
                MAX_IDENTIFY_PER_DAY,
                why="for every task together",
            )
            if fleet
            else values.integer(
                "RELAY_IDENTIFY_MAX_PER_DAY",
                min(DEFAULT_IDENTIFY_PER_DAY, MAX_IDENTIFY_PER_DAY // shards),
                1,
                MAX_IDENTIFY_PER_DAY // shards,
                why=f"with SHARD_COUNT={shards}: the shards share the token's daily IDENTIFYs"
                if shard is not None
                else "",
            ),
            health_seconds=values.number("RELAY_HEALTH_SECONDS", 60.0, 0.05, 86_400),
            shutdown_seconds=values.number("RELAY_SHUTDOWN_SECONDS", 10.0, 0.1, 600),
            log_level=(values.text("RELAY_LOG_LEVEL") or "INFO").upper(),
            log_format=(values.text("RELAY_LOG_FORMAT") or "text").lower(),
            shard=shard,
            discord_api_base=values.text("DISCORD_API_BASE"),
            discord_gateway_url=values.text("DISCORD_GATEWAY_URL"),
            table_name=table_name,
            task_count=values.integer("RELAY_TASK_COUNT", 1, 1, MAX_TASK_COUNT),
            shard_count=(
                values.integer("SHARD_COUNT", 1, 1, MAX_FLEET_SHARDS)
                if fleet and values.text("SHARD_COUNT") is not None
                else None
            ),
            lease_seconds=values.number("RELAY_LEASE_SECONDS", 30.0, 5.0, 600.0),
            save_seconds=values.number("RELAY_SAVE_SECONDS", 5.0, 0.05, 60.0),
            poll_seconds=values.number("RELAY_POLL_SECONDS", 2.0, 0.05, 60.0),
        )
        if config.save_seconds * 3 > config.lease_seconds:
            raise ConfigError(
                "RELAY_SAVE_SECONDS must be at most a third of RELAY_LEASE_SECONDS "
                "(a lease is renewed at every save; one late renewal must not lose it)"
            )
        if bool(config.ingest_function_name) == bool(config.ingest_url):
            raise ConfigError("set exactly one of INGEST_FUNCTION_NAME or INGEST_URL")
        if config.ingest_url and not config.ingest_url.startswith(("http://", "https://")):
            raise ConfigError("INGEST_URL must be an http:// or https:// URL")
        if config.discord_api_base and not config.discord_api_base.startswith(
            ("http://", "https://")
        ):
            raise ConfigError("DISCORD_API_BASE must be an http:// or https:// URL")
        if config.discord_gateway_url and not config.discord_gateway_url.startswith(
            ("ws://", "wss://")
        ):
            raise ConfigError("DISCORD_GATEWAY_URL must be a ws:// or wss:// URL")
        if config.log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError("RELAY_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR")
        if config.log_format not in LOG_FORMATS:
            raise ConfigError("RELAY_LOG_FORMAT must be text or json")
        return config


def _shard(values: _Env) -> Shard | None:
    """SHARD_ID and SHARD_COUNT: both or neither, and 0 <= SHARD_ID < SHARD_COUNT."""
    if values.text("SHARD_ID") is None and values.text("SHARD_COUNT") is None:
        return None
    if values.text("SHARD_ID") is None or values.text("SHARD_COUNT") is None:
        raise ConfigError("set both SHARD_ID and SHARD_COUNT, or neither")
    count = values.integer("SHARD_COUNT", 1, 1, MAX_SHARD_COUNT)
    shard_id = values.integer("SHARD_ID", 0, 0, count - 1, why=f"with SHARD_COUNT={count}")
    return Shard(shard_id, count)


class _Env:
    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def text(self, name: str) -> str | None:
        value = self._env.get(name, "").strip()
        return value or None

    def flag(self, name: str) -> bool:
        """`true` or `false` (unset: false)."""
        raw = (self.text(name) or "false").lower()
        if raw not in ("true", "false"):
            raise ConfigError(f"{name} must be true or false, got {raw!r}")
        return raw == "true"

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

    def integer(self, name: str, default: int, low: int, high: int, why: str = "") -> int:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
        if not low <= value <= high:
            because = f" ({why})" if why else ""
            raise ConfigError(f"{name} must be between {low} and {high}{because}, got {raw}")
        return value
