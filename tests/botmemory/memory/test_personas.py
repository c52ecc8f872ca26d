"""Which persona a channel answers as, the deployment's personas from their SSM parameter, and
the lineage rule that keeps one persona's memories from another's changes."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from botmemory.memory.personas import (
    active_persona,
    deployment_source,
    may_change,
    parse_deployment_personas,
    persona_by_id,
)
from botmemory.records import Fact, FactKind, FactSource, Persona
from botmemory.settings.config import Settings
from botmemory.storage import keys

GUILD = "1100000000000000001"
SUPPORT = "1200000000000000001"
GENERAL = "1200000000000000002"


def persona(persona_id: str, *channels: str, guild: str | None = GUILD, **extra: Any) -> Persona:
    return Persona(
        persona_id=persona_id,
        lineage_id=f"lin-{persona_id}",
        name=persona_id.title(),
        prompt="Be {memory}",
        guild_id=guild,
        channels=list(channels),
        **extra,
    )


def test_a_channel_answers_as_the_most_specific_persona() -> None:
    server_here = persona("helpdesk", SUPPORT)
    server_everywhere = persona("host")
    deployment_here = persona("tutor", SUPPORT, guild=None)
    deployment_everywhere = persona("narrator", guild=None)

    everything = ([server_everywhere, server_here], [deployment_everywhere, deployment_here])
    assert active_persona(*everything, SUPPORT) == server_here
    assert active_persona(*everything, GENERAL) == server_everywhere
    assert active_persona([], [deployment_everywhere, deployment_here], SUPPORT) == deployment_here
    assert active_persona([], [deployment_everywhere], GENERAL) == deployment_everywhere
    assert active_persona([], [], GENERAL) is None


def test_a_removed_persona_answers_nowhere_and_is_not_found_by_id() -> None:
    removed = persona("helpdesk", SUPPORT, removed_ms=5)
    fallback = persona("narrator", guild=None)

    assert active_persona([removed], [fallback], SUPPORT) == fallback
    assert persona_by_id([removed], [], "helpdesk") is None


def test_the_deployment_s_personas_come_from_json_with_a_stable_lineage() -> None:
    raw = json.dumps(
        [
            {
                "id": "helpdesk",
                "name": "Helpdesk",
                "prompt": "Help.\n{memory}",
                "channels": [SUPPORT],
            },
            {"id": "tutor", "name": "Tutor v2", "prompt": "Teach.\n{memory}", "lineage": "tutor-1"},
        ]
    )

    helpdesk, tutor = parse_deployment_personas(raw)

    assert (helpdesk.lineage_id, helpdesk.channels, helpdesk.guild_id) == (
        "d-helpdesk",
        [SUPPORT],
        None,
    )
    assert tutor.lineage_id == "tutor-1"  # a rename keeps the lineage it names


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        json.dumps({"id": "x"}),
        json.dumps([{"id": "Bad Id", "name": "x", "prompt": "{memory}"}]),
        json.dumps([{"id": "x", "name": "x", "prompt": "no placeholder"}]),
        json.dumps([{"id": "x", "name": "x", "prompt": "{memory}{memory}"}]),
        json.dumps([{"id": "x", "name": "x", "prompt": "{memory}", "extra": 1}]),
        json.dumps([{"id": "x", "name": "x", "prompt": "{memory}"}] * 2),
    ],
    ids=[
        "not json",
        "not a list",
        "bad id",
        "no placeholder",
        "two placeholders",
        "unknown field",
        "duplicate",
    ],
)
def test_a_bad_parameter_counts_as_no_personas_and_is_logged(
    raw: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="botmemory"):
        assert parse_deployment_personas(raw) == []
    assert any("deployment personas ignored" in r.getMessage() for r in caplog.records)


def test_no_parameter_means_no_deployment_personas() -> None:
    assert deployment_source(Settings())() == []


def fact_in(scope: str) -> Fact:
    return Fact(
        fact_id="f1",
        scope=scope,
        user_id="1300000000000000001",
        text="likes tea",
        kind=FactKind.FACT,
        source=FactSource.SELF,
        created_ms=0,
        updated_ms=0,
    )


def test_a_change_under_a_persona_touches_the_server_s_facts_and_its_own_only() -> None:
    own = fact_in(keys.persona_scope(GUILD, "lin-helpdesk"))
    others = fact_in(keys.persona_scope(GUILD, "lin-tutor"))
    users = fact_in(GUILD)
    elsewhere = fact_in(keys.persona_scope("1100000000000000999", "lin-helpdesk"))

    assert may_change(users, GUILD, "lin-helpdesk") and may_change(own, GUILD, "lin-helpdesk")
    assert not may_change(others, GUILD, "lin-helpdesk")
    assert not may_change(elsewhere, GUILD, "lin-helpdesk")
    # Without a persona, no persona's memories may be changed.
    assert may_change(users, GUILD, None) and not may_change(own, GUILD, None)
