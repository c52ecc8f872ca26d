"""A server's retention (botmemory.people.retention): staff shorten it within the deployment's
maximums, recall shows nothing past it from the next minute (the controls' cache), what is
written there expires by it, and ServerPurgeFunction's retention job brings what was stored
before in line, by key, leaving every other server as it was; the search index follows the
table's new expiry through the stream.

Through the functions template.yaml declares (tests/botmemory/commands/test_controls.py's
deployment: signed interactions, a memory model on 127.0.0.1) on a moving ManualClock.
"""

from __future__ import annotations

import json
from typing import Any

from botmemory.clock import DAY_MS
from botmemory.people import retention_job
from botmemory.people.retention_job import apply_due
from botmemory.storage import keys
from localrun import gateway as gw
from tests.botmemory.commands.test_controls import (  # noqa: F401
    GENERAL,
    Controls,
    controls,
    notice,
)
from tests.botmemory.people.test_server_lifecycle import OTHER, OTHER_CHANNEL, of_server
from tests.support.deployment import guild_create
from tests.support.fake_discord import fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import fact_writer  # noqa: F401


def seeded(controls: Controls) -> None:  # noqa: F811
    """Alice and Bob talk in the server (a round: facts, an episode, passages), and in
    another server too."""
    d = controls.d
    other = guild_create([OTHER_CHANNEL], [])
    other["d"].update(id=OTHER, roles=[{"id": OTHER, "permissions": str(1 << 10)}])
    d.say(other)
    d.say(
        d.message(gw.ALICE, "I keep goldfish", GENERAL),
        d.message(gw.BOB, "I keep goldfish too", GENERAL),
    )
    d.say(
        gw.message(
            gw.ALICE, "I keep goldfish here too", d.at + 500, channel=OTHER_CHANNEL, guild=OTHER
        ),
        gw.message(gw.BOB, "hi there", d.at + 900, channel=OTHER_CHANNEL, guild=OTHER),
    )
    controls.follow_index()


def recall_text(controls: Controls, query: str) -> str:  # noqa: F811
    answer = controls.d.recall(GENERAL, gw.CAROL, query=query, participants=[gw.ALICE])
    return json.dumps(answer)


def expiries(items: list[dict[str, Any]], kind: keys.ItemKind) -> list[tuple[int, int]]:
    """(when its time started, expires_at) of each item of a kind that has both."""
    time_field = {
        keys.ItemKind.FACT: "updated_ms",
        keys.ItemKind.OBSERVATION: "at_ms",
        keys.ItemKind.EPISODE: "created_ms",
    }[kind]
    return [
        (int(i[time_field]["N"]), int(i["expires_at"]["N"]))
        for i in items
        if keys.kind_of(i["sk"]["S"]) == kind and time_field in i and "expires_at" in i
    ]


def retention_run(controls: Controls) -> dict[str, Any]:  # noqa: F811
    answer: dict[str, Any] = controls.d.local.invoke(
        "ServerPurgeFunction", {"source": "aws.events"}
    )
    controls.follow_index()
    return dict(answer["retention"])


def test_staff_set_retention_within_the_deployments_maximums(controls: Controls) -> None:  # noqa: F811
    refused = controls.text("memory-staff", ["retention", "facts"], {"days": 5})
    assert "Manage Server" in refused
    longer = controls.text("memory-staff", ["retention", "facts"], {"days": 400}, staff=True)
    assert "at most 180 days" in longer and "not longer" in longer
    forged = controls.text("memory-staff", ["retention", "facts"], {"days": -3}, staff=True)
    assert "whole number of days" in forged
    status = controls.text("memory-staff", ["retention", "status"], staff=True)
    assert "facts 180 days" in status and "deployment:" not in status

    done = controls.text("memory-staff", ["retention", "facts"], {"days": 5}, staff=True)
    assert "keeps facts 5 days" in done
    status = controls.text("memory-staff", ["retention", "status"], staff=True)
    assert "facts 5 days (deployment: 180)" in status
    privacy = controls.text("memory", ["privacy"])
    assert "facts 5 days (deployment: 180)" in privacy and "recorded messages 365 days" in privacy

    # The deployment's value restores it: nothing shortened is kept.
    controls.text("memory-staff", ["retention", "facts"], {"days": 180}, staff=True)
    assert not [i for i in controls.items() if i["sk"]["S"] == keys.RETENTION_SK]


def test_retention_applies_to_recall_writes_and_stored_expiry(controls: Controls) -> None:  # noqa: F811
    seeded(controls)
    d = controls.d
    items = controls.items()
    assert expiries(items, keys.ItemKind.FACT) and expiries(items, keys.ItemKind.OBSERVATION)
    d.later(minutes=10 * 24 * 60)
    assert "goldfish" in recall_text(controls, "goldfish")

    controls.text("memory-staff", ["retention", "facts"], {"days": 5}, staff=True)
    controls.text("memory-staff", ["retention", "messages"], {"days": 3}, staff=True)
    controls.text("memory-staff", ["retention", "episodes"], {"days": 2}, staff=True)
    d.later(minutes=1)  # the controls' minute: every container reads it
    assert "goldfish" not in recall_text(controls, "goldfish")

    # Stored items keep their old expiry until the job runs, after the same minute.
    other_before = of_server(controls.items(), OTHER)
    report = retention_run(controls)
    assert report["servers"] == [gw.GUILD] and report["shortened"] > 0
    items = controls.items()
    mine = of_server(items, gw.GUILD) + [
        i for i in items if keys.server_scope_of(i.get("scope", {}).get("S", "")) == gw.GUILD
    ]
    for at, expires in expiries(mine, keys.ItemKind.FACT):
        assert expires <= (at + 5 * DAY_MS) // 1000
    for at, expires in expiries(mine, keys.ItemKind.OBSERVATION):
        assert expires <= (at + 3 * DAY_MS) // 1000
    for at, expires in expiries(mine, keys.ItemKind.EPISODE):
        assert expires <= (at + 2 * DAY_MS) // 1000
    assert of_server(items, OTHER) == other_before  # another server keeps its own
    assert not [i for i in items if i["pk"]["S"] == keys.RETAIN_PK]  # done: one pass
    # The search index's rows follow the table's new expiry.
    ours = [p for p in controls.passages() if keys.server_scope_of(p.scope) == gw.GUILD]
    assert ours and all(p.expires_at is not None for p in ours)
    latest = max(at for at, _ in expiries(mine, keys.ItemKind.FACT))
    assert all(p.expires_at <= (latest + 5 * DAY_MS) // 1000 for p in ours if p.kind == "fact")
    assert [p for p in controls.passages() if p.scope == OTHER and p.expires_at]
    assert (
        max(p.expires_at or 0 for p in controls.passages() if p.scope == OTHER)
        > (d.clock.now_ms() + 300 * DAY_MS) // 1000
    )

    # What is written here from now on expires by the server's retention.
    d.say(d.message(gw.BOB, "I keep goldfish, still", GENERAL))
    d.say(d.message(gw.ALICE, "I keep goldfish as well", GENERAL))
    now = d.clock.now_ms()
    fresh = [
        (at, expires)
        for at, expires in expiries(controls.items(), keys.ItemKind.OBSERVATION)
        if at >= now - 10 * 60_000
    ]
    assert fresh and all(expires <= (now + 3 * DAY_MS) // 1000 for _, expires in fresh)
    facts = [e for a, e in expiries(controls.items(), keys.ItemKind.FACT) if a >= now - 60_000]
    assert facts and all(expires <= (now + 5 * DAY_MS) // 1000 for expires in facts)


def test_the_job_stops_short_of_time_and_goes_on_from_its_checkpoint(
    controls: Controls,  # noqa: F811
    monkeypatch: Any,
) -> None:
    seeded(controls)
    d = controls.d
    controls.text("memory-staff", ["retention", "messages"], {"days": 1}, staff=True)
    repository = d.services().repository
    settings = d.services().settings
    assert apply_due(repository, settings, d.clock.now_ms()).servers == []  # not before the minute
    d.later(minutes=2 * 24 * 60)
    monkeypatch.setattr(retention_job, "PAGE", 2)
    steps = iter(range(1000))
    first = apply_due(
        repository, settings, d.clock.now_ms(), time_left_ms=lambda: 60_000 - 10_000 * next(steps)
    )
    assert first.unfinished == gw.GUILD and first.servers == []
    assert [i for i in controls.items() if i["pk"]["S"] == keys.RETAIN_PK and "checkpoint" in i]
    done = apply_due(repository, settings, d.clock.now_ms())
    assert done.servers == [gw.GUILD]
    mine = [
        (at, e)
        for i in controls.items()
        if i["pk"]["S"].startswith(keys.CHANNEL_PREFIX) and i.get("scope", {}).get("S") == gw.GUILD
        for at, e in expiries([i], keys.ItemKind.OBSERVATION)
    ]
    assert mine and all(e <= (at + DAY_MS) // 1000 for at, e in mine)


def test_a_fact_written_or_forgotten_by_hand_expires_by_the_servers_retention(
    controls: Controls,  # noqa: F811
) -> None:
    """Not only consolidation: a member's `/memory remember` (and a persona's teaching, a chat
    model's correction: the same rule, RetentionReader.days_of) expires by the server's, and
    so does the history entry `/memory forget` (or staff's forget-fact) leaves."""
    d = controls.d
    controls.text("memory-staff", ["retention", "facts"], {"days": 5}, staff=True)
    d.later(minutes=1)

    answer = controls.text("memory", ["remember"], {"text": "I collect stamps"})

    assert "Remembered" in answer, answer
    now = d.clock.now_ms()
    manual = [e for a, e in expiries(controls.items(), keys.ItemKind.FACT) if a >= now - 60_000]
    assert manual and all(expires <= (now + 5 * DAY_MS) // 1000 for expires in manual)
    history = [
        int(i["expires_at"]["N"])
        for i in controls.items()
        if keys.kind_of(i["sk"]["S"]) == keys.ItemKind.HISTORY and "expires_at" in i
    ]
    assert history and all(expires <= (now + 5 * DAY_MS) // 1000 for expires in history)

    d.later(minutes=1)
    forgotten = controls.text("memory", ["forget"], {"what": "stamps"})

    assert "Forgotten" in forgotten, forgotten
    now = d.clock.now_ms()
    deleted = [
        int(i["expires_at"]["N"])
        for i in controls.items()
        if keys.kind_of(i["sk"]["S"]) == keys.ItemKind.HISTORY
        and i.get("change", {}).get("S") == "deleted"
    ]
    assert deleted and all(expires <= (now + 5 * DAY_MS) // 1000 for expires in deleted)
