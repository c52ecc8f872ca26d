"""DiscordApi against the fake Discord on 127.0.0.1: paths, auth, retries, errors, tokens."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parameters.base import DEFAULT_PROVIDERS
from moto import mock_aws

from botmemory.discord.errors import DiscordApiError, DiscordConfigError
from botmemory.discord.interactions import ApplicationCommandType
from botmemory.discord.rest import (
    DEFAULT_API_BASE,
    DiscordApi,
    api_base_from_environment,
    bot_token_from_environment,
)
from tests.support.fake_discord import (  # noqa: F401
    APPLICATION_ID,
    BOT_TOKEN,
    FakeDiscordRest,
    fake_discord_fixture,
)

INTERACTION_TOKEN = "aW50ZXJhY3Rpb246OTk5OmZha2UtdG9rZW4tdmFsdWU"
GUILD = "100000000000000001"


class SleepRecorder:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def api(fake_discord: FakeDiscordRest, sleeps: SleepRecorder) -> Iterator[DiscordApi]:
    with DiscordApi(BOT_TOKEN, base_url=fake_discord.url, sleep=sleeps) as client:
        yield client


COMMAND: dict[str, Any] = {
    "name": "ping",
    "type": ApplicationCommandType.CHAT_INPUT,
    "description": "Check the bot answers",
}


# -- application commands -------------------------------------------------------------------


def test_bulk_overwrite_puts_to_global_path_with_bot_auth(
    api: DiscordApi, fake_discord: FakeDiscordRest
) -> None:
    answer = api.bulk_overwrite_commands(APPLICATION_ID, [COMMAND])

    [request] = fake_discord.requests
    assert (request.method, request.path) == ("PUT", f"/applications/{APPLICATION_ID}/commands")
    assert request.authorization == f"Bot {BOT_TOKEN}"
    assert request.body == [COMMAND]
    assert request.headers["user-agent"].startswith("DiscordBot (")
    assert [c["name"] for c in answer] == ["ping"]
    assert answer[0]["id"]


def test_list_commands_reads_back_the_guild_commands(
    api: DiscordApi, fake_discord: FakeDiscordRest
) -> None:
    assert api.list_commands(APPLICATION_ID, GUILD) == []
    stored = api.bulk_overwrite_commands(APPLICATION_ID, [COMMAND], GUILD)

    assert api.list_commands(APPLICATION_ID, GUILD) == stored
    assert api.list_commands(APPLICATION_ID) == []  # global commands are a separate set
    paths = {r.path for r in fake_discord.requests}
    assert paths == {
        f"/applications/{APPLICATION_ID}/guilds/{GUILD}/commands",
        f"/applications/{APPLICATION_ID}/commands",
    }


def test_bot_routes_need_a_token(fake_discord: FakeDiscordRest) -> None:
    with (
        DiscordApi(None, base_url=fake_discord.url) as anonymous,
        pytest.raises(DiscordConfigError, match="bot token"),
    ):
        anonymous.list_commands(APPLICATION_ID)
    assert fake_discord.requests == []


@pytest.mark.parametrize("bad", ["", "12ab", "1/../../users/@me", "123 456"])
def test_ids_must_be_snowflakes(api: DiscordApi, fake_discord: FakeDiscordRest, bad: str) -> None:
    with pytest.raises(ValueError, match="snowflake"):
        api.list_commands(bad)
    with pytest.raises(ValueError, match="snowflake"):
        api.list_commands(APPLICATION_ID, bad)
    assert fake_discord.requests == []


# -- interaction webhook --------------------------------------------------------------------


def test_edit_original_response_patches_the_webhook_without_bot_token(
    api: DiscordApi, fake_discord: FakeDiscordRest
) -> None:
    body = {
        "content": "I remember: <@300000000000000002> likes tea @everyone",
        "allowed_mentions": {"parse": ["users", "everyone"], "users": ["300000000000000002"]},
    }
    message = api.edit_original_response(APPLICATION_ID, INTERACTION_TOKEN, body)

    [request] = fake_discord.requests
    assert request.method == "PATCH"
    assert request.path == f"/webhooks/{APPLICATION_ID}/{INTERACTION_TOKEN}/messages/@original"
    assert request.authorization is None
    assert request.body == {"content": body["content"], "allowed_mentions": {"parse": []}}
    # The caller's dict is left as it was.
    assert body["allowed_mentions"] == {
        "parse": ["users", "everyone"],
        "users": ["300000000000000002"],
    }
    assert message["content"] == body["content"]
    assert fake_discord.messages[(APPLICATION_ID, INTERACTION_TOKEN)]["allowed_mentions"] == {
        "parse": []
    }


def test_edit_original_response_adds_allowed_mentions_when_missing(
    fake_discord: FakeDiscordRest,
) -> None:
    # A client built without any bot token can still finish deferred answers.
    with DiscordApi(base_url=fake_discord.url) as webhook_only:
        webhook_only.edit_original_response(APPLICATION_ID, INTERACTION_TOKEN, {"content": "ok"})
    assert fake_discord.requests[0].body == {"content": "ok", "allowed_mentions": {"parse": []}}


def test_unknown_webhook_error_never_shows_the_interaction_token(
    api: DiscordApi, fake_discord: FakeDiscordRest
) -> None:
    fake_discord.script(404, {"message": "Unknown Webhook", "code": 10015})

    with pytest.raises(DiscordApiError) as caught:
        api.edit_original_response(APPLICATION_ID, INTERACTION_TOKEN, {"content": "late"})

    error = caught.value
    assert (error.status, error.code) == (404, 10015)
    assert "Unknown Webhook" in str(error)
    assert "<interaction token>" in str(error)
    assert INTERACTION_TOKEN not in str(error)
    assert INTERACTION_TOKEN not in repr(error)
    assert len(fake_discord.requests) == 1


# -- retries --------------------------------------------------------------------------------


def test_429_then_success_waits_as_the_body_says(
    api: DiscordApi, fake_discord: FakeDiscordRest, sleeps: SleepRecorder
) -> None:
    # The header says "1" (whole seconds); the body's retry_after is the precise value.
    fake_discord.rate_limit_once(retry_after=0.37)

    answer = api.bulk_overwrite_commands(APPLICATION_ID, [COMMAND])

    assert sleeps.calls == [0.37]
    assert [r.method for r in fake_discord.requests] == ["PUT", "PUT"]
    assert [c["name"] for c in answer] == ["ping"]


def test_429_without_body_uses_the_retry_after_header(
    api: DiscordApi, fake_discord: FakeDiscordRest, sleeps: SleepRecorder
) -> None:
    fake_discord.script(429, None, {"Retry-After": "2"})

    api.list_commands(APPLICATION_ID)

    assert sleeps.calls == [2.0]
    assert len(fake_discord.requests) == 2


def test_429_asking_for_longer_than_the_cap_fails_at_once(
    fake_discord: FakeDiscordRest, sleeps: SleepRecorder
) -> None:
    fake_discord.rate_limit_once(retry_after=120.0)

    with (
        DiscordApi(BOT_TOKEN, base_url=fake_discord.url, sleep=sleeps, max_retry_wait=5) as api,
        pytest.raises(DiscordApiError) as caught,
    ):
        api.list_commands(APPLICATION_ID)

    assert caught.value.status == 429
    assert caught.value.retry_after == 120.0
    assert "rate limited" in str(caught.value)
    assert sleeps.calls == []
    assert len(fake_discord.requests) == 1


def test_5xx_is_retried_with_backoff(
    api: DiscordApi, fake_discord: FakeDiscordRest, sleeps: SleepRecorder
) -> None:
    fake_discord.fail_once(500)
    fake_discord.fail_once(502)

    api.list_commands(APPLICATION_ID)

    assert len(fake_discord.requests) == 3
    assert len(sleeps.calls) == 2
    assert 0 < sleeps.calls[0] < sleeps.calls[1] <= 8.25


def test_5xx_gives_up_after_max_attempts(
    fake_discord: FakeDiscordRest, sleeps: SleepRecorder
) -> None:
    fake_discord.script(503, {"message": "upstream connect error", "code": 0}, times=10)

    with (
        DiscordApi(BOT_TOKEN, base_url=fake_discord.url, sleep=sleeps, max_attempts=3) as api,
        pytest.raises(DiscordApiError) as caught,
    ):
        api.list_commands(APPLICATION_ID)

    assert caught.value.status == 503
    assert len(fake_discord.requests) == 3
    assert len(sleeps.calls) == 2


def test_unreachable_discord_is_an_api_error_after_bounded_attempts(
    sleeps: SleepRecorder,
) -> None:
    # A port nobody listens on: connection refused, every attempt.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (
        DiscordApi(
            BOT_TOKEN, base_url=f"http://127.0.0.1:{port}/api/v10", sleep=sleeps, max_attempts=2
        ) as api,
        pytest.raises(DiscordApiError) as caught,
    ):
        api.edit_original_response(APPLICATION_ID, INTERACTION_TOKEN, {"content": "x"})

    assert caught.value.status is None
    assert "2 attempts" in str(caught.value)
    assert INTERACTION_TOKEN not in str(caught.value)
    assert BOT_TOKEN not in str(caught.value)
    assert len(sleeps.calls) == 1


# -- errors ---------------------------------------------------------------------------------


def test_403_raises_with_discords_message_and_no_token(
    api: DiscordApi, fake_discord: FakeDiscordRest, sleeps: SleepRecorder
) -> None:
    fake_discord.script(403, {"message": "Missing Access", "code": 50001})

    with pytest.raises(DiscordApiError) as caught:
        api.bulk_overwrite_commands(APPLICATION_ID, [COMMAND], GUILD)

    error = caught.value
    assert (error.status, error.code, error.message) == (403, 50001, "Missing Access")
    assert "Missing Access" in str(error) and "50001" in str(error)
    assert f"PUT /applications/{APPLICATION_ID}/guilds/{GUILD}/commands" in str(error)
    for text in (str(error), repr(error), repr(api)):
        assert BOT_TOKEN not in text
    assert sleeps.calls == []  # a 4xx other than 429 is never repeated
    assert len(fake_discord.requests) == 1


def test_wrong_token_is_a_401_error(fake_discord: FakeDiscordRest) -> None:
    with (
        DiscordApi("not-the-token", base_url=fake_discord.url) as api,
        pytest.raises(DiscordApiError) as caught,
    ):
        api.list_commands(APPLICATION_ID)
    assert caught.value.status == 401
    assert "not-the-token" not in str(caught.value)


def test_invalid_form_body_lists_the_field_errors(api: DiscordApi) -> None:
    bad = {"name": "Bad Name!", "type": ApplicationCommandType.CHAT_INPUT, "description": "x"}
    with pytest.raises(DiscordApiError) as caught:
        api.bulk_overwrite_commands(APPLICATION_ID, [COMMAND, bad])

    error = caught.value
    assert (error.status, error.code) == (400, 50035)
    assert error.field_errors == ("1.name: Invalid name",)
    assert "Invalid Form Body" in str(error) and "1.name: Invalid name" in str(error)


def test_non_json_error_body_still_reads_clearly(
    api: DiscordApi, fake_discord: FakeDiscordRest
) -> None:
    fake_discord.script(400, "plain text from a proxy")
    with pytest.raises(DiscordApiError, match="Bad Request"):
        api.list_commands(APPLICATION_ID)


# -- configuration --------------------------------------------------------------------------


def test_api_base_from_environment() -> None:
    assert api_base_from_environment({}) == DEFAULT_API_BASE
    assert api_base_from_environment({"DISCORD_API_BASE": "  "}) == DEFAULT_API_BASE
    assert api_base_from_environment({"DISCORD_API_BASE": "http://127.0.0.1:9/api/v10"}) == (
        "http://127.0.0.1:9/api/v10"
    )


def test_bot_token_from_the_environment_variable() -> None:
    assert bot_token_from_environment({"DISCORD_BOT_TOKEN": " abc.def "}) == "abc.def"


def test_bot_token_missing_everywhere_is_a_clear_config_error() -> None:
    with pytest.raises(DiscordConfigError) as caught:
        bot_token_from_environment({"DISCORD_BOT_TOKEN": "  "})
    assert "DISCORD_BOT_TOKEN" in str(caught.value)
    assert "DISCORD_BOT_TOKEN_SECRET" in str(caught.value)


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # A fresh Powertools provider per test: its client must be created inside moto, and
    # its cache must not carry values from one test to the next.
    monkeypatch.delitem(DEFAULT_PROVIDERS, "secrets", raising=False)
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")


@pytest.mark.parametrize(
    "stored", ["plain.bot.token", '{"token": "plain.bot.token"}', "  plain.bot.token\n"]
)
def test_bot_token_from_secrets_manager(secrets: Any, stored: str) -> None:
    secrets.create_secret(Name="discord-memory/bot-token", SecretString=stored)
    env = {"DISCORD_BOT_TOKEN": "", "DISCORD_BOT_TOKEN_SECRET": "discord-memory/bot-token"}
    assert bot_token_from_environment(env) == "plain.bot.token"


def test_unreadable_secret_is_a_config_error_naming_the_secret(secrets: Any) -> None:
    with pytest.raises(DiscordConfigError, match="discord-memory/absent"):
        bot_token_from_environment({"DISCORD_BOT_TOKEN_SECRET": "discord-memory/absent"})


def test_empty_secret_is_a_config_error(secrets: Any) -> None:
    secrets.create_secret(Name="discord-memory/empty", SecretString="  \n")
    with pytest.raises(DiscordConfigError, match="holds no bot token"):
        bot_token_from_environment({"DISCORD_BOT_TOKEN_SECRET": "discord-memory/empty"})
