"""Short-term entries that say what happened, through the functions template.yaml declares:
a member asks the bot in #dev (IngestFunction, AnswerFunction with a chat model on
127.0.0.1), and ten minutes of clock later asks in #general: the answer prompt the chat
model receives holds the #dev line. Never from a private channel; a deleted source message
hides the line; a round whose memory model (on 127.0.0.1, through ConsolidateFunction fed
by the stream) writes an empty line writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from botmemory.recall.block import ELSEWHERE_HEADING
from botmemory.storage.repository import MemoryRepository
from localrun import gateway as gw
from tests.botmemory.memory.test_short_term import entries
from tests.support.deployment import Deployment, guild_create
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import RunningWriter, fact_writer  # noqa: F401
from tests.support.fake_providers import ScriptServer

DEV = "200000000000000801"
GENERAL = "200000000000000802"
PRIVATE = "200000000000000803"
QUESTION = "help me debug the auth middleware test"
ANSWERED = "Start with the token check in conftest.py."


@pytest.fixture
def deployed(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
    fact_writer: RunningWriter,  # noqa: F811
    tmp_path: Path,
) -> Deployment:
    deployment = Deployment(
        monkeypatch,
        fake_discord,
        dynamodb,
        chat_server,
        tmp_path / "index.db",
        {"ConsolidateFunction": {**fact_writer.environment(), "MEMORY_CONSOLIDATE_EVERY": "2"}},
    )
    deployment.say(guild_create([DEV, GENERAL], [PRIVATE]))
    return deployment


def elsewhere_section(prompt: str) -> str:
    sections = [s for s in prompt.split("\n\n") if s.startswith(ELSEWHERE_HEADING)]
    return sections[0] if sections else ""


def test_asked_in_dev_is_known_in_general_ten_minutes_later(deployed: Deployment) -> None:
    deployed.ask(gw.ALICE, QUESTION, DEV, ANSWERED)
    deployed.later(minutes=10)

    deployed.ask(gw.ALICE, "what was I doing again?", GENERAL, "Debugging auth.")

    in_dev, in_general = deployed.prompts()
    section = elsewhere_section(in_general)
    assert f"<#{DEV}>" in section and '"Alice"' in section
    assert f"asked the bot: {QUESTION} — it answered: {ANSWERED}" in section
    assert elsewhere_section(in_dev) == ""
    # Not in #dev itself: the entry is only for the server's other channels.
    deployed.ask(gw.ALICE, "and here?", DEV, "Yes.")
    assert elsewhere_section(deployed.prompts()[-1]).count(f"<#{DEV}>") == 0


def test_a_private_channel_s_exchange_never_crosses(deployed: Deployment, dynamodb: Any) -> None:
    deployed.ask(gw.ALICE, "help me word my resignation letter", PRIVATE, "Sure: keep it short.")
    deployed.later(minutes=10)

    deployed.ask(gw.ALICE, "anything new?", GENERAL, "Not much.")

    assert "resignation" not in deployed.prompts()[-1]
    assert [e for e in entries(dynamodb) if e.channel_id == PRIVATE] == []


def test_a_deleted_question_hides_the_line(deployed: Deployment) -> None:
    question = deployed.ask(gw.ALICE, QUESTION, DEV, ANSWERED)
    deployed.say(gw.delete(question))
    deployed.later(minutes=10)

    deployed.ask(gw.ALICE, "what was I doing again?", GENERAL, "No idea.")

    assert QUESTION not in deployed.prompts()[-1]
    assert elsewhere_section(deployed.prompts()[-1]) == ""


def test_a_round_s_empty_line_writes_nothing_and_a_line_is_shown(
    deployed: Deployment,
    fact_writer: RunningWriter,  # noqa: F811
    dynamodb: Any,
) -> None:
    fact_writer.writer.recent_line = ""
    deployed.say(
        deployed.message(gw.ALICE, "the release branch is frozen", DEV),
        deployed.message(gw.BOB, "ok", DEV),
    )
    assert len(fact_writer.writer.batches) == 1  # the round ran
    assert entries(dynamodb) == []

    fact_writer.writer.recent_line = "froze the release branch"
    deployed.say(
        deployed.message(gw.ALICE, "and tagged it", DEV),
        deployed.message(gw.BOB, "thanks", DEV),
    )
    deployed.later(minutes=10)
    shown = deployed.recall(GENERAL, gw.ALICE)

    assert len(fact_writer.writer.batches) == 2
    assert [(e["user_id"], e["summary"]) for e in shown["elsewhere"]] == [
        (gw.ALICE, "froze the release branch")
    ]


def test_a_failure_writing_the_entry_is_logged_and_the_answer_stands(
    deployed: Deployment, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*_: Any, **__: Any) -> bool:
        raise RuntimeError("table unavailable")

    monkeypatch.setattr(MemoryRepository, "record_short_term", refuse)

    deployed.ask(gw.ALICE, QUESTION, DEV, ANSWERED)

    (report,) = deployed.reports
    assert report["status"] == "answered" and report["posted"] == 1
    assert any(ANSWERED in text for text in deployed.posted(DEV))
    assert "short-term entry of an answer not written" in caplog.text
