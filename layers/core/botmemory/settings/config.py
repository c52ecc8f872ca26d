"""Settings, read once from the environment.

Every knob has a documented default (see docs/configuration.md). A
deployment with `MEMORY_MODEL` unset runs with memory off: nothing is recorded and
recall returns the channel's legacy memory string.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# Defined with required_env in a module without pydantic (see its docstring); imported from
# here by everyone else.
from botmemory.settings.environment import ConfigError as ConfigError
from botmemory.settings.secrets import one_form, value_or_secret

# The variables that hold the models' API keys (each also as NAME_SECRET: settings.secrets).
MODEL_API_KEY_ENV = "MEMORY_MODEL_API_KEY"
EMBEDDING_API_KEY_ENV = "EMBEDDING_MODEL_API_KEY"
CHAT_API_KEY_ENV = "CHAT_MODEL_API_KEY"

# A table name, or a table ARN (DynamoDB accepts both).
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,1024}$")
# The keyword leg's database: an Aurora cluster's ARN (the RDS Data API), or a local
# PostgreSQL's connection URL (tests, `make dev`, the eval, the bench).
_KEYWORD_INDEX = re.compile(
    r"^(postgres:arn:aws[a-z-]*:rds:[a-z0-9-]{1,32}:[0-9]{12}:cluster:[a-z][a-z0-9-]{0,62}"
    r"|postgresql://\S{1,500})$"
)
_DATABASE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# A secret's ARN; an RDS-managed one is named "rds!cluster-<id>".
_SECRET_ARN = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]{1,32}:[0-9]{12}:secret:[A-Za-z0-9/_+=.@!-]{1,512}$"
)
# A Secrets Manager secret's name, or its (partial) ARN.
_SECRET_ID = re.compile(r"^[A-Za-z0-9/_+=.@:-]{1,2048}$")
_HTTP_URL = re.compile(r"^https?://[^\s/?#]+[^\s]*$")
_SNOWFLAKE = re.compile(r"^[0-9]{1,21}$")
# Settings whose values never appear in an error message.
# The most days a backfill reads back (botmemory.catchup.backfill, its staff command, and the
# deployment's default on join); here, since settings are read at cold start without it.
MAX_BACKFILL_DAYS = 30
_HIDDEN_FIELDS = frozenset({"model_api_key", "embedding_api_key", "chat_api_key"})
_SHOWN_VALUE_CHARS = 60


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str = "MemoryTable"
    # `bedrock:<model id>`, `openai:<model>` or `rules`; None turns memory off.
    memory_model: str | None = None
    model_base_url: str = "https://api.openai.com/v1"
    model_api_key: str | None = None
    # The name or ARN of a Secrets Manager secret holding the key (botmemory.settings.secrets); at
    # most one of the two is set.
    model_api_key_secret: str | None = None
    model_timeout_seconds: float = Field(default=30.0, gt=0)
    model_max_attempts: int = Field(default=3, ge=1, le=10)
    model_max_output_tokens: int = Field(default=2000, ge=200)

    # Consolidation.
    consolidate_every: int = Field(default=20, ge=1)
    # A channel whose pending observations hold this many of the bot's answers is consolidated
    # below the batch size, so its summary keeps up with a conversation with the bot; 0: off.
    answered_turns_per_refresh: int = Field(default=5, ge=0, le=60)
    max_batch: int = Field(default=50, ge=1, le=60)
    # A channel that is behind (more than MEMORY_MAX_BATCH waiting) gives one model call up to
    # this many estimated input tokens of observations (botmemory.consolidation.backlog): far
    # below the context of every supported model (128,000 tokens and more), with room for the
    # instructions, the speakers' facts and the answer.
    batch_max_tokens: int = Field(default=40_000, ge=1_000, le=100_000)
    episodes_per_channel: int = Field(default=10, ge=1, le=50)
    fact_retention_days: int = Field(default=180, ge=1)
    # Long enough to search the history a community refers back to (docs/architecture.md section 9).
    observation_retention_days: int = Field(default=365, ge=1)
    # The bot's first answer to a member in a server says, in one line, that it keeps memory
    # there and points to `/memory privacy` (botmemory.answering.notices).
    privacy_notice: bool = True
    # A server the bot was removed from is purged this many days later, unless the bot comes
    # back first (botmemory.people.server_removal).
    server_purge_days: int = Field(default=30, ge=1, le=365)
    # The bot added to a server imports this many days of its channels' history (a backfill,
    # botmemory.catchup.on_join); 0, the default, never: members did not expect the bot to
    # read the past. A server's staff choose their own (`/memory-staff backfill on-join`).
    backfill_on_join_days: int = Field(default=0, ge=0, le=MAX_BACKFILL_DAYS)
    # The relay asks for the privileged GUILD_MEMBERS intent (RELAY_GUILD_MEMBERS_INTENT, the
    # same choice): member removals arrive, and a server's staff may have members who left
    # erased there (botmemory.people.departures). Off: those events are ignored.
    guild_members_intent: bool = False
    episode_retention_days: int = Field(default=90, ge=1)
    lock_lease_seconds: int = Field(default=900, ge=10)
    idle_flush_minutes: int = Field(default=30, ge=0)
    # A quiet channel with only a few observations waiting (1 to 5) is flushed once it has
    # been quiet this long instead (botmemory.consolidation.work): its model call waits for more.
    tiny_flush_minutes: int = Field(default=120, ge=0, le=10_080)
    # ConsolidateWorkerFunction's queue (botmemory.consolidation.work): the stream consumer and
    # the sweep hand each channel's work to it; a local run names its in-process queue here.
    consolidate_queue_url: str | None = Field(
        default=None, pattern=r"^(https?://\S+|[A-Za-z0-9_.-]{1,80})$"
    )
    # CatchUpFunction's queue (botmemory.catchup): one page of a channel's history a message.
    catchup_queue_url: str | None = Field(
        default=None, pattern=r"^(https?://\S+|[A-Za-z0-9_.-]{1,80})$"
    )
    facts_per_person_in_model: int = Field(default=15, ge=0, le=50)
    # Facts a person may gain in one batch (restated ones do not count): one chatty batch
    # cannot flood their memory.
    new_facts_per_person: int = Field(default=3, ge=1, le=20)
    # The hot tier (botmemory.memory.hot_tier): after each round, a speaker's active facts are kept
    # within both targets by demoting the least recalled (never `/memory remember`'s); past
    # `facts_max_per_person` stored facts, the least recalled demoted ones are deleted.
    hot_facts_per_person: int = Field(default=25, ge=1, le=1000)
    hot_fact_chars: int = Field(default=2000, ge=100, le=200_000)
    facts_max_per_person: int = Field(default=200, ge=1, le=10_000)
    # `on`: a newer fact supersedes the one it replaces; `shadow`: only logged and counted
    # (FactsSupersededShadow), so a model's supersessions can be watched before trusted.
    supersession: Literal["on", "shadow"] = "on"
    # The rolling channel summary (botmemory.consolidation.summary): its cap, and the size (estimated
    # tokens: characters / 4) over which one more model pass recompresses it towards
    # `summary_recompress_ratio` of its length.
    summary_max_chars: int = Field(default=2000, ge=200, le=8000)
    summary_max_tokens: int = Field(default=1500, ge=50, le=20_000)
    summary_recompress_ratio: float = Field(default=0.65, gt=0.1, lt=1.0)
    # Short-term cross-channel entries: what a person did in the server's other public
    # channels lately (botmemory.memory.short_term), kept this many hours, at most this many each.
    short_term_hours: int = Field(default=6, ge=1, le=168)
    short_term_per_person: int = Field(default=20, ge=0, le=100)
    observation_chars: int = Field(default=500, ge=20, le=4000)
    fact_chars: int = Field(default=240, ge=20, le=1000)
    episode_chars: int = Field(default=600, ge=50, le=4000)
    # A batch that keeps failing: attempts before it is split, and the back-off between tries.
    batch_max_attempts: int = Field(default=3, ge=1, le=5)
    retry_backoff_minutes: int = Field(default=15, ge=1, le=1440)
    retry_backoff_max_minutes: int = Field(default=120, ge=1, le=10080)

    # Recall budgets (characters per section) and caps.
    recall_pin_chars: int = Field(default=800, ge=0)
    recall_fact_chars: int = Field(default=1600, ge=0)
    recall_episode_chars: int = Field(default=1200, ge=0)
    recall_summary_chars: int = Field(default=1200, ge=0)
    recall_short_term_chars: int = Field(default=1000, ge=0)
    # Notes for direct messages (botmemory.memory.notes): the deployment's and the member's
    # servers', together within this budget; a longer note is cut to it.
    recall_notes_chars: int = Field(default=1000, ge=0)
    recall_facts_per_person: int = Field(default=5, ge=0, le=50)
    recall_episodes: int = Field(default=3, ge=0, le=20)
    recall_max_participants: int = Field(default=8, ge=1, le=25)

    # Search over the whole history (docs/architecture.md section 9). `sqlite:<path>` (embedded, local
    # runs), `s3vectors:<bucket>/<index>` (AWS, needs an embedding model), unset: no search.
    search_index: str | None = None
    # `postgres:<Aurora cluster ARN>` (the RDS Data API) or `postgresql://...` (a local
    # PostgreSQL): the deployed keyword leg over the whole history beside S3 Vectors
    # (docs/search.md); unset: vectors alone, keywords re-rank.
    keyword_index: str | None = None
    # The Secrets Manager secret (ARN) the Data API signs in with, and the database's name.
    keyword_db_secret: str | None = None
    keyword_db_name: str = "botmemory"
    # `channel`: a channel's passages only; `guild`: every channel of the server (docs/configuration.md warns).
    search_scope: Literal["channel", "guild"] = "channel"
    search_timeout_ms: int = Field(default=800, ge=50, le=10_000)
    recall_search_chars: int = Field(default=2000, ge=0)
    # `bedrock:<model id>` or `openai:<model>`; unset: the keyword leg alone.
    embedding_model: str | None = None
    embedding_base_url: str | None = None  # unset: MEMORY_MODEL_BASE_URL
    embedding_api_key: str | None = None  # unset: MEMORY_MODEL_API_KEY
    embedding_api_key_secret: str | None = None  # at most one of the two
    embedding_dimensions: int = Field(default=512, ge=64, le=4096)
    # What the model wants before a question and before a stored passage, for models trained
    # with such marks (multilingual-e5: "query: " and "passage: "); empty for Titan and
    # OpenAI's models, which want none (docs/configuration.md).
    embedding_query_prefix: str = Field(default="", max_length=64)
    embedding_passage_prefix: str = Field(default="", max_length=64)

    # The chat model that answers (docs/architecture.md section 10): `bedrock:<model id>`,
    # `openai:<model>` or `rules`; None: the bot does not answer.
    chat_model: str | None = None
    chat_base_url: str | None = None  # unset: MEMORY_MODEL_BASE_URL
    chat_api_key: str | None = None  # unset (and no secret): the memory model's key
    chat_api_key_secret: str | None = None  # at most one of the two
    # Someone is waiting for the answer: a shorter timeout and fewer attempts than consolidation.
    chat_timeout_seconds: float = Field(default=20.0, gt=0, le=300)
    chat_max_attempts: int = Field(default=2, ge=1, le=5)
    chat_max_output_tokens: int = Field(default=800, ge=50, le=8000)

    # The bot's own user id: its messages are recorded as answers, never mined for facts.
    bot_user_id: str | None = None

    # How often the bot answers (botmemory.answering.rate), in fixed windows: per person and
    # per channel. The first request over a limit is told once, later ones get silence.
    answer_rate_window_seconds: int = Field(default=600, ge=10, le=86_400)
    answer_rate_per_person: int = Field(default=5, ge=1, le=1000)
    answer_rate_per_channel: int = Field(default=20, ge=1, le=10_000)

    # Answering (botmemory.answering.answerer): the function ingest and /ask start (its name or ARN;
    # unset: the bot does not answer), the bot's prompt, and the prompt's parts' budgets.
    answer_function: str | None = Field(default=None, pattern=r"^(arn:\S+|[A-Za-z0-9_-]{1,140})$")
    bot_system_prompt: str | None = Field(default=None, max_length=20_000)  # with {memory}
    bot_system_prompt_parameter: str | None = Field(default=None, pattern=r"^/[A-Za-z0-9_./-]+$")
    # Personas for the whole deployment (botmemory.memory.personas): an SSM parameter holding a JSON
    # list of them, read through Powertools Parameters, cached 5 minutes; unset: none.
    personas_parameter: str | None = Field(default=None, pattern=r"^/[A-Za-z0-9_./-]+$")
    # The deployment's notes for direct messages (botmemory.memory.notes): an SSM parameter (String
    # or SecureString), read through Powertools Parameters, cached 5 minutes; unset: none.
    dm_notes_parameter: str | None = Field(default=None, pattern=r"^/[A-Za-z0-9_./-]+$")
    answer_history_chars: int = Field(default=3000, ge=0, le=20_000)
    # Where the answer prompt puts the memory block (botmemory.answering.prompt): `primacy`,
    # before the instructions, or `recency`, last, just before the member's message. Models
    # attend most to the start and the end of a long prompt, least to its middle.
    memory_block_placement: Literal["primacy", "recency"] = "primacy"
    answer_person_facts: int = Field(default=8, ge=0, le=8)

    @property
    def memory_enabled(self) -> bool:
        return bool(self.memory_model)

    @field_validator("table_name")
    @classmethod
    def _table_name(cls, value: str) -> str:
        if not _TABLE_NAME.match(value):
            raise ValueError("must be a DynamoDB table name (letters, digits, '_', '-', '.')")
        return value

    @field_validator("keyword_index")
    @classmethod
    def _keyword_index(cls, value: str | None) -> str | None:
        if value is not None and not _KEYWORD_INDEX.match(value):
            raise ValueError(
                "must be postgres:<Aurora cluster ARN> or postgresql://<local database>"
            )
        return value

    @field_validator("keyword_db_secret")
    @classmethod
    def _keyword_db_secret(cls, value: str | None) -> str | None:
        if value is not None and not _SECRET_ARN.match(value):
            raise ValueError("must be a Secrets Manager secret's ARN")
        return value

    @field_validator("keyword_db_name")
    @classmethod
    def _keyword_db_name(cls, value: str) -> str:
        if not _DATABASE_NAME.match(value):
            raise ValueError("must be a database name (lowercase letters, digits, '_')")
        return value

    @field_validator("model_base_url", "embedding_base_url", "chat_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not _HTTP_URL.match(value):
            raise ValueError("must be a URL starting with http:// or https://")
        return value

    @field_validator("model_api_key", "embedding_api_key", "chat_api_key")
    @classmethod
    def _bearer_token(cls, value: str | None) -> str | None:
        # Sent as an HTTP header: whitespace or a control character would break it.
        if value is not None and any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError("must not contain spaces or control characters")
        return value

    @field_validator("model_api_key_secret", "embedding_api_key_secret", "chat_api_key_secret")
    @classmethod
    def _secret_id(cls, value: str | None) -> str | None:
        if value is not None and not _SECRET_ID.match(value):
            raise ValueError("must be the name or ARN of a Secrets Manager secret")
        return value

    @field_validator("bot_user_id")
    @classmethod
    def _snowflake(cls, value: str | None) -> str | None:
        if value is not None and not _SNOWFLAKE.match(value):
            raise ValueError("must be a Discord user id (digits only)")
        return value

    @model_validator(mode="after")
    def _one_form_of_each_key(self) -> Settings:
        # At cold start, before any secret is read; the rule is botmemory.settings.secrets'.
        one_form(MODEL_API_KEY_ENV, self.model_api_key, self.model_api_key_secret, error=ValueError)
        one_form(
            EMBEDDING_API_KEY_ENV,
            self.embedding_api_key,
            self.embedding_api_key_secret,
            error=ValueError,
        )
        one_form(CHAT_API_KEY_ENV, self.chat_api_key, self.chat_api_key_secret, error=ValueError)
        return self

    @field_validator("chat_model")
    @classmethod
    def _chat_model_form(cls, value: str | None) -> str | None:
        # Checked here, not only when the model is built: a handler that never answers still
        # fails its cold start on a misspelt CHAT_MODEL, as on any other bad setting.
        provider, colon, name = (value or "rules").partition(":")
        if (provider, colon) == ("rules", "") or (provider in ("bedrock", "openai") and name):
            return value
        raise ValueError("must be 'rules', 'bedrock:<model id>' or 'openai:<model>'")

    @model_validator(mode="after")
    def _batch_holds_threshold(self) -> Settings:
        if self.consolidate_every > self.max_batch:
            raise ValueError(
                f"MEMORY_CONSOLIDATE_EVERY ({self.consolidate_every}) must not exceed "
                f"MEMORY_MAX_BATCH ({self.max_batch})"
            )
        return self

    @model_validator(mode="after")
    def _backoff_cap_holds_first_backoff(self) -> Settings:
        if self.retry_backoff_max_minutes < self.retry_backoff_minutes:
            raise ValueError(
                f"MEMORY_RETRY_BACKOFF_MAX_MINUTES ({self.retry_backoff_max_minutes}) must not be "
                f"below MEMORY_RETRY_BACKOFF_MINUTES ({self.retry_backoff_minutes})"
            )
        return self

    @model_validator(mode="after")
    def _cap_holds_hot_tier(self) -> Settings:
        if self.facts_max_per_person < self.hot_facts_per_person:
            raise ValueError(
                f"MEMORY_FACTS_MAX_PER_PERSON ({self.facts_max_per_person}) must not be below "
                f"MEMORY_HOT_FACTS_PER_PERSON ({self.hot_facts_per_person})"
            )
        return self


# Environment variable -> Settings field. Kept as one table so docs/configuration.md can mirror it.
ENVIRONMENT: dict[str, str] = {
    "TABLE_NAME": "table_name",
    "MEMORY_MODEL": "memory_model",
    "MEMORY_MODEL_BASE_URL": "model_base_url",
    "MEMORY_MODEL_API_KEY": "model_api_key",
    "MEMORY_MODEL_API_KEY_SECRET": "model_api_key_secret",  # nosec B105 # a variable name mapped to a field name, no secret
    "MEMORY_MODEL_TIMEOUT_SECONDS": "model_timeout_seconds",
    "MEMORY_MODEL_MAX_ATTEMPTS": "model_max_attempts",
    "MEMORY_MODEL_MAX_OUTPUT_TOKENS": "model_max_output_tokens",
    "MEMORY_CONSOLIDATE_EVERY": "consolidate_every",
    "MEMORY_ANSWERED_TURNS_PER_REFRESH": "answered_turns_per_refresh",
    "MEMORY_MAX_BATCH": "max_batch",
    "MEMORY_BATCH_MAX_TOKENS": "batch_max_tokens",
    "MEMORY_EPISODES_PER_CHANNEL": "episodes_per_channel",
    "MEMORY_FACT_RETENTION_DAYS": "fact_retention_days",
    "MEMORY_OBSERVATION_RETENTION_DAYS": "observation_retention_days",
    "MEMORY_PRIVACY_NOTICE": "privacy_notice",
    "MEMORY_SERVER_PURGE_DAYS": "server_purge_days",
    "MEMORY_BACKFILL_ON_JOIN_DAYS": "backfill_on_join_days",
    "MEMORY_GUILD_MEMBERS_INTENT": "guild_members_intent",
    "MEMORY_EPISODE_RETENTION_DAYS": "episode_retention_days",
    "MEMORY_LOCK_LEASE_SECONDS": "lock_lease_seconds",
    "MEMORY_IDLE_FLUSH_MINUTES": "idle_flush_minutes",
    "MEMORY_TINY_FLUSH_MINUTES": "tiny_flush_minutes",
    "CONSOLIDATE_QUEUE_URL": "consolidate_queue_url",
    "CATCHUP_QUEUE_URL": "catchup_queue_url",
    "MEMORY_FACTS_PER_PERSON_IN_MODEL": "facts_per_person_in_model",
    "MEMORY_NEW_FACTS_PER_PERSON": "new_facts_per_person",
    "MEMORY_HOT_FACTS_PER_PERSON": "hot_facts_per_person",
    "MEMORY_HOT_FACT_CHARS": "hot_fact_chars",
    "MEMORY_FACTS_MAX_PER_PERSON": "facts_max_per_person",
    "MEMORY_SUPERSESSION": "supersession",
    "MEMORY_SUMMARY_MAX_CHARS": "summary_max_chars",
    "MEMORY_SUMMARY_MAX_TOKENS": "summary_max_tokens",
    "MEMORY_SUMMARY_RECOMPRESS_RATIO": "summary_recompress_ratio",
    "MEMORY_SHORT_TERM_HOURS": "short_term_hours",
    "MEMORY_SHORT_TERM_PER_PERSON": "short_term_per_person",
    "MEMORY_OBSERVATION_CHARS": "observation_chars",
    "MEMORY_FACT_CHARS": "fact_chars",
    "MEMORY_EPISODE_CHARS": "episode_chars",
    "MEMORY_BATCH_MAX_ATTEMPTS": "batch_max_attempts",
    "MEMORY_RETRY_BACKOFF_MINUTES": "retry_backoff_minutes",
    "MEMORY_RETRY_BACKOFF_MAX_MINUTES": "retry_backoff_max_minutes",
    "MEMORY_RECALL_PIN_CHARS": "recall_pin_chars",
    "MEMORY_RECALL_FACT_CHARS": "recall_fact_chars",
    "MEMORY_RECALL_EPISODE_CHARS": "recall_episode_chars",
    "MEMORY_RECALL_SUMMARY_CHARS": "recall_summary_chars",
    "MEMORY_RECALL_SHORT_TERM_CHARS": "recall_short_term_chars",
    "MEMORY_RECALL_NOTES_CHARS": "recall_notes_chars",
    "MEMORY_RECALL_FACTS_PER_PERSON": "recall_facts_per_person",
    "MEMORY_RECALL_EPISODES": "recall_episodes",
    "MEMORY_RECALL_MAX_PARTICIPANTS": "recall_max_participants",
    "MEMORY_SEARCH_INDEX": "search_index",
    "MEMORY_KEYWORD_INDEX": "keyword_index",
    "MEMORY_KEYWORD_DB_SECRET": "keyword_db_secret",  # nosec B105 # a variable name, no secret
    "MEMORY_KEYWORD_DB_NAME": "keyword_db_name",
    "MEMORY_SEARCH_SCOPE": "search_scope",
    "MEMORY_SEARCH_TIMEOUT_MS": "search_timeout_ms",
    "MEMORY_RECALL_SEARCH_CHARS": "recall_search_chars",
    "EMBEDDING_MODEL": "embedding_model",
    "EMBEDDING_MODEL_BASE_URL": "embedding_base_url",
    "EMBEDDING_MODEL_API_KEY": "embedding_api_key",
    "EMBEDDING_MODEL_API_KEY_SECRET": "embedding_api_key_secret",  # nosec B105 # a variable name mapped to a field name, no secret
    "EMBEDDING_DIMENSIONS": "embedding_dimensions",
    "EMBEDDING_QUERY_PREFIX": "embedding_query_prefix",
    "EMBEDDING_PASSAGE_PREFIX": "embedding_passage_prefix",
    "CHAT_MODEL": "chat_model",
    "CHAT_MODEL_BASE_URL": "chat_base_url",
    "CHAT_MODEL_API_KEY": "chat_api_key",
    "CHAT_MODEL_API_KEY_SECRET": "chat_api_key_secret",  # nosec B105 # a variable name mapped to a field name, no secret
    "CHAT_MODEL_TIMEOUT_SECONDS": "chat_timeout_seconds",
    "CHAT_MODEL_MAX_ATTEMPTS": "chat_max_attempts",
    "CHAT_MODEL_MAX_OUTPUT_TOKENS": "chat_max_output_tokens",
    "DISCORD_BOT_USER_ID": "bot_user_id",
    "ANSWER_RATE_WINDOW_SECONDS": "answer_rate_window_seconds",
    "ANSWER_RATE_PER_PERSON": "answer_rate_per_person",
    "ANSWER_RATE_PER_CHANNEL": "answer_rate_per_channel",
    "ANSWER_FUNCTION": "answer_function",
    "BOT_SYSTEM_PROMPT": "bot_system_prompt",
    "BOT_SYSTEM_PROMPT_PARAMETER": "bot_system_prompt_parameter",
    "PERSONAS_PARAMETER": "personas_parameter",
    "DM_NOTES_PARAMETER": "dm_notes_parameter",
    "ANSWER_HISTORY_CHARS": "answer_history_chars",
    "MEMORY_BLOCK_PLACEMENT": "memory_block_placement",
    "ANSWER_PERSON_FACTS": "answer_person_facts",
}


# Values whose spaces mean something: an embedding prefix ends with one ("query: ").
_KEEP_SPACES = frozenset({"embedding_query_prefix", "embedding_passage_prefix"})


def settings_from(environ: Mapping[str, str]) -> Settings:
    """Build settings from a mapping of environment variables; blank values count as unset."""
    values = {
        field: environ[name] if field in _KEEP_SPACES else environ[name].strip()
        for name, field in ENVIRONMENT.items()
        if environ.get(name, "").strip()
    }
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(_problem(err) for err in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}") from None


_VARIABLES = {field: name for name, field in ENVIRONMENT.items()}


def _problem(error: Mapping[str, Any]) -> str:
    """One validation error as `VARIABLE='value': what is wrong`, on one line.

    A rule across fields (loc is empty) already names its variables in its message. A key's
    value is never shown: the message goes to logs.
    """
    message = " ".join(str(error["msg"]).removeprefix("Value error, ").split())
    loc = error.get("loc") or ()
    if not loc:
        return message
    field = str(loc[0])
    name = _VARIABLES.get(field, field)
    value = error.get("input")
    if field in _HIDDEN_FIELDS or not isinstance(value, str):
        return f"{name}: {message}"
    # repr escapes line breaks, so a value cannot break the line either.
    return f"{name}={value[:_SHOWN_VALUE_CHARS]!r}: {message}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from os.environ on first use."""
    return settings_from(os.environ)


# The models' `provider:name` form -----------------------------------------------------


class ModelSpec(NamedTuple):
    provider: Literal["rules", "bedrock", "openai"]
    name: str  # the model id or name; empty for `rules`


def parse_model_spec(variable: str, spec: str) -> ModelSpec:
    """A model setting (MEMORY_MODEL, CHAT_MODEL) as its provider and model name: `rules`,
    `bedrock:<model id>` or `openai:<model>`; any other form is a ConfigError naming the
    variable. The model factories choose by it, and import only the provider chosen."""
    provider, _, name = spec.partition(":")
    if provider == "rules" and not name:
        return ModelSpec("rules", "")
    if provider == "bedrock" and name:
        return ModelSpec("bedrock", name)
    if provider == "openai" and name:
        return ModelSpec("openai", name)
    raise ConfigError(
        f"{variable}={spec!r} is not one of 'rules', 'bedrock:<model id>', 'openai:<model>'"
    )


# The models' API keys, read when first needed (never at import) --------------------


def model_api_key(settings: Settings) -> str | None:
    """The memory model's API key (MEMORY_MODEL_API_KEY or _SECRET), or None: no key."""
    return value_or_secret(
        MODEL_API_KEY_ENV,
        settings.model_api_key,
        settings.model_api_key_secret,
        what="memory model API key",
    )


def embedding_api_key(settings: Settings) -> str | None:
    """The embedder's API key (EMBEDDING_MODEL_API_KEY or _SECRET); when neither is set,
    the memory model's."""
    if settings.embedding_api_key or settings.embedding_api_key_secret:
        return value_or_secret(
            EMBEDDING_API_KEY_ENV,
            settings.embedding_api_key,
            settings.embedding_api_key_secret,
            what="embedding model API key",
        )
    return model_api_key(settings)


def chat_api_key(settings: Settings) -> str | None:
    """The chat model's API key (CHAT_MODEL_API_KEY or _SECRET); when neither is set, the
    memory model's (MEMORY_MODEL_API_KEY or _SECRET), as for the embedder."""
    if settings.chat_api_key or settings.chat_api_key_secret:
        return value_or_secret(
            CHAT_API_KEY_ENV,
            settings.chat_api_key,
            settings.chat_api_key_secret,
            what="chat model API key",
        )
    return model_api_key(settings)
