"""The deployment's notes for direct messages, from their SSM parameter (moto): String or
SecureString, through Powertools Parameters and its cache; a missing one is logged and none."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters

from botmemory.memory.notes import parameter_source
from botmemory.settings.config import Settings
from tests.conftest import TABLE

NAME = "/discord-memory/dm-notes"


@pytest.fixture
def ssm(dynamodb: Any) -> Iterator[Any]:
    """moto's SSM (the dynamodb fixture runs every AWS service in process), Powertools'
    cache empty before and after."""
    parameters.clear_caches()
    yield boto3.client("ssm", region_name="us-east-1")
    parameters.clear_caches()


def settings(name: str | None = NAME) -> Settings:
    return Settings(table_name=TABLE, memory_model="rules", dm_notes_parameter=name)


def test_a_string_parameter_is_read(ssm: Any) -> None:
    ssm.put_parameter(Name=NAME, Value="Say hi from the ops team.", Type="String")

    assert parameter_source(settings())() == "Say hi from the ops team."


def test_a_secure_string_is_read_decrypted(ssm: Any) -> None:
    ssm.put_parameter(Name=NAME, Value="Private ops guidance.", Type="SecureString")

    assert parameter_source(settings())() == "Private ops guidance."


def test_it_is_read_through_powertools_cache(ssm: Any) -> None:
    ssm.put_parameter(Name=NAME, Value="first", Type="String")
    source = parameter_source(settings())
    assert source() == "first"
    ssm.put_parameter(Name=NAME, Value="second", Type="String", Overwrite=True)

    # Within the cache's five minutes, the value read before: one SSM call per sandbox.
    assert source() == "first"
    parameters.clear_caches()
    assert source() == "second"


def test_a_missing_parameter_is_logged_and_none(ssm: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="botmemory.memory.notes")

    assert parameter_source(settings("/not/there"))() is None
    assert [r.getMessage() for r in caplog.records] == ["dm notes not read"]


def test_unset_reads_nothing(ssm: Any) -> None:
    assert parameter_source(settings(None))() is None


def test_the_setting_must_name_a_parameter() -> None:
    with pytest.raises(ValueError):
        settings("dm-notes")  # a parameter name starts with "/"
