"""A fact's channel sets stay bounded (issue 28 item 6): a fact confirmed in more channels than
MAX_FACT_CHANNELS keeps the channels it was learned in first, and adds no more
(botmemory.memory.visibility). Through the functions template.yaml declares: messages into
IngestFunction, the table's stream into ConsolidateFunction, the worker queue into
ConsolidateWorkerFunction, a memory model on 127.0.0.1, RecallFunction to read it back.

Here the cap is lowered to CAP: a set fills one round per channel, and the rule is the same
at any size (tests/botmemory/memory/test_visibility.py fills one at the real cap)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from botmemory.memory import visibility
from botmemory.records import Fact
from localrun import gateway as gw
from tests.support.deployment import Deployment, goldfish_deployment, guild_create
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import RunningWriter, fact_writer  # noqa: F401
from tests.support.fake_providers import ScriptServer

CAP = 4
# More channels than a set holds; private, so that the fact is shown only where a set names.
CHANNELS = [f"2000000000000{n:05d}" for n in range(CAP + 3)]


@pytest.fixture
def deployed(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
    fact_writer: RunningWriter,  # noqa: F811
    tmp_path: Path,
) -> Deployment:
    monkeypatch.setattr(visibility, "MAX_FACT_CHANNELS", CAP)
    deployment = goldfish_deployment(
        monkeypatch,
        fake_discord,
        dynamodb,
        chat_server,
        fact_writer,
        tmp_path,
        MEMORY_CONSOLIDATE_EVERY="1",
    )
    deployment.say(guild_create([], CHANNELS))
    return deployment


def goldfish(deployed: Deployment) -> Fact:
    (fact,) = deployed.services().repository.all_facts(gw.GUILD, gw.ALICE)
    assert fact.text == "Alice keeps goldfish"
    return fact


def test_a_fact_confirmed_in_more_channels_than_the_cap_keeps_the_first_ones(
    deployed: Deployment,
) -> None:
    # Alice says it in each channel in turn: each channel's round on the worker queue, in order.
    deployed.say(*(deployed.message(gw.ALICE, "I keep goldfish at home", c) for c in CHANNELS))

    fact = goldfish(deployed)
    assert fact.hits == len(CHANNELS)  # every round confirmed it
    assert sorted(fact.learned_in) == CHANNELS[:CAP]  # the first ones, no more
    assert fact.learned_in_public == []  # never a channel the other set left out
    # Shown where it was first learned, and not where it was confirmed past the cap.
    first = deployed.recall(CHANNELS[0], gw.BOB, participants=[gw.ALICE])
    assert "Alice keeps goldfish" in first["memory"]
    last = deployed.recall(CHANNELS[-1], gw.BOB, participants=[gw.ALICE])
    assert "goldfish" not in last["memory"]
