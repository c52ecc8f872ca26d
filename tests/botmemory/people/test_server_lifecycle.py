"""A server's lifecycle (botmemory.people.server_removal): the relay forwards GUILD_DELETE,
IngestFunction schedules the purge (an outage, `unavailable: true`, purges nothing; the bot's
return cancels it), and ServerPurgeFunction, on its schedule, purges the server by key once
the grace period is over, leaving every other server as it was; a purge that outlasts its
run goes on from its checkpoint.

Through the functions template.yaml declares (tests/botmemory/commands/test_controls.py's
deployment) on a moving ManualClock; the relay's own forwarder makes IngestFunction's payload.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botmemory.clock import DAY_MS
from botmemory.people import server_removal
from botmemory.people.server_removal import purge_due
from botmemory.storage import keys
from localrun import gateway as gw
from relay.sinks import LambdaSink
from tests.botmemory.commands.test_controls import (  # noqa: F401
    GENERAL,
    VENT,
    Controls,
    controls,
    notice,
)
from tests.relay.helpers import Clock, FakeLambda, make_forwarder
from tests.support.deployment import guild_create
from tests.support.fake_discord import fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import fact_writer  # noqa: F401

OTHER = "100000000000000077"
OTHER_CHANNEL = "200000000000000900"


def through_the_relay(controls: Controls, *events: dict[str, Any], tmp: Path) -> None:  # noqa: F811
    """The events as the relay forwards them, into IngestFunction."""
    client = FakeLambda()
    forwarder = make_forwarder(LambdaSink(client, "IngestFunction"), tmp, Clock())
    for event in events:
        forwarder.submit(event["t"], event["d"])
    forwarder.pump(final=True)
    for call in client.accepted:
        controls.d.local.invoke("IngestFunction", json.loads(call["Payload"]))
    controls.d.flush()


def seeded(controls: Controls) -> None:  # noqa: F811
    """Alice and Bob talk in the server (facts, episodes); Alice talks in another one too."""
    d = controls.d
    other = guild_create([OTHER_CHANNEL], [])
    other["d"].update(id=OTHER, roles=[{"id": OTHER, "permissions": str(1 << 10)}])
    d.say(other)
    d.say(
        d.message(gw.ALICE, "I keep goldfish", GENERAL),
        d.message(gw.BOB, "I keep goldfish too", VENT),
    )
    d.say(
        gw.message(
            gw.ALICE, "hello from the other server", d.at + 500, channel=OTHER_CHANNEL, guild=OTHER
        ),
        gw.message(gw.BOB, "hi there", d.at + 900, channel=OTHER_CHANNEL, guild=OTHER),
    )
    controls.follow_index()


def of_server(items: list[dict[str, Any]], guild: str) -> list[dict[str, Any]]:
    """The items kept of a server, by what their keys and scope say."""
    mine = []
    for item in items:
        pk = item["pk"]["S"]
        scope = item.get("scope", {}).get("S", "")
        if (
            pk.startswith((keys.scope_pk(guild), keys.guild_pk(guild), keys.rate_pk(guild)))
            or keys.server_scope_of(scope) == guild
        ):
            mine.append(item)
    return mine


def purge_run(controls: Controls) -> dict[str, Any]:  # noqa: F811
    answer: dict[str, Any] = controls.d.local.invoke(
        "ServerPurgeFunction", {"source": "aws.events"}
    )
    controls.follow_index()
    return answer


def test_a_removed_server_is_purged_by_key_after_its_grace_period(
    controls: Controls,  # noqa: F811
    tmp_path: Path,
) -> None:
    seeded(controls)
    d = controls.d
    outage = {"t": "GUILD_DELETE", "d": {"id": gw.GUILD, "unavailable": True}}
    through_the_relay(controls, outage, tmp=tmp_path / "a")
    assert not [i for i in controls.items() if i["pk"]["S"] == keys.PURGE_PK]

    through_the_relay(controls, {"t": "GUILD_DELETE", "d": {"id": gw.GUILD}}, tmp=tmp_path / "b")
    assert [i for i in controls.items() if i["pk"]["S"] == keys.PURGE_PK]
    d.later(minutes=29 * 24 * 60)
    assert purge_run(controls)["servers"] == []
    assert of_server(controls.items(), gw.GUILD)

    other_before = of_server(controls.items(), OTHER)
    d.later(minutes=2 * 24 * 60)
    assert purge_run(controls)["servers"] == [gw.GUILD]

    items = controls.items()
    assert [i for i in of_server(items, gw.GUILD) if i["sk"]["S"] != keys.INDEX_PURGED_SK] == []
    assert not [
        i for i in items if i["pk"]["S"] in (keys.channel_pk(GENERAL), keys.channel_pk(VENT))
    ]
    assert not [i for i in items if i["pk"]["S"] == keys.PURGE_PK]
    assert of_server(items, OTHER) == other_before  # the other server is untouched
    assert not [p for p in controls.passages() if keys.server_scope_of(p.scope) == gw.GUILD]
    assert [p for p in controls.passages() if p.scope == OTHER]


def test_the_bot_back_within_the_grace_period_cancels_the_purge(
    controls: Controls,  # noqa: F811
    tmp_path: Path,
) -> None:
    seeded(controls)
    d = controls.d
    through_the_relay(controls, {"t": "GUILD_DELETE", "d": {"id": gw.GUILD}}, tmp=tmp_path / "a")
    d.later(minutes=3 * 24 * 60)
    through_the_relay(controls, guild_create([GENERAL, VENT], []), tmp=tmp_path / "b")
    before = of_server(controls.items(), gw.GUILD)
    d.later(minutes=40 * 24 * 60)
    assert purge_run(controls)["servers"] == []
    assert len(of_server(controls.items(), gw.GUILD)) >= len(before) > 0


def test_a_purge_short_of_time_keeps_its_checkpoint_and_the_next_run_finishes(
    controls: Controls,  # noqa: F811
    tmp_path: Path,
    monkeypatch: Any,
) -> None:
    seeded(controls)
    d = controls.d
    through_the_relay(controls, {"t": "GUILD_DELETE", "d": {"id": gw.GUILD}}, tmp=tmp_path / "a")
    d.later(minutes=31 * 24 * 60)
    repository = d.services().repository
    monkeypatch.setattr(server_removal, "PAGE", 2)  # small pages: many steps
    steps = iter(range(1000))

    first = purge_due(
        repository, d.clock.now_ms(), time_left_ms=lambda: 60_000 - 10_000 * next(steps)
    )
    assert first.unfinished == gw.GUILD and first.servers == [] and first.items > 0
    assert of_server(controls.items(), gw.GUILD)
    done = purge_due(repository, d.clock.now_ms() + DAY_MS // 24)
    assert done.servers == [gw.GUILD]
    assert [
        i for i in of_server(controls.items(), gw.GUILD) if i["sk"]["S"] != keys.INDEX_PURGED_SK
    ] == []


def ready(*guilds: str, shard: list[int] | None = None) -> dict[str, Any]:
    """A shard's READY as Discord sends it (unavailable guilds, the session, the user)."""
    payload: dict[str, Any] = {
        "v": 10,
        "user": {"id": gw.BOT, "username": "memorybot", "bot": True},
        "session_id": "s1",
        "resume_gateway_url": "wss://gateway.example",
        "guilds": [{"id": g, "unavailable": True} for g in guilds],
    }
    if shard is not None:
        payload["shard"] = shard
    return {"t": "READY", "d": payload}


def purge_at(controls: Controls) -> list[str]:  # noqa: F811
    return [i["sk"]["S"] for i in controls.items() if i["pk"]["S"] == keys.PURGE_PK]


def test_a_server_missing_from_ready_after_the_relay_was_down_is_purged(
    controls: Controls,  # noqa: F811
    tmp_path: Path,
) -> None:
    seeded(controls)
    d = controls.d
    # The bot was removed from the server while the relay was down: no GUILD_DELETE came,
    # and the shard's READY no longer lists it.
    through_the_relay(controls, ready(OTHER), tmp=tmp_path / "a")
    scheduled = purge_at(controls)
    assert [keys.guild_of_purge_sk(sk) for sk in scheduled] == [gw.GUILD]
    # Another READY (a reconnect) neither postpones it nor schedules the server listed.
    d.later(minutes=24 * 60)
    through_the_relay(controls, ready(OTHER), tmp=tmp_path / "b")
    assert purge_at(controls) == scheduled
    d.later(minutes=28 * 24 * 60)
    other_before = of_server(controls.items(), OTHER)
    assert purge_run(controls)["servers"] == []
    d.later(minutes=2 * 24 * 60)
    assert purge_run(controls)["servers"] == [gw.GUILD]
    assert [
        i for i in of_server(controls.items(), gw.GUILD) if i["sk"]["S"] != keys.INDEX_PURGED_SK
    ] == []
    assert of_server(controls.items(), OTHER) == other_before
    # Purged: no longer a server the deployment knows, so the next READY schedules nothing.
    through_the_relay(controls, ready(OTHER), tmp=tmp_path / "c")
    assert purge_at(controls) == []


def test_a_server_missing_from_ready_that_comes_back_is_kept(
    controls: Controls,  # noqa: F811
    tmp_path: Path,
) -> None:
    seeded(controls)
    d = controls.d
    # Both servers on shard 0 of 2: shard 1's READY lists neither, and schedules nothing.
    through_the_relay(controls, ready(shard=[1, 2]), tmp=tmp_path / "a")
    assert purge_at(controls) == []
    through_the_relay(controls, ready(OTHER, shard=[0, 2]), tmp=tmp_path / "b")
    assert len(purge_at(controls)) == 1
    # Only unavailable at READY, then its GUILD_CREATE: the bot is still there.
    through_the_relay(controls, guild_create([GENERAL, VENT], []), tmp=tmp_path / "c")
    assert purge_at(controls) == []
    before = of_server(controls.items(), gw.GUILD)
    d.later(minutes=40 * 24 * 60)
    assert purge_run(controls)["servers"] == []
    assert len(of_server(controls.items(), gw.GUILD)) >= len(before) > 0
