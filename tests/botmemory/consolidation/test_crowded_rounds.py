"""A crowded channel's round takes its full batch (issue 28 item 3): the speakers' profiles and
name registry entries are written outside the round's transaction (botmemory.storage.round_people),
so each speaker costs the transaction only the two checks that erasure wins. Through the
functions template.yaml declares: messages into IngestFunction, the table's stream (moto's,
through the template's filter) into ConsolidateFunction, a memory model on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from botmemory.people.erasure import Eraser
from botmemory.storage import keys
from botmemory.storage.round_people import RoundPeopleStore
from localrun import gateway as gw
from tests.conftest import scan_all
from tests.support.deployment import Deployment, goldfish_deployment, guild_create
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import RunningWriter, fact_writer  # noqa: F401
from tests.support.fake_providers import ScriptServer

DEV = gw.CHANNEL
SPEAKERS = [f"3{n:017d}" for n in range(1, 31)]  # thirty members


@pytest.fixture
def deployed(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
    fact_writer: RunningWriter,  # noqa: F811
    tmp_path: Path,
) -> Deployment:
    deployment = goldfish_deployment(  # the defaults: a batch of 20
        monkeypatch, fake_discord, dynamodb, chat_server, fact_writer, tmp_path
    )
    deployment.say(guild_create([DEV], []))
    return deployment


def said_by(deployed: Deployment, speaker: str, text: str) -> dict[str, Any]:
    """A message of one of the thirty, who goes by a nickname, a global and an account name
    (three registry entries each: what a round used to write in its transaction)."""
    event = deployed.message(speaker, text, DEV)
    n = SPEAKERS.index(speaker)
    event["d"]["author"] = {
        "id": speaker,
        "username": f"member{n:02d}",
        "global_name": f"Member {n:02d}",
        "bot": False,
    }
    event["d"]["member"] = {"nick": f"Nick{n:02d}", "roles": []}
    return event


def pending(deployed: Deployment) -> int:
    return deployed.services().repository.count_pending(DEV, 100)


def items(deployed: Deployment, sk: str) -> list[dict[str, Any]]:
    return [i for i in scan_all(deployed.dynamodb) if i["sk"]["S"] == sk]


def state(deployed: Deployment) -> dict[str, Any]:
    (channel,) = [i for i in items(deployed, keys.STATE_SK) if i["pk"]["S"] == keys.channel_pk(DEV)]
    return channel


def observed_in(batch: str) -> int:
    return sum(1 for line in batch.splitlines() if line.startswith("#"))


def test_thirty_speakers_twenty_messages_one_round_each(
    deployed: Deployment,
    fact_writer: RunningWriter,  # noqa: F811
) -> None:
    first, second = SPEAKERS[:20], SPEAKERS[10:]  # thirty speakers in the channel
    deployed.say(*(said_by(deployed, s, f"hello from {s[-2:]}") for s in first))

    assert len(fact_writer.writer.batches) == 1 and pending(deployed) == 0
    assert observed_in(fact_writer.writer.batches[0]) == 20

    deployed.say(*(said_by(deployed, s, f"and again {s[-2:]}") for s in second))

    # The whole batch in one round (it used to stop near 18 messages with this many people).
    assert len(fact_writer.writer.batches) == 2 and pending(deployed) == 0
    assert observed_in(fact_writer.writer.batches[1]) == 20
    # Every speaker's profile, their channel's item and their names, written after it.
    profiles = items(deployed, keys.PROFILE_SK)
    assert {p["user_id"]["S"] for p in profiles} == set(SPEAKERS)
    assert all("channels" not in p for p in profiles)  # no set that grows with channels
    spoke = [i for i in scan_all(deployed.dynamodb) if i["sk"]["S"] == keys.spoke_sk(DEV)]
    assert {i["user_id"]["S"] for i in spoke} == set(SPEAKERS)
    registry = deployed.services().repository.names_at(gw.GUILD, ["nick29", "member 29"])
    assert registry == {"nick29": [SPEAKERS[29]], "member 29": [SPEAKERS[29]]}
    assert "people_due" not in state(deployed)  # nothing owed


def test_failed_writes_after_the_commit_lose_no_fact_and_the_next_round_repairs_them(
    deployed: Deployment,
    fact_writer: RunningWriter,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    written = RoundPeopleStore.write_round_people

    def refused(self: RoundPeopleStore, owed: Any) -> None:
        raise ClientError({"Error": {"Code": "InternalServerError"}}, "UpdateItem")

    monkeypatch.setattr(RoundPeopleStore, "write_round_people", refused)
    deployed.say(
        said_by(deployed, SPEAKERS[0], "I keep goldfish"),
        *(said_by(deployed, s, f"hi {s[-2:]}") for s in SPEAKERS[1:20]),
    )

    # Committed: consumed, the fact kept, the episode written; the profiles owed.
    assert pending(deployed) == 0
    repository = deployed.services().repository
    assert [f.text for f in repository.all_facts(gw.GUILD, SPEAKERS[0])] == [
        "Nick00 keeps goldfish"
    ]
    assert items(deployed, keys.PROFILE_SK) == []
    assert "people_due" in state(deployed)
    assert '"PeopleWritesFailed"' in capsys.readouterr().out  # counted

    monkeypatch.setattr(RoundPeopleStore, "write_round_people", written)
    deployed.say(*(said_by(deployed, s, f"later {s[-2:]}") for s in SPEAKERS[10:30]))

    # The next round wrote what the first owed, then its own.
    assert pending(deployed) == 0
    assert {p["user_id"]["S"] for p in items(deployed, keys.PROFILE_SK)} == set(SPEAKERS)
    assert repository.users_with_name(gw.GUILD, "Nick00") == [SPEAKERS[0]]
    assert "people_due" not in state(deployed)
    assert len(repository.all_facts(gw.GUILD, SPEAKERS[0])) == 1


def test_forgetme_finds_the_episodes_through_the_channel_items(
    deployed: Deployment,
) -> None:
    deployed.say(*(said_by(deployed, s, f"hello from {s[-2:]}") for s in SPEAKERS[:20]))
    services = deployed.services()
    assert services.repository.recent_episodes(DEV, 5)  # one episode, all twenty in it

    report = Eraser(services.repository, services.clock, services.opt_outs.hash_of).erase(
        SPEAKERS[3]
    )

    assert report.finished and report.episodes == 1 and report.channels == [DEV]
    assert services.repository.recent_episodes(DEV, 5) == []
    left = [i for i in scan_all(deployed.dynamodb) if SPEAKERS[3] in str(i)]
    assert left == []


def test_a_repair_after_an_erasure_brings_nothing_of_the_person_back(
    deployed: Deployment,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written = RoundPeopleStore.write_round_people

    def refused(self: RoundPeopleStore, owed: Any) -> None:
        raise ClientError({"Error": {"Code": "InternalServerError"}}, "UpdateItem")

    monkeypatch.setattr(RoundPeopleStore, "write_round_people", refused)
    deployed.say(*(said_by(deployed, s, f"hi {s[-2:]}") for s in SPEAKERS[:20]))
    assert "people_due" in state(deployed)
    services = deployed.services()
    Eraser(services.repository, services.clock, services.opt_outs.hash_of).erase(SPEAKERS[1])
    deployed.later(minutes=30)  # the erasure's marker is gone; what the round owed is not

    monkeypatch.setattr(RoundPeopleStore, "write_round_people", written)
    deployed.say(*(said_by(deployed, s, f"later {s[-2:]}") for s in SPEAKERS[10:30]))

    profiles = {p["user_id"]["S"] for p in items(deployed, keys.PROFILE_SK)}
    assert profiles == set(SPEAKERS) - {SPEAKERS[1]}
    assert [i for i in scan_all(deployed.dynamodb) if SPEAKERS[1] in str(i)] == []
