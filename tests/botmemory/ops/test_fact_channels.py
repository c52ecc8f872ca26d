"""Facts stored before facts kept their channels: `python -m botmemory.ops.fact_channels` gives
them the channels of their evidence while it is in the table; until then, and when it is
gone, they are shown nowhere but in the listings."""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.ops import fact_channels
from botmemory.recall.contract import parse_request
from botmemory.records import Observation
from botmemory.services import MemoryServices
from botmemory.storage import keys
from botmemory.storage.items import fact_values, observation_values, to_item
from localrun import gateway as gw
from tests.conftest import START_MS
from tests.support.facts import a_fact

PUBLIC, PRIVATE = gw.CHANNEL, "200000000000000700"


def observation(channel: str, at_ms: int) -> Observation:
    return Observation(
        channel_id=channel,
        scope=gw.GUILD,
        sk=keys.observation_sk(at_ms, "msg", gw.snowflake(at_ms)),
        kind="msg",
        at_ms=at_ms,
        author_id=gw.ALICE,
        author_name="Alice",
        content="words",
    )


def stored_before_the_upgrade(services: MemoryServices, text: str, evidence: list[str]) -> None:
    """A fact as earlier versions wrote it: no learned_in, its provenance the observations."""
    fact = a_fact(gw.ALICE, text, at_ms=START_MS, learned_in=(), provenance=evidence)
    services.repository.client.put_item(
        TableName=services.repository.table_name, Item=to_item(fact_values(fact))
    )


def shown(services: MemoryServices, channel: str) -> str:
    request = {"guild_id": gw.GUILD, "channel_id": channel, "user_id": gw.ALICE}
    return services.recaller.recall(parse_request(request)).memory


def test_legacy_facts_take_the_channels_of_their_evidence(
    services: MemoryServices, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    services.repository.put_channel_visibility(gw.GUILD, PUBLIC, True)
    said_public, said_private = observation(PUBLIC, START_MS), observation(PRIVATE, START_MS + 1)
    for said in (said_public, said_private):
        services.repository.client.put_item(
            TableName=services.repository.table_name,
            Item=to_item(observation_values(said, pending=False)),
        )
    stored_before_the_upgrade(services, "Alice keeps bees", [said_public.sk])
    stored_before_the_upgrade(services, "Alice is moving house", [said_private.sk])
    stored_before_the_upgrade(services, "Alice plays chess", ["OBS#0000000000001#msg#1"])
    assert "bees" not in shown(services, PUBLIC)  # no channel information: shown nowhere

    monkeypatch.setenv("TABLE_NAME", services.repository.table_name)
    assert fact_channels.main([]) == 0

    assert "given the channels of their evidence: 2" in capsys.readouterr().out
    assert "bees" in shown(services, "200000000000000777")  # learned in a public channel
    assert "moving" not in shown(services, PUBLIC) and "moving" in shown(services, PRIVATE)
    assert "chess" not in shown(services, PUBLIC)  # its evidence is gone
    # A second run finds only the one whose evidence is gone, and changes nothing.
    assert fact_channels.backfill(services.repository).lines()[0] == "facts without channels: 1"
