"""A deployment of the template's functions on the test's in-process AWS, for tests that
follow a conversation through them: the relay's events into IngestFunction, the table's
stream into ConsolidateFunction (through its template filter), the answers ingest starts
into AnswerFunction (a chat model on 127.0.0.1), RecallFunction; and a clock the test moves
(every function's SystemClock reads it)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from botmemory.answering.requests import register_local_target
from botmemory.clock import ManualClock, SystemClock
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from localrun import gateway as gw
from localrun.samtemplate import passes_filters
from tests.conftest import TABLE
from tests.stack.test_sam_local import stream_records
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest
from tests.support.fake_memory_model import RunningWriter, Teaching
from tests.support.fake_providers import Scripted, ScriptServer
from tests.support.lambda_local import LocalLambda, sample_env

ANSWER = "AnswerFunction"
CONSOLIDATE = "ConsolidateFunction"
VIEW_CHANNEL = 1 << 10


def chat_reply(text: str) -> Scripted:
    """An OpenAI-compatible chat answer with this text."""
    message = {"role": "assistant", "content": text}
    return Scripted(200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


def guild_create(public: list[str], private: list[str]) -> dict[str, Any]:
    hidden = {"id": gw.GUILD, "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)}
    return {
        "t": "GUILD_CREATE",
        "d": {
            "id": gw.GUILD,
            "owner_id": "300000000000000999",
            "roles": [{"id": gw.GUILD, "permissions": str(VIEW_CHANNEL)}],
            "channels": [{"id": c, "type": 0} for c in public]
            + [{"id": c, "type": 0, "permission_overwrites": [hidden]} for c in private],
        },
    }


class Deployment:
    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        discord: FakeDiscordRest,
        dynamodb: Any,
        chat: ScriptServer,
        index_path: Path,
        environment: dict[str, dict[str, str]] | None = None,
    ) -> None:
        env = sample_env()
        for function, variables in env.items():
            if function != "Parameters":
                variables["MEMORY_SEARCH_INDEX"] = f"sqlite:{index_path}"
                variables["DISCORD_BOT_USER_ID"] = gw.BOT
        env[ANSWER].update(
            DISCORD_API_BASE=discord.url,
            DISCORD_BOT_TOKEN=BOT_TOKEN,
            CHAT_MODEL="openai:gpt-test",
            CHAT_MODEL_BASE_URL=chat.base_url,
            CHAT_MODEL_API_KEY="sk-test-chat",
            CHAT_MODEL_API_KEY_SECRET="",
        )
        for function, variables in (environment or {}).items():
            env.setdefault(function, {}).update(variables)
        self.local = LocalLambda(monkeypatch, env)
        self.discord = discord
        self.dynamodb = dynamodb
        self.chat = chat
        self.seen: set[str] = set()
        self.answers: list[dict[str, Any]] = []
        self.reports: list[dict[str, Any]] = []
        register_local_target(ANSWER, self.answers.append)
        # Every function's system clock: the real time, moved on by `later`.
        self.clock = ManualClock(int(time.time() * 1000))
        clock = self.clock
        monkeypatch.setattr(SystemClock, "now_ms", lambda _self: clock.now_ms())
        self.at = self.clock.now_ms() - 60_000

    def later(self, *, minutes: float) -> None:
        self.clock.advance(seconds=minutes * 60)
        self.at = max(self.at, self.clock.now_ms() - 60_000)

    def say(self, *events: dict[str, Any]) -> None:
        """Ingest, deliver the stream to ConsolidateFunction, run the answers started, then
        deliver what they stored (the answers' own observations) too."""
        self.local.invoke("IngestFunction", {"events": list(events)})
        self.flush()
        while self.answers:
            self.reports.append(self.local.invoke(ANSWER, self.answers.pop(0)))
            self.flush()

    def flush(self) -> int:
        """Deliver the stream records not delivered yet; how many passed the filter."""
        stream_arn = self.dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        records = stream_records(self.dynamodb, stream_arn, self.seen)
        self.seen |= {r["dynamodb"]["SequenceNumber"] for r in records}
        filters = self.local.template.stream_filters(CONSOLIDATE)
        delivered = [r for r in records if passes_filters(filters, r)]
        if delivered:
            failures = self.local.invoke(CONSOLIDATE, {"Records": delivered})
            assert failures == {"batchItemFailures": []}
        return len(delivered)

    def message(self, author: str, text: str, channel: str, **kwargs: Any) -> dict[str, Any]:
        self.at += 1000
        return gw.message(author, text, self.at, channel=channel, guild=gw.GUILD, **kwargs)

    def mention(self, author: str, text: str, channel: str) -> dict[str, Any]:
        event = self.message(author, f"<@{gw.BOT}> {text}", channel)
        event["d"]["mentions"] = [gw.user(gw.BOT, bot=True)]
        return event

    def ask(self, author: str, text: str, channel: str, answer: str) -> dict[str, Any]:
        """A member asks the bot; the chat model answers `answer`. The question's event."""
        self.chat.script.append(chat_reply(answer))
        event = self.mention(author, text, channel)
        self.say(event)
        return event

    def recall(self, channel: str, user: str, **fields: Any) -> dict[str, Any]:
        request = {"channel_id": channel, "user_id": user, "guild_id": gw.GUILD, **fields}
        answer: dict[str, Any] = self.local.invoke("RecallFunction", request)
        return answer

    def prompts(self) -> list[str]:
        """The system prompts the chat model was sent, in order."""
        return [
            json.dumps(r.body["messages"][0]["content"])
            if not isinstance(r.body["messages"][0]["content"], str)
            else r.body["messages"][0]["content"]
            for r in self.chat.requests
        ]

    def posted(self, channel: str) -> list[str]:
        """What the bot posted in a channel, oldest first."""
        return [
            str(r.body.get("content", ""))
            for r in self.discord.requests_matching("POST", f"/channels/{channel}/messages")
        ]

    def services(self, **settings: Any) -> MemoryServices:
        """The memory services on the same table, to read what the functions stored."""
        return build_services(
            Settings(table_name=TABLE, memory_model="rules", **settings),
            dynamodb=self.dynamodb,
            clock=self.clock,
        )


def goldfish_deployment(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
    fact_writer: RunningWriter,
    tmp_path: Path,
    **consolidate_env: str,
) -> Deployment:
    """A deployment whose memory model (the fact writer on 127.0.0.1) learns "{name} keeps
    goldfish" from any message naming goldfish; `consolidate_env` adds to
    ConsolidateFunction's environment (MEMORY_CONSOLIDATE_EVERY, ...)."""
    fact_writer.writer.teachings = [Teaching("goldfish", "{name} keeps goldfish")]
    return Deployment(
        monkeypatch,
        fake_discord,
        dynamodb,
        chat_server,
        tmp_path / "index.db",
        {"ConsolidateFunction": {**fact_writer.environment(), **consolidate_env}},
    )
