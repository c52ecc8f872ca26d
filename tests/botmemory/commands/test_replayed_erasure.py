"""An erasure replayed from InteractionsFailureQueue (docs/operations.md, "Replaying a
failure queue"), through InteractionsFunction's handler as the runbook's
`aws lambda invoke --invocation-type Event` delivers it: the queued `requestPayload`.

The interaction's token lasts 15 minutes. A replay after that still erases everything, and
the follow-up is skipped and logged: nothing is sent for Discord to refuse.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from botmemory.clock import SystemClock
from botmemory.commands.member import ERASE_FAILED
from botmemory.discord import followup
from botmemory.discord.followup import TOKEN_LIFETIME_MS
from botmemory.discord.interactions import InteractionType
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.snowflake import DISCORD_EPOCH_MS
from scripts.make_events import ALICE, BOT, CHANNEL, GUILD
from tests.conftest import TABLE
from tests.support.facts import a_fact
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.lambda_local import LocalLambda, sample_env


def interaction_id(at_ms: int) -> str:
    """A snowflake made at `at_ms`, as Discord's interaction ids are."""
    return str((at_ms - DISCORD_EPOCH_MS) << 22)


def queued_payload(age_ms: int) -> dict[str, Any]:
    """What InteractionsFailureQueue holds as `requestPayload`: the deferred erasure job
    of an interaction made `age_ms` ago."""
    made = SystemClock().now_ms() - age_ms
    ident = interaction_id(made)
    return {
        "deferred": {
            "work": "erase",
            "failed": ERASE_FAILED,
            "interaction": {
                "id": ident,
                "token": f"token-{ident}",
                "application_id": BOT,
                "type": InteractionType.MESSAGE_COMPONENT,
                "guild_id": GUILD,
                "channel_id": CHANNEL,
                "member": {"user": {"id": ALICE, "global_name": "Alice"}, "permissions": "0"},
                "data": {},
            },
        }
    }


def services_on(dynamodb: Any) -> MemoryServices:
    return build_services(
        Settings(table_name=TABLE, memory_model="rules"), dynamodb=dynamodb, clock=SystemClock()
    )


def replay(monkeypatch: pytest.MonkeyPatch, fake: FakeDiscordRest, payload: dict[str, Any]) -> Any:
    env = sample_env()
    env["InteractionsFunction"].update(DISCORD_API_BASE=fake.url)
    # The runbook's `--payload fileb://payload.json`: the queued JSON, as bytes, as the event.
    return LocalLambda(monkeypatch, env).invoke(
        "InteractionsFunction", json.loads(json.dumps(payload))
    )


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_an_erasure_replayed_after_its_token_expired_erases_and_skips_the_follow_up(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, fake_discord: FakeDiscordRest
) -> None:
    services = services_on(dynamodb)
    services.repository.put_fact(
        a_fact(ALICE, "Keeps bees", scope=GUILD, at_ms=SystemClock().now_ms())
    )
    two_hours = 8 * TOKEN_LIFETIME_MS
    kept = Kept()
    # A logging configuration elsewhere in the suite may have disabled the loggers it found.
    monkeypatch.setattr(followup.log, "disabled", False)
    followup.log.addHandler(kept)
    try:
        result = replay(monkeypatch, fake_discord, queued_payload(two_hours))
    finally:
        followup.log.removeHandler(kept)

    assert result == {"finished": "erase"}
    assert services.repository.items_of_user(ALICE) == []
    assert fake_discord.requests == []  # nothing sent for Discord to refuse
    skipped = [r for r in kept.records if "follow-up skipped" in r.getMessage()]
    assert len(skipped) == 1 and skipped[0].__dict__["work"] == "erase"


def test_an_erasure_replayed_within_its_token_tells_the_person(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, fake_discord: FakeDiscordRest
) -> None:
    services = services_on(dynamodb)
    services.repository.put_fact(
        a_fact(ALICE, "Keeps bees", scope=GUILD, at_ms=SystemClock().now_ms())
    )
    payload = queued_payload(60_000)
    token = payload["deferred"]["interaction"]["token"]

    replay(monkeypatch, fake_discord, payload)

    assert services.repository.items_of_user(ALICE) == []
    told = fake_discord.wait_for(lambda r: r.method == "PATCH" and token in r.path, timeout=10)
    assert told.body["content"].startswith("Done. I erased everything I kept about you")
