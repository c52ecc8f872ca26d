"""A bad setting fails the cold start with one line naming its variable.

One bad value per variable of config.ENVIRONMENT (a new variable without a case here fails
`test_every_variable_has_a_bad_value_case`). The cold start is what a handler's first
`services_from_environment()` does: read the settings, build the model and the search index.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from botmemory.runtime import build_services
from botmemory.settings import config, environment
from botmemory.settings.config import ENVIRONMENT, ConfigError, settings_from
from botmemory.settings.environment import required_env

# Memory on and search on, so the model and the index specs are read too.
BASE = {"MEMORY_MODEL": "rules", "MEMORY_SEARCH_INDEX": "sqlite::memory:"}

BAD: dict[str, str] = {
    "TABLE_NAME": "memory table",
    "MEMORY_MODEL": "gpt-4o",
    "MEMORY_MODEL_BASE_URL": "api.openai.com/v1",
    "MEMORY_MODEL_API_KEY": "sk with spaces",
    "MEMORY_MODEL_API_KEY_SECRET": "my model key",
    "MEMORY_MODEL_TIMEOUT_SECONDS": "soon",
    "MEMORY_MODEL_MAX_ATTEMPTS": "0",
    "MEMORY_MODEL_MAX_OUTPUT_TOKENS": "10",
    "MEMORY_CONSOLIDATE_EVERY": "abc",
    "MEMORY_ANSWERED_TURNS_PER_REFRESH": "-1",
    "MEMORY_MAX_BATCH": "61",
    "MEMORY_BATCH_MAX_TOKENS": "999",
    "MEMORY_EPISODES_PER_CHANNEL": "0",
    "MEMORY_FACT_RETENTION_DAYS": "-1",
    "MEMORY_OBSERVATION_RETENTION_DAYS": "1.5",
    "MEMORY_PRIVACY_NOTICE": "sometimes",
    "MEMORY_SERVER_PURGE_DAYS": "0",
    "MEMORY_BACKFILL_ON_JOIN_DAYS": "31",  # beyond a backfill's most days
    "MEMORY_GUILD_MEMBERS_INTENT": "maybe",
    "MEMORY_EPISODE_RETENTION_DAYS": "ninety",
    "MEMORY_LOCK_LEASE_SECONDS": "5",
    "MEMORY_IDLE_FLUSH_MINUTES": "-1",
    "MEMORY_TINY_FLUSH_MINUTES": "-5",
    "CONSOLIDATE_QUEUE_URL": "not a queue",
    "CATCHUP_QUEUE_URL": "not a queue",
    "MEMORY_FACTS_PER_PERSON_IN_MODEL": "51",
    "MEMORY_OBSERVATION_CHARS": "10",
    "MEMORY_FACT_CHARS": "5000",
    "MEMORY_EPISODE_CHARS": "ten",
    "MEMORY_BATCH_MAX_ATTEMPTS": "6",
    "MEMORY_RETRY_BACKOFF_MINUTES": "0",
    "MEMORY_RETRY_BACKOFF_MAX_MINUTES": "99999",
    "MEMORY_RECALL_PIN_CHARS": "-5",
    "MEMORY_RECALL_FACT_CHARS": "lots",
    "MEMORY_RECALL_EPISODE_CHARS": "1e3",
    "MEMORY_RECALL_FACTS_PER_PERSON": "51",
    "MEMORY_RECALL_EPISODES": "21",
    "MEMORY_RECALL_MAX_PARTICIPANTS": "0",
    "MEMORY_SEARCH_INDEX": "elastic:memories",
    "MEMORY_SEARCH_SCOPE": "everywhere",
    "MEMORY_SEARCH_TIMEOUT_MS": "10",
    "MEMORY_RECALL_SEARCH_CHARS": "-1",
    "EMBEDDING_MODEL": "cohere:embed-v4",
    "EMBEDDING_MODEL_BASE_URL": "ftp://models.example/v1",
    "EMBEDDING_MODEL_API_KEY": "sk\tsecret",
    "EMBEDDING_MODEL_API_KEY_SECRET": "an embedding key",
    "EMBEDDING_DIMENSIONS": "32",
    "EMBEDDING_QUERY_PREFIX": "query: " * 20,
    "EMBEDDING_PASSAGE_PREFIX": "passage: " * 20,
    "MEMORY_KEYWORD_INDEX": "opensearch:memories",
    "MEMORY_KEYWORD_DB_SECRET": "a database password",
    "MEMORY_KEYWORD_DB_NAME": "Bot-Memory; DROP",
    "CHAT_MODEL": "claude-haiku",
    "CHAT_MODEL_BASE_URL": "localhost:11434/v1",
    "CHAT_MODEL_API_KEY": "sk chat secret",
    "CHAT_MODEL_API_KEY_SECRET": "my chat key",
    "CHAT_MODEL_TIMEOUT_SECONDS": "0",
    "CHAT_MODEL_MAX_ATTEMPTS": "6",
    "CHAT_MODEL_MAX_OUTPUT_TOKENS": "10",
    "DISCORD_BOT_USER_ID": "@memory-bot",
    "ANSWER_RATE_WINDOW_SECONDS": "ten minutes",
    "ANSWER_RATE_PER_PERSON": "0",
    "ANSWER_RATE_PER_CHANNEL": "-20",
    "ANSWER_FUNCTION": "answer function",
    "MEMORY_NEW_FACTS_PER_PERSON": "0",
    "MEMORY_HOT_FACTS_PER_PERSON": "0",
    "MEMORY_HOT_FACT_CHARS": "lots",
    "MEMORY_FACTS_MAX_PER_PERSON": "10",  # below the hot tier's 25
    "MEMORY_SUPERSESSION": "off",
    "MEMORY_SUMMARY_MAX_CHARS": "100",
    "MEMORY_SUMMARY_MAX_TOKENS": "many",
    "MEMORY_SUMMARY_RECOMPRESS_RATIO": "1.5",
    "MEMORY_SHORT_TERM_HOURS": "0",
    "MEMORY_SHORT_TERM_PER_PERSON": "-1",
    "MEMORY_RECALL_SUMMARY_CHARS": "-5",
    "MEMORY_RECALL_SHORT_TERM_CHARS": "a thousand",
    "MEMORY_RECALL_NOTES_CHARS": "-1",
    "BOT_SYSTEM_PROMPT": "x" * 20_001,
    "BOT_SYSTEM_PROMPT_PARAMETER": "bot-prompt",
    "PERSONAS_PARAMETER": "personas",
    "DM_NOTES_PARAMETER": "dm-notes",
    "ANSWER_HISTORY_CHARS": "-1",
    "MEMORY_BLOCK_PLACEMENT": "middle",
    "ANSWER_PERSON_FACTS": "9",
}
# Their values never appear in a message: it goes to logs.
HIDDEN = {"MEMORY_MODEL_API_KEY", "EMBEDDING_MODEL_API_KEY", "CHAT_MODEL_API_KEY"}


def cold_start(environ: dict[str, str]) -> None:
    """What a handler's first call does with the environment (no table call is made)."""
    build_services(settings_from(environ), dynamodb=object())


def names(message: str, variable: str) -> bool:
    """Whether `message` names `variable` itself (MEMORY_MODEL is not MEMORY_MODEL_BASE_URL)."""
    return re.search(rf"(?<![A-Z0-9_]){variable}(?![A-Z0-9_])", message) is not None


def test_every_variable_has_a_bad_value_case() -> None:
    assert set(BAD) == set(ENVIRONMENT)


def test_the_good_base_starts() -> None:
    cold_start(BASE)


@pytest.mark.parametrize("variable", sorted(BAD))
def test_a_bad_value_fails_the_cold_start_in_one_line_naming_the_variable(variable: str) -> None:
    with pytest.raises(ConfigError) as caught:
        cold_start({**BASE, variable: BAD[variable]})

    message = str(caught.value)
    assert names(message, variable), message
    assert "\n" not in message and "\r" not in message
    assert len(message) < 400, message
    if variable in HIDDEN:
        assert BAD[variable] not in message and repr(BAD[variable]) not in message


def test_a_bad_number_shows_the_value_given() -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from({"MEMORY_CONSOLIDATE_EVERY": "abc"})

    assert str(caught.value) == (
        "invalid configuration: MEMORY_CONSOLIDATE_EVERY='abc': Input should be a valid "
        "integer, unable to parse string as an integer"
    )


def test_a_value_with_a_line_break_cannot_break_the_line() -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from({"TABLE_NAME": "Memory\nTable"})

    assert "\n" not in str(caught.value) and r"'Memory\nTable'" in str(caught.value)


def test_several_bad_values_are_all_named_on_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from({"MEMORY_MAX_BATCH": "x", "MEMORY_SEARCH_SCOPE": "all"})

    message = str(caught.value)
    assert names(message, "MEMORY_MAX_BATCH") and names(message, "MEMORY_SEARCH_SCOPE")
    assert "\n" not in message


def test_a_rule_across_variables_names_both_without_pydantic_noise() -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from({"MEMORY_CONSOLIDATE_EVERY": "40", "MEMORY_MAX_BATCH": "30"})

    assert str(caught.value) == (
        "invalid configuration: MEMORY_CONSOLIDATE_EVERY (40) must not exceed MEMORY_MAX_BATCH (30)"
    )


# --- required_env: for the variables a handler reads itself --------------------------------


def test_a_required_variable_is_returned_stripped() -> None:
    assert required_env("DISCORD_PUBLIC_KEY", {"DISCORD_PUBLIC_KEY": " ab12 \n"}) == "ab12"


@pytest.mark.parametrize("environ", [{}, {"DISCORD_PUBLIC_KEY": "   "}], ids=["unset", "blank"])
def test_a_missing_required_variable_is_one_line_naming_it(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as caught:
        required_env("DISCORD_PUBLIC_KEY", environ)

    assert str(caught.value) == "DISCORD_PUBLIC_KEY is not set"


def test_required_env_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "DiscordMemory")
    assert required_env("POWERTOOLS_METRICS_NAMESPACE") == "DiscordMemory"
    monkeypatch.delenv("POWERTOOLS_METRICS_NAMESPACE")
    with pytest.raises(ConfigError, match=r"^POWERTOOLS_METRICS_NAMESPACE is not set$"):
        required_env("POWERTOOLS_METRICS_NAMESPACE")


def test_one_config_error_type_whichever_module_it_is_imported_from() -> None:
    assert config.ConfigError is environment.ConfigError


def test_a_light_handler_can_check_its_variables_without_loading_pydantic() -> None:
    # InteractionsFunction answers PING without pydantic (tests/stack/test_interactions_cold_start.py).
    code = (
        "import sys, botmemory.settings.environment\n"
        "print(sorted(m for m in ('pydantic', 'boto3', 'botocore') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
