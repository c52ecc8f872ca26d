"""Members who leave (botmemory.people.departures): with the GUILD_MEMBERS intent, the relay
forwards GUILD_MEMBER_REMOVE, and where staff chose a grace period ServerPurgeFunction asks
Discord (GET /guilds/{guild}/members/{user}, a fake on 127.0.0.1) whether the member is gone
once it is over, then erases them from that server only. A forged removal of a member still
there erases nothing; a server that chose nothing keeps everything; without the intent the
command says it is not available.

Through the functions template.yaml declares (tests/botmemory/commands/test_controls.py's
deployment, signed interactions) on a moving ManualClock; the relay's own forwarder makes
IngestFunction's payload.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from botmemory.storage import keys
from localrun import gateway as gw
from tests.botmemory.commands.test_controls import (  # noqa: F401
    GENERAL,
    VENT,
    Controls,
    controls,
    notice,
)
from tests.botmemory.people.test_server_lifecycle import OTHER, OTHER_CHANNEL, through_the_relay
from tests.support.deployment import Deployment, guild_create
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import RunningWriter, Teaching, fact_writer  # noqa: F401
from tests.support.fake_providers import ScriptServer

DAY_MINUTES = 24 * 60


@pytest.fixture
def members(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
    fact_writer: RunningWriter,  # noqa: F811
    tmp_path: Path,
) -> Controls:
    """test_controls' deployment, with the GUILD_MEMBERS intent."""
    fact_writer.writer.teachings = [Teaching("goldfish", "{name} keeps goldfish")]
    intent = {"MEMORY_GUILD_MEMBERS_INTENT": "true"}
    deployment = Deployment(
        monkeypatch,
        fake_discord,
        dynamodb,
        chat_server,
        tmp_path / "index.db",
        {
            "ConsolidateFunction": {**fact_writer.environment(), "MEMORY_CONSOLIDATE_EVERY": "2"},
            "InteractionsFunction": {
                **intent,
                "DISCORD_API_BASE": fake_discord.url,
                "DEFERRED_WORK": "thread",
            },
            "IngestFunction": intent,
            "ServerPurgeFunction": {
                **intent,
                "DISCORD_API_BASE": fake_discord.url,
                "DISCORD_BOT_TOKEN": BOT_TOKEN,
                "DISCORD_BOT_TOKEN_SECRET": "",
            },
            "AnswerFunction": {"MEMORY_PRIVACY_NOTICE": "false"},
        },
    )
    deployment.say(guild_create([GENERAL, VENT], []))
    return Controls(deployment, tmp_path / "index.db")


def seeded(members: Controls) -> None:
    """Alice and Bob talk here (facts learned of both), Alice in another server too."""
    d = members.d
    other = guild_create([OTHER_CHANNEL], [])
    other["d"].update(id=OTHER, roles=[{"id": OTHER, "permissions": str(1 << 10)}])
    d.say(other)
    d.say(
        d.message(gw.ALICE, "I keep goldfish", GENERAL),
        d.message(gw.BOB, "I keep goldfish too", GENERAL),
    )
    d.say(
        gw.message(gw.ALICE, "I keep goldfish", d.at + 500, channel=OTHER_CHANNEL, guild=OTHER),
        gw.message(gw.BOB, "me too", d.at + 900, channel=OTHER_CHANNEL, guild=OTHER),
    )
    members.follow_index()


def left(guild: str, user: str) -> dict[str, Any]:
    """GUILD_MEMBER_REMOVE as Discord sends it."""
    account = {**gw.user(user), "discriminator": "0", "avatar": None}
    return {"t": "GUILD_MEMBER_REMOVE", "d": {"guild_id": guild, "user": account}}


def of_person(items: list[dict[str, Any]], user: str, server: str) -> list[dict[str, Any]]:
    """A person's items in one server: their facts and profile there, what they said there."""
    mine = []
    for item in items:
        pk, scope = item["pk"]["S"], item.get("scope", {}).get("S", "")
        said = (
            item.get("author_id", {}).get("S") == user or item.get("user_id", {}).get("S") == user
        )
        if pk.startswith(keys.user_pk(server, user)) or (said and scope == server):
            mine.append(item)
    return mine


def purge_run(members: Controls) -> dict[str, Any]:
    answer: dict[str, Any] = members.d.local.invoke("ServerPurgeFunction", {"source": "aws.events"})
    members.follow_index()
    return dict(answer["departed"])


def test_a_member_who_left_is_erased_from_that_server_after_the_grace_period(
    members: Controls, fake_discord: FakeDiscordRest, tmp_path: Path
) -> None:
    seeded(members)
    d = members.d
    assert of_person(members.items(), gw.ALICE, gw.GUILD)
    answer = members.text("memory-staff", ["retention", "leavers"], {"days": 7}, staff=True)
    assert "erased from this server 7 days later" in answer
    # Alice left; a forged removal names Bob, who is still there.
    fake_discord.members[gw.GUILD] = {gw.BOB}
    through_the_relay(members, left(gw.GUILD, gw.ALICE), left(gw.GUILD, gw.BOB), tmp=tmp_path / "a")
    assert len([i for i in members.items() if i["pk"]["S"] == keys.DEPARTED_PK]) == 2

    d.later(minutes=6 * DAY_MINUTES)  # within the grace period: nothing asked, nothing erased
    assert purge_run(members) == {
        "erased": 0,
        "still_members": 0,
        "unconfirmed": 0,
        "unfinished": False,
        "servers": [],
    }
    assert not fake_discord.requests_matching("GET", f"/guilds/{gw.GUILD}/members/")
    alice_elsewhere = of_person(members.items(), gw.ALICE, OTHER)
    bob_here = of_person(members.items(), gw.BOB, gw.GUILD)

    d.later(minutes=2 * DAY_MINUTES)
    report = purge_run(members)
    assert (report["erased"], report["still_members"]) == (1, 1)
    asked = {r.path for r in fake_discord.requests_matching("GET", f"/guilds/{gw.GUILD}/members/")}
    assert asked == {
        f"/guilds/{gw.GUILD}/members/{gw.ALICE}",
        f"/guilds/{gw.GUILD}/members/{gw.BOB}",
    }
    items = members.items()
    assert of_person(items, gw.ALICE, gw.GUILD) == []  # gone from this server
    assert of_person(items, gw.ALICE, OTHER) == alice_elsewhere  # kept in the other
    assert alice_elsewhere
    assert of_person(items, gw.BOB, gw.GUILD) == bob_here  # the forged removal erased nothing
    assert not [i for i in items if i["pk"]["S"] == keys.DEPARTED_PK]
    passages = members.passages()
    assert not [p for p in passages if p.scope == gw.GUILD and "Alice" in p.text]
    assert [p for p in passages if p.scope == OTHER and "Alice" in p.text]


def test_a_server_that_chose_nothing_keeps_members_who_leave(
    members: Controls, tmp_path: Path
) -> None:
    seeded(members)
    status = members.text("memory-staff", ["retention", "status"], staff=True)
    assert "not erased on their own" in status
    through_the_relay(members, left(gw.GUILD, gw.ALICE), tmp=tmp_path / "a")
    assert not [i for i in members.items() if i["pk"]["S"] == keys.DEPARTED_PK]


def test_without_the_intent_it_is_not_available(controls: Controls, tmp_path: Path) -> None:  # noqa: F811
    answer = controls.text("memory-staff", ["retention", "leavers"], {"days": 7}, staff=True)
    assert "Not available on this bot" in answer and "GUILD_MEMBERS" in answer
    through_the_relay(controls, left(gw.GUILD, gw.ALICE), tmp=tmp_path / "a")
    assert not [i for i in controls.items() if i["pk"]["S"] == keys.DEPARTED_PK]
    assert "not erased on their own" in controls.text("memory", ["privacy"])
