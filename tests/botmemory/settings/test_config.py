"""Settings come from the environment once, with documented defaults and clear errors."""

from __future__ import annotations

import pytest

from botmemory.answering.chat import build_chat_model
from botmemory.consolidation.model import build_memory_model
from botmemory.consolidation.model.bedrock import BedrockModel
from botmemory.consolidation.model.openai_compat import OpenAICompatibleModel
from botmemory.consolidation.model.rules import RulesModel
from botmemory.settings.config import (
    ENVIRONMENT,
    ConfigError,
    ModelSpec,
    Settings,
    parse_model_spec,
    settings_from,
)


def test_defaults_are_the_documented_ones_and_memory_is_off() -> None:
    settings = settings_from({})

    assert settings.memory_enabled is False
    assert (
        settings.consolidate_every,
        settings.episodes_per_channel,
        settings.fact_retention_days,
    ) == (20, 10, 180)
    assert build_memory_model(settings) is None


def test_a_failing_batch_is_split_after_three_attempts_and_backs_off_15_to_120_minutes() -> None:
    settings = settings_from({})

    assert (
        settings.batch_max_attempts,
        settings.retry_backoff_minutes,
        settings.retry_backoff_max_minutes,
    ) == (3, 15, 120)
    tuned = settings_from(
        {
            "MEMORY_BATCH_MAX_ATTEMPTS": "2",
            "MEMORY_RETRY_BACKOFF_MINUTES": "5",
            "MEMORY_RETRY_BACKOFF_MAX_MINUTES": "60",
        }
    )
    assert (tuned.batch_max_attempts, tuned.retry_backoff_minutes) == (2, 5)
    assert tuned.retry_backoff_max_minutes == 60


def test_every_variable_is_read() -> None:
    values = {
        "TABLE_NAME": "T",
        "MEMORY_MODEL": "rules",
        "MEMORY_CONSOLIDATE_EVERY": "7",
        "MEMORY_MAX_BATCH": "30",
        "MEMORY_EPISODES_PER_CHANNEL": "4",
        "MEMORY_FACT_RETENTION_DAYS": "9",
        "MEMORY_RECALL_FACTS_PER_PERSON": "2",
        "DISCORD_BOT_USER_ID": "42",
        "MEMORY_MODEL_API_KEY": "  ",  # blank means unset
    }

    settings = settings_from(values)

    assert settings.table_name == "T" and settings.memory_enabled
    assert (settings.consolidate_every, settings.max_batch, settings.episodes_per_channel) == (
        7,
        30,
        4,
    )
    assert (settings.fact_retention_days, settings.recall_facts_per_person) == (9, 2)
    assert settings.bot_user_id == "42" and settings.model_api_key is None
    assert set(ENVIRONMENT.values()) <= set(Settings.model_fields)


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"MEMORY_CONSOLIDATE_EVERY": "many"}, "MEMORY_CONSOLIDATE_EVERY"),
        ({"MEMORY_MAX_BATCH": "500"}, "MEMORY_MAX_BATCH"),
        ({"MEMORY_CONSOLIDATE_EVERY": "40", "MEMORY_MAX_BATCH": "30"}, "must not exceed"),
        ({"MEMORY_BATCH_MAX_ATTEMPTS": "0"}, "MEMORY_BATCH_MAX_ATTEMPTS"),
        (
            {"MEMORY_RETRY_BACKOFF_MINUTES": "60", "MEMORY_RETRY_BACKOFF_MAX_MINUTES": "30"},
            "must not be below",
        ),
    ],
)
def test_a_bad_value_is_a_config_error_naming_the_variable(
    values: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        settings_from(values)


def test_the_model_is_chosen_by_memory_model() -> None:
    assert isinstance(build_memory_model(settings_from({"MEMORY_MODEL": "rules"})), RulesModel)
    bedrock = build_memory_model(
        settings_from({"MEMORY_MODEL": "bedrock:anthropic.claude-3-haiku"})
    )
    assert isinstance(bedrock, BedrockModel) and bedrock.name == "bedrock:anthropic.claude-3-haiku"
    openai = build_memory_model(
        settings_from(
            {"MEMORY_MODEL": "openai:gpt-4o-mini", "MEMORY_MODEL_BASE_URL": "http://127.0.0.1:9/v1"}
        )
    )
    assert isinstance(openai, OpenAICompatibleModel) and openai.name == "openai:gpt-4o-mini"
    with pytest.raises(ConfigError, match="MEMORY_MODEL"):
        build_memory_model(settings_from({"MEMORY_MODEL": "gpt4"}))


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("rules", ModelSpec("rules", "")),
        ("rules:", ModelSpec("rules", "")),
        ("bedrock:anthropic.claude-3-haiku", ModelSpec("bedrock", "anthropic.claude-3-haiku")),
        ("openai:gpt-4o-mini", ModelSpec("openai", "gpt-4o-mini")),
        ("openai:org/model:tag", ModelSpec("openai", "org/model:tag")),
    ],
)
def test_a_model_spec_is_its_provider_and_name(spec: str, parsed: ModelSpec) -> None:
    assert parse_model_spec("MEMORY_MODEL", spec) == parsed


@pytest.mark.parametrize("spec", ["gpt4", "rules:x", "bedrock", "bedrock:", "openai:", ":gpt"])
def test_any_other_model_spec_is_refused_by_both_factories_naming_the_variable(spec: str) -> None:
    forms = "is not one of 'rules', 'bedrock:<model id>', 'openai:<model>'"
    # Settings refuse a bad CHAT_MODEL already; the factory guards one built without checks.
    unchecked = settings_from({}).model_copy(update={"memory_model": spec, "chat_model": spec})

    with pytest.raises(ConfigError) as memory:
        build_memory_model(unchecked)
    with pytest.raises(ConfigError) as chat:
        build_chat_model(unchecked)

    assert str(memory.value) == f"MEMORY_MODEL={spec!r} {forms}"
    assert str(chat.value) == f"CHAT_MODEL={spec!r} {forms}"
