"""Erasure as an attacker and an operator see it: a nickname erases nobody else's data, a
person named where they never spoke is still found, erasure's reads do not grow with the
size of channels, and an erasure cut short continues where it stopped and says so."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.commands.member import ERASE_FAILED
from botmemory.commands.router import Commands
from botmemory.discord.errors import DiscordApiError
from botmemory.discord.followup import finish_and_reply
from botmemory.people.erasure import Eraser, ErasureReport
from botmemory.people.names import REDACTED
from botmemory.records import Episode, Fact, Named, Observation
from botmemory.services import MemoryServices
from botmemory.storage import keys
from botmemory.storage.items import named_values, observation_values
from botmemory.text import normalized
from localrun.storage import put_episode, put_items
from scripts.make_events import ALICE, BOB, CHANNEL, GUILD
from tests.conftest import READ_OPERATIONS, START_MS, TABLE, scan_all
from tests.support.facts import a_fact
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401

MALLORY = "1300000000000000066"
CAROL = "1300000000000000003"
ELSEWHERE = "1200000000000000002"  # a channel Alice never spoke in
_message_ids = iter(range(1_456_000_000_000_000_000, 1_457_000_000_000_000_000))


@pytest.fixture(autouse=True)
def hash_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_HASH_KEY", "erasure-tests-hash-key-0123456789")


# Seeding -----------------------------------------------------------------------------


def message(
    author: str, name: str, content: str, channel: str = CHANNEL, at_ms: int = START_MS
) -> Observation:
    message_id = str(next(_message_ids))
    return Observation(
        channel_id=channel,
        scope=GUILD,
        sk=keys.observation_sk(at_ms, "msg", message_id),
        kind="msg",
        at_ms=at_ms,
        author_id=author,
        author_name=name,
        message_id=message_id,
        content=content,
    )


def seed_messages(services: MemoryServices, observations: list[Observation]) -> None:
    put_items(services.repository, (observation_values(o, pending=False) for o in observations))


def episode(summary: str, participants: dict[str, str], channel: str = CHANNEL) -> Episode:
    episode_id = f"ep{abs(hash(summary)) % 10**6}"
    return Episode(
        channel_id=channel,
        episode_id=episode_id,
        sk=keys.episode_sk(START_MS, episode_id),
        summary=summary,
        participant_ids=list(participants),
        participant_names=list(participants.values()),
        start_ms=START_MS,
        end_ms=START_MS,
        created_ms=START_MS,
        expires_at=epoch_seconds(START_MS + 30 * DAY_MS),
    )


def profile(user: str, name: str, channels: list[str]) -> dict[str, Any]:
    return {
        "pk": keys.user_pk(GUILD, user),
        "sk": keys.PROFILE_SK,
        "user_id": user,
        "scope": GUILD,
        "display_name": name,
        "channels": set(channels),
    }


def name_registry(name: str, *users: str) -> dict[str, Any]:
    return {
        "pk": keys.scope_pk(GUILD),
        "sk": keys.name_sk(normalized(name)),
        "name": name,
        "user_ids": set(users),
    }


def pointer(user: str, channel: str, target_sk: str) -> dict[str, Any]:
    return named_values(Named(scope=GUILD, user_id=user, channel_id=channel, target_sk=target_sk))


def fact(user: str, text: str) -> Fact:
    return a_fact(user, text, scope=GUILD, at_ms=START_MS, expires_at=None)


def eraser(services: MemoryServices) -> Eraser:
    return Eraser(services.repository, services.clock, services.opt_outs.hash_of)


def contents(services: MemoryServices, channel: str = CHANNEL) -> dict[str, str]:
    """Every stored message of a channel, by author and message id."""
    return {
        f"{o.author_id}/{o.message_id}": o.content
        for o in services.repository.channel_observations(channel)
    }


def summaries(services: MemoryServices, channel: str = CHANNEL) -> list[str]:
    return [e.summary for e in services.repository.channel_episodes(channel)]


def nothing_of(services: MemoryServices, user: str) -> bool:
    return services.repository.items_of_user(user) == []


# Nicknames are not a weapon ----------------------------------------------------------


def test_a_member_nicknamed_the_erases_only_their_own_items(services: MemoryServices) -> None:
    others = [
        message(BOB, "Bob", "the garden looks great"),
        message(CAROL, "Carol", "The tomatoes are in the shed"),
    ]
    theirs = [message(MALLORY, "the", "hello everyone, I am the")]
    seed_messages(services, others + theirs)
    put_items(services.repository, [profile(MALLORY, "the", [CHANNEL])])
    services.repository.put_fact(fact(MALLORY, "Likes being called the"))
    summary = "Bob and Carol talked about the garden and the shed."
    put_episode(services.repository, episode(summary, {BOB: "Bob", CAROL: "Carol"}), GUILD)

    report = eraser(services).erase(MALLORY, ["the"])

    assert report.finished and report.facts == 1 and report.observations == 1
    assert report.episodes == 0 and report.mentions_redacted == 0
    assert sorted(contents(services).values()) == sorted(o.content for o in others)
    assert summaries(services) == [summary]
    assert nothing_of(services, MALLORY)


def test_a_member_nicknamed_like_another_member_changes_nothing_about_them(
    services: MemoryServices,
) -> None:
    about_alice = [
        message(BOB, "Bob", "Alice, how is your garden?"),
        message(ALICE, "Alice", "Growing fast, thanks Bob"),
    ]
    mallorys = [message(MALLORY, "Alice", "I am Alice now")]
    seed_messages(services, about_alice + mallorys)
    put_items(
        services.repository,
        [
            profile(MALLORY, "Alice", [CHANNEL]),
            profile(ALICE, "Alice", [CHANNEL]),
            name_registry("Alice", ALICE, MALLORY),
        ],
    )
    services.repository.put_fact(fact(ALICE, "Grows tomatoes"))
    alices_episode = "Bob asked Alice about her garden; Alice said it grows fast."
    put_episode(services.repository, episode(alices_episode, {ALICE: "Alice", BOB: "Bob"}), GUILD)
    mallorys_episode = episode("Mallory said she is Alice now.", {MALLORY: "Alice"})
    put_episode(services.repository, mallorys_episode, GUILD)

    report = eraser(services).erase(MALLORY, ["Alice"])

    assert report.finished and report.observations == 1 and report.episodes == 1
    assert sorted(contents(services).values()) == sorted(o.content for o in about_alice)
    assert summaries(services) == [alices_episode]  # Mallory's own went, Alice's stays
    assert [f.text for f in services.repository.all_facts(GUILD, ALICE)] == ["Grows tomatoes"]
    assert len(services.repository.items_of_user(ALICE)) == 3  # fact, message, profile
    assert nothing_of(services, MALLORY)


# Found by id, where they never spoke --------------------------------------------------


def test_a_person_named_where_they_never_spoke_is_found_through_named_pointers(
    services: MemoryServices,
) -> None:
    hers = [message(ALICE, "Alice", "I keep bees")]
    bobs = message(BOB, "Bob", f"<@{ALICE}> look at this, Alice!", channel=ELSEWHERE)
    carols = message(CAROL, "Carol", "nice weather", channel=ELSEWHERE)
    seed_messages(services, [*hers, bobs, carols])
    naming = episode(f"Bob showed <@{ALICE}> a photo.", {BOB: "Bob"}, channel=ELSEWHERE)
    other = episode("Carol talked about the weather.", {CAROL: "Carol"}, channel=ELSEWHERE)
    put_episode(services.repository, naming, GUILD)
    put_episode(services.repository, other, GUILD)
    put_items(
        services.repository,
        [
            profile(ALICE, "Alice", [CHANNEL]),  # she never spoke in ELSEWHERE
            name_registry("Alice", ALICE),
            pointer(ALICE, ELSEWHERE, bobs.sk),
            pointer(ALICE, ELSEWHERE, naming.sk),
        ],
    )

    report = eraser(services).erase(ALICE, ["Alice"])

    assert report.finished and report.mentions_redacted == 1 and report.episodes == 1
    assert contents(services, ELSEWHERE) == {
        f"{BOB}/{bobs.message_id}": f"{REDACTED} look at this, {REDACTED}!",
        f"{CAROL}/{carols.message_id}": "nice weather",
    }
    assert summaries(services, ELSEWHERE) == [other.summary]
    assert nothing_of(services, ALICE)
    # Not even the name registry keeps her id (an entry left with nobody goes).
    assert [i for i in scan_all(services.repository.client) if ALICE in str(i)] == []


# Reads are bounded by the person, not by the channel ---------------------------------


class ItemsRead:
    """Counts the items DynamoDB returned to reads made through a client."""

    def __init__(self, client: Any) -> None:
        self.requests = 0
        self.items = 0
        client.meta.events.register("after-call.dynamodb.*", self._count)

    def _count(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        if model.name not in READ_OPERATIONS:
            return
        self.requests += 1
        if "Items" in parsed:
            self.items += len(parsed["Items"])
        elif "Item" in parsed:
            self.items += 1
        elif "Responses" in parsed:
            self.items += sum(len(found) for found in parsed["Responses"].values())


def test_erasing_a_person_reads_their_items_not_their_channels(services: MemoryServices) -> None:
    crowd = [message(BOB, "Bob", f"message {n}", at_ms=START_MS + n) for n in range(3000)]
    hers = [message(ALICE, "Alice", "I keep bees"), message(ALICE, "Alice", "and goats")]
    seed_messages(services, crowd + hers)
    put_items(services.repository, [profile(ALICE, "Alice", [CHANNEL])])
    put_episode(services.repository, episode("Alice and Bob chatted.", {ALICE: "", BOB: ""}), GUILD)
    reads = ItemsRead(services.repository.client)

    report = eraser(services).erase(ALICE, ["Alice"])

    assert report.finished and report.observations == 2 and report.profiles == 1
    assert nothing_of(services, ALICE)
    assert reads.items <= 100, reads.items  # the old erasure read all 3,002 messages
    assert reads.requests <= 40, reads.requests
    assert len(contents(services)) == 3000


# Cut short, continued, finished, told ------------------------------------------------


def budget(steps: int) -> Iterator[int]:
    """Plenty of time for `steps` checks, then too little."""
    yield from [60_000] * steps
    while True:
        yield 1_000


def seed_a_busy_person(services: MemoryServices) -> None:
    mine = [message(ALICE, "Alice", f"note {n}", at_ms=START_MS + n) for n in range(250)]
    seed_messages(services, mine)
    put_items(services.repository, [profile(ALICE, "Alice", [CHANNEL, ELSEWHERE])])
    put_episode(services.repository, episode("Alice wrote notes.", {ALICE: "Alice"}), GUILD)
    services.repository.put_fact(fact(ALICE, "Keeps bees"))


def test_an_erasure_out_of_time_continues_where_it_stopped(services: MemoryServices) -> None:
    seed_a_busy_person(services)
    clock = budget(4)

    first = eraser(services).erase(ALICE, ["Alice"], time_left_ms=lambda: next(clock))

    assert not first.finished and first.checkpoint is not None
    # Both channels' episodes, then one page of her items (deleted at once), then out of time.
    assert first.episodes == 1 and first.facts + first.observations == 100
    assert len(services.repository.items_of_user(ALICE)) == 250 + 1 + 1 - 100  # + profile

    reads = ItemsRead(services.repository.client)
    rest = eraser(services).erase(ALICE, checkpoint=first.checkpoint)

    assert rest.finished and rest.checkpoint is None
    # Counts carry over: nothing was done twice, everything once.
    assert (rest.observations, rest.episodes, rest.facts, rest.profiles) == (250, 1, 1, 1)
    assert nothing_of(services, ALICE)
    # The continuation did not read again what the first run had finished.
    assert reads.items < 200


def test_a_deferred_erasure_out_of_time_hands_over_and_tells_the_person(
    services: MemoryServices,
) -> None:
    seed_a_busy_person(services)
    handed_over: list[dict[str, Any]] = []
    commands = Commands(services, defer=handed_over.append)
    job = {
        "work": "erase",
        "failed": ERASE_FAILED,
        "interaction": {
            "id": "1",
            "token": "t",
            "application_id": "2",
            "type": 3,
            "guild_id": GUILD,
            "channel_id": CHANNEL,
            "member": {"user": {"id": ALICE, "global_name": "Alice"}, "permissions": "0"},
            "data": {},
        },
    }
    clock = budget(4)

    progress = commands.finish(job, time_left_ms=lambda: next(clock))

    assert "Still erasing" in progress["content"] and len(handed_over) == 1
    continuation = handed_over[0]
    assert continuation["erasure"] and continuation["failed"] == ERASE_FAILED
    done = commands.finish(continuation, time_left_ms=lambda: 60_000)
    assert "I erased everything I kept about you: 1 facts, 250 recorded" in done["content"]
    assert len(handed_over) == 1 and nothing_of(services, ALICE)


def test_a_failed_erasure_tells_the_person_and_raises_for_the_retries(
    fake_discord: FakeDiscordRest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISCORD_API_BASE", fake_discord.url)
    job = {
        "work": "erase",
        "failed": ERASE_FAILED,
        "interaction": {"application_id": "2", "token": "tok"},
    }

    def broken(_: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("DynamoDB went away")

    with pytest.raises(RuntimeError):
        finish_and_reply(job, broken)

    told = fake_discord.wait_for(lambda r: r.method == "PATCH" and "tok" in r.path, timeout=5)
    assert "could not finish erasing" in told.body["content"]
    assert "retried" in told.body["content"]


def test_erasure_bars_consolidation_while_it_runs_and_only_briefly_after(
    services: MemoryServices,
) -> None:
    seed_a_busy_person(services)
    clock = budget(1)
    hashed = services.opt_outs.hash_of(ALICE)

    eraser(services).erase(ALICE, time_left_ms=lambda: next(clock))
    assert services.opt_outs.barred([ALICE, BOB]) == {ALICE}

    report: ErasureReport = eraser(services).erase(ALICE)
    assert report.finished
    marker = services.repository.client.get_item(
        TableName=TABLE, Key={"pk": {"S": keys.ERASED_PK}, "sk": {"S": hashed}}
    )["Item"]
    settle = services.settings.lock_lease_seconds
    assert int(marker["expires_at"]["N"]) <= epoch_seconds(services.clock.now_ms()) + settle


def test_an_erasure_that_outlived_the_interaction_token_is_still_finished(
    fake_discord: FakeDiscordRest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Discord honours an interaction token for 15 minutes; a long erasure ends after it.
    monkeypatch.setenv("DISCORD_API_BASE", fake_discord.url)
    fake_discord.script(401, {"message": "Invalid Webhook Token", "code": 50027}, method="PATCH")
    job = {"work": "erase", "interaction": {"application_id": "2", "token": "old"}}
    finished: list[str] = []

    def erase(_: dict[str, Any]) -> dict[str, Any]:
        finished.append("done")
        return {"content": "Done.", "components": []}

    finish_and_reply(job, erase)  # no exception: no retry, nothing in the failure queue

    assert finished == ["done"]
    assert fake_discord.wait_for(lambda r: r.method == "PATCH" and "old" in r.path, timeout=5)


def test_any_other_refusal_of_the_final_answer_is_raised_for_the_retries(
    fake_discord: FakeDiscordRest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISCORD_API_BASE", fake_discord.url)
    fake_discord.script(400, {"message": "Invalid Form Body", "code": 50035}, method="PATCH")
    job = {"work": "erase", "interaction": {"application_id": "2", "token": "tok"}}

    with pytest.raises(DiscordApiError):
        finish_and_reply(job, lambda _: {"content": "Done.", "components": []})


# Channels of their own -----------------------------------------------------------------


def test_a_person_of_a_hundred_and_fifty_channels_loses_every_episode(
    services: MemoryServices,
) -> None:
    """The channels a person spoke in are items of their own (SPOKE#, a page of them at a
    time), not a set on the profile that grows to the item size limit: all are read."""
    channels = [f"12000000000000{n:05d}" for n in range(150)]
    for channel in channels:
        services.repository.record_spoken(channel, [(GUILD, ALICE), (GUILD, BOB)], START_MS)
        put_episode(
            services.repository, episode(f"Alice in {channel}", {ALICE: "Alice"}, channel), GUILD
        )
    put_items(services.repository, [profile(ALICE, "Alice", [])])

    report = eraser(services).erase(ALICE, ["Alice"])

    assert report.finished and report.episodes == 150 and len(report.channels) == 150
    assert nothing_of(services, ALICE)
    # Bob's items stay: only what is Alice's went.
    assert len(services.repository.user_items_page(BOB, 200, kind=keys.ItemKind.SPOKE)[0]) == 150
