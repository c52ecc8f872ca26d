"""Slash commands through InteractionsFunction's handler, signed as Discord signs them.

Deferred answers are finished through a fake Discord REST server on 127.0.0.1 that
records every request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest

from botmemory.clock import DAY_MS, SystemClock, epoch_seconds
from botmemory.discord.interactions import (
    ComponentType,
    InteractionResponseType,
    InteractionType,
    MessageFlag,
    Permissions,
)
from botmemory.memory import fact_history
from botmemory.records import Episode, Fact, FactChange, FactKind, FactSource, HistoryActor, Pin
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage.keys import ERASED_PK, episode_sk
from localrun.storage import put_episode
from scripts.make_events import ALICE, BOB, BOT, CHANNEL, GUILD, command, signed
from tests.conftest import TABLE
from tests.support.facts import a_fact
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.lambda_local import LocalLambda, sample_env

OTHER_GUILD = "1100000000000000099"
STAFF = str(Permissions.MANAGE_GUILD.value)
# The "thinking…" answer, seen only by the caller, of work that finishes through the webhook.
DEFERRED = {
    "type": InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE,
    "data": {"flags": MessageFlag.EPHEMERAL},
}
_ids = iter(range(1_600_000_000_000_000_000, 1_700_000_000_000_000_000))


class Discord:
    """Sends signed interactions to the handler and reads its answers."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, fake: FakeDiscordRest, dynamodb: Any
    ) -> None:
        env = sample_env()
        env["InteractionsFunction"].update(DISCORD_API_BASE=fake.url, DEFERRED_WORK="thread")
        self.local = LocalLambda(monkeypatch, env)
        self.fake = fake
        self.dynamodb = dynamodb

    def send(self, interaction: dict[str, Any]) -> dict[str, Any]:
        response = self.local.invoke("InteractionsFunction", signed(interaction, "r"))
        assert response["statusCode"] == 200, response
        return json.loads(response["body"])

    def run(
        self,
        name: str,
        sub: str,
        options: dict[str, Any] | None = None,
        *,
        user: str = ALICE,
        permissions: str = "0",
        guild: str | None = GUILD,
    ) -> dict[str, Any]:
        interaction = command(str(next(_ids)), name, sub, options, permissions, user)
        interaction["token"] = f"token-{interaction['id']}"
        if guild is None:
            interaction.pop("guild_id")
            interaction["user"] = interaction.pop("member")["user"]
        else:
            interaction["guild_id"] = guild
        return self.send(interaction)

    def text(self, *args: Any, **kwargs: Any) -> str:
        answer = self.run(*args, **kwargs)
        assert answer["type"] == InteractionResponseType.CHANNEL_MESSAGE_WITH_SOURCE, answer
        assert answer["data"]["flags"] == MessageFlag.EPHEMERAL
        assert answer["data"]["allowed_mentions"] == {"parse": []}
        return str(answer["data"]["content"])

    def patched(self, token_part: str = "") -> dict[str, Any]:
        """The body of the PATCH that finished a deferred answer."""
        request = self.fake.wait_for(
            lambda r: r.method == "PATCH" and token_part in r.path, timeout=10
        )
        assert request.authorization is None
        assert request.body["allowed_mentions"] == {"parse": []}
        return dict(request.body)

    def services(self) -> MemoryServices:
        return build_services(
            Settings(table_name=TABLE, memory_model="rules"),
            dynamodb=self.dynamodb,
            clock=SystemClock(),
        )


@pytest.fixture
def discord(
    monkeypatch: pytest.MonkeyPatch, fake_discord: FakeDiscordRest, dynamodb: Any
) -> Discord:
    return Discord(monkeypatch, fake_discord, dynamodb)


def seed_fact(
    services: MemoryServices, user: str, text: str, scope: str = GUILD, fact_id: str = ""
) -> Fact:
    now = services.clock.now_ms()
    fact = a_fact(user, text, scope=scope, at_ms=now, retention_days=30, kind=FactKind.PREFERENCE)
    if fact_id:
        fact = fact.model_copy(update={"fact_id": fact_id})
    services.repository.put_fact(fact)
    return fact


def facts_of(services: MemoryServices, user: str, scope: str = GUILD) -> list[str]:
    return sorted(f.text for f in services.repository.all_facts(scope, user))


def ingest_and_consolidate(discord: Discord, messages: list[tuple[str, str]]) -> None:
    """A conversation in CHANNEL through IngestFunction, then one consolidation."""
    events = []
    for n, (author, text) in enumerate(messages):
        at = 1_767_225_600_000 + n * 1000
        events.append(
            {
                "t": "MESSAGE_CREATE",
                "d": {
                    "id": str(((at - 1_420_070_400_000) << 22) | n),
                    "channel_id": CHANNEL,
                    "guild_id": GUILD,
                    "author": {
                        "id": author,
                        "username": {ALICE: "alice", BOB: "bob"}.get(author, "bot"),
                        "global_name": {ALICE: "Alice", BOB: "Bob"}.get(author, "Memorybot"),
                        "bot": author == BOT,
                    },
                    "content": text,
                    "timestamp": f"2026-01-01T00:00:{n:02d}+00:00",
                },
            }
        )
    discord.local.invoke("IngestFunction", {"events": events})
    discord.services().consolidator.consolidate(CHANNEL, force=True)


# Members ------------------------------------------------------------------------------


def test_show_lists_my_facts_with_ids_and_what_in_this_channel_mentions_me(
    discord: Discord,
) -> None:
    services = discord.services()
    mine = seed_fact(services, ALICE, "Likes green tea")
    seed_fact(services, BOB, "Plays the tuba")
    seed_fact(services, ALICE, "Keeps bees", scope=OTHER_GUILD)
    services.repository.put_pin(
        Pin(
            pin_id="pin1",
            scope=GUILD,
            target=CHANNEL,
            text="Alice runs the garden club",
            created_ms=1,
        )
    )
    now = services.clock.now_ms()
    put_episode(
        services.repository,
        Episode(
            channel_id=CHANNEL,
            episode_id="ep1",
            sk=episode_sk(now, "ep1"),
            summary="Alice and Bob planned the spring planting.",
            participant_ids=[ALICE, BOB],
            participant_names=["Alice", "Bob"],
            start_ms=now,
            end_ms=now,
            created_ms=now,
            expires_at=epoch_seconds(now + DAY_MS),
        ),
        GUILD,
    )

    text = discord.text("memory", "show")

    assert f"`{mine.fact_id}` Likes green tea (preference, self," in text
    assert "tuba" not in text and "bees" not in text
    assert "pin `pin1`: Alice runs the garden club" in text
    assert "spring planting" in text


def test_remember_stores_a_manual_fact_about_me(discord: Discord) -> None:
    text = discord.text("memory", "remember", {"text": "I grow \u202echillies\u200b on my balcony"})

    assert text.startswith("Remembered as `") and "I grow chillies on my balcony" in text
    (fact,) = discord.services().repository.all_facts(GUILD, ALICE)
    assert fact.source == FactSource.MANUAL and fact.text == "I grow chillies on my balcony"


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("x" * 241, "240 characters"),
        ("ping @everyone about my birthday", "never store text that could ping"),
        ("@here I like jazz", "never store text that could ping"),
        (f"<@{BOB}> likes sushi", "only ask me to remember things about yourself"),
        ("\u200b\u202e", "empty"),
    ],
)
def test_remember_refuses_what_it_must_not_keep(discord: Discord, text: str, refusal: str) -> None:
    answer = discord.text("memory", "remember", {"text": text})

    assert refusal in answer
    assert discord.services().repository.all_facts(GUILD, ALICE) == []


def test_forget_removes_my_matching_facts_by_id_or_words(discord: Discord) -> None:
    services = discord.services()
    tea = seed_fact(services, ALICE, "Likes green tea")
    seed_fact(services, ALICE, "Likes jasmine tea")
    seed_fact(services, ALICE, "Owns a kayak")

    by_id = discord.text("memory", "forget", {"what": tea.fact_id})
    by_words = discord.text("memory", "forget", {"what": "jasmine"})

    assert f"`{tea.fact_id}` Likes green tea" in by_id
    assert "Likes jasmine tea" in by_words
    assert facts_of(services, ALICE) == ["Owns a kayak"]


def test_forget_never_touches_another_members_fact(discord: Discord) -> None:
    services = discord.services()
    bobs = seed_fact(services, BOB, "Plays the tuba")

    answer = discord.text("memory", "forget", {"what": bobs.fact_id})

    assert "None of your facts here matches" in answer
    assert facts_of(services, BOB) == ["Plays the tuba"]


def test_opting_out_erases_what_exists_and_stops_recording(discord: Discord) -> None:
    ingest_and_consolidate(discord, [(ALICE, "I love hiking in the Alps.")] + [(BOB, "ok")] * 3)
    assert facts_of(discord.services(), ALICE) == ["Alice loves hiking in the Alps"]
    (hiking,) = discord.services().repository.all_facts(GUILD, ALICE)
    assert discord.services().repository.history_of(GUILD, hiking.fact_id)

    prompt = discord.run("memory", "optout")
    assert "erase" in prompt["data"]["content"]  # it asks first, and says what it does
    assert facts_of(discord.services(), ALICE) == ["Alice loves hiking in the Alps"]
    done = confirm_flow(discord, "memory", "optout", "optout:confirm")
    assert "You are opted out" in done["content"] and "1 facts" in done["content"]
    assert discord.dynamodb.scan(
        TableName=TABLE,
        FilterExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": ERASED_PK}},
    )["Items"]  # consolidation is barred

    ingest_and_consolidate(discord, [(ALICE, "I use Vim every day.")] + [(BOB, "nice")] * 3)
    services = discord.services()
    assert facts_of(services, ALICE) == []
    assert services.repository.items_of_user(ALICE) == []
    assert services.repository.history_of(GUILD, hiking.fact_id) == []
    assert everything_about(discord.dynamodb, ["hiking"]) == []
    assert "opted out" in discord.text("memory", "remember", {"text": "I like tea"})

    assert "opted in" in discord.text("memory", "optin")
    # The erasure marker outlives the consolidations that began before it; a lease later:
    expire_erasure_markers(discord.dynamodb)
    ingest_and_consolidate(discord, [(ALICE, "I use Emacs now.")] + [(BOB, "sure")] * 3)
    assert facts_of(discord.services(), ALICE) == ["Alice uses Emacs"]


def expire_erasure_markers(dynamodb: Any) -> None:
    """What a lock lease's time does to the marker a finished erasure leaves."""
    markers = dynamodb.scan(
        TableName=TABLE,
        FilterExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": ERASED_PK}},
    )["Items"]
    for marker in markers:
        dynamodb.update_item(
            TableName=TABLE,
            Key={"pk": marker["pk"], "sk": marker["sk"]},
            UpdateExpression="SET expires_at = :past",
            ExpressionAttributeValues={":past": {"N": "1"}},
        )


def everything_about(dynamodb: Any, needles: list[str]) -> list[dict[str, Any]]:
    """Items, in the table and in every index, that hold any of the needles."""
    table = dynamodb.describe_table(TableName=TABLE)["Table"]
    sources: list[dict[str, Any]] = [{}] + [
        {"IndexName": index["IndexName"]} for index in table.get("GlobalSecondaryIndexes", [])
    ]
    found = []
    for source in sources:
        kwargs: dict[str, Any] = {"TableName": TABLE, **source}
        while True:
            page = dynamodb.scan(**kwargs)
            found += [
                i for i in page["Items"] if any(n.lower() in json.dumps(i).lower() for n in needles)
            ]
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return found


def confirm_flow(discord: Discord, name: str, sub: str, confirm: str) -> dict[str, Any]:
    """Run a command that asks first, press its confirm button, and wait for the answer."""
    prompt = discord.run(name, sub)
    buttons = prompt["data"]["components"][0]["components"]
    assert [b["custom_id"] for b in buttons] == [confirm, confirm.replace("confirm", "cancel")]
    click = command(str(next(_ids)), name, sub)
    click.update(
        type=InteractionType.MESSAGE_COMPONENT,
        token="token-confirm",
        data={"custom_id": confirm, "component_type": ComponentType.BUTTON},
    )
    assert discord.send(click) == {"type": InteractionResponseType.DEFERRED_UPDATE_MESSAGE}
    return discord.patched("token-confirm")


def forgetme_flow(discord: Discord) -> dict[str, Any]:
    return confirm_flow(discord, "forgetme", "", "forgetme:confirm")


def test_forgetme_leaves_nothing_of_the_person(discord: Discord) -> None:
    ingest_and_consolidate(
        discord,
        [
            (ALICE, "I'm a nurse and I love hiking in the Alps."),
            (BOB, "Alice should try the Dolomites."),
            (ALICE, "I use Neovim for everything."),
            (BOT, "Noted, Alice!"),
            (BOB, "I use Emacs."),
        ],
    )
    services = discord.services()
    seed_fact(services, ALICE, "Keeps bees", scope=OTHER_GUILD)
    seed_fact(services, ALICE, "Said something in a DM", scope="dm")
    discord.text("memory-staff", "pin", {"where": "global", "text": "Be kind"}, permissions=STAFF)
    discord.text("memory", "remember", {"text": "I grow chillies"})
    # Alice, as staff, deletes a fact of Bob's: its history names her as who acted.
    tuba = seed_fact(services, BOB, "Plays the tuba")
    discord.text("memory-staff", "forget-fact", {"id": tuba.fact_id}, permissions=STAFF)
    assert everything_about(discord.dynamodb, [ALICE, "Alice"])
    chillies = next(f for f in services.repository.all_facts(GUILD, ALICE) if "chillies" in f.text)
    assert services.repository.history_of(GUILD, chillies.fact_id)  # her facts have history

    done = forgetme_flow(discord)

    assert done["components"] == []
    assert "I erased everything I kept about you" in done["content"]
    # 3 facts from the conversation, 1 remembered, 1 in another server, 1 in DMs.
    assert "6 facts" in done["content"] and "1 pins" in done["content"]
    assert everything_about(discord.dynamodb, [ALICE, "Alice"]) == []  # history included
    assert facts_of(discord.services(), BOB) == ["Bob uses Emacs"]  # others keep theirs
    (bobs,) = services.repository.history_of(GUILD, tuba.fact_id)  # Bob's, without her id
    assert (bobs.actor, bobs.actor_id, bobs.old) == (HistoryActor.STAFF, None, "Plays the tuba")


def test_forgetme_can_be_cancelled(discord: Discord) -> None:
    discord.services()
    seed_fact(discord.services(), ALICE, "Keeps bees")
    click = command(str(next(_ids)), "forgetme", "")
    click.update(
        type=InteractionType.MESSAGE_COMPONENT,
        data={"custom_id": "forgetme:cancel", "component_type": ComponentType.BUTTON},
    )

    answer = discord.send(click)

    assert answer["type"] == InteractionResponseType.UPDATE_MESSAGE
    assert "nothing was erased" in answer["data"]["content"]
    assert facts_of(discord.services(), ALICE) == ["Keeps bees"]


def test_forgetme_cut_short_by_a_fault_finishes_when_run_again(
    discord: Discord, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest_and_consolidate(discord, [(ALICE, "I love hiking."), (ALICE, "I use Vim."), (BOB, "ok")])
    from botmemory.storage.repository import MemoryRepository
    from botmemory.storage.table import ItemRef

    original = MemoryRepository.delete_items
    calls = {"n": 0}

    def flaky(self: MemoryRepository, refs: Iterable[ItemRef]) -> int:
        calls["n"] += 1
        if calls["n"] == 2:  # after the channel summaries, before the person's own items
            raise RuntimeError("DynamoDB went away")
        return original(self, refs)

    monkeypatch.setattr(MemoryRepository, "delete_items", flaky)
    failed = forgetme_flow(discord)
    assert "could not finish erasing" in failed["content"]
    assert "retried" in failed["content"]
    assert everything_about(discord.dynamodb, [ALICE])  # half done

    discord.fake.requests.clear()
    done = forgetme_flow(discord)

    assert "I erased everything" in done["content"]
    assert everything_about(discord.dynamodb, [ALICE, "Alice"]) == []


# Staff --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sub", "options"),
    [
        ("user", {"member": BOB}),
        ("forget-fact", {"id": "abcdefgh"}),
        ("restore-fact", {"member": BOB, "id": "abcdefgh"}),
        ("pin", {"where": "global", "text": "hi"}),
        ("unpin", {"id": "abcdefgh"}),
        ("history", {"id": "abcdefgh"}),
        ("reset-summary", {}),
    ],
)
def test_a_member_cannot_use_staff_commands(
    discord: Discord, sub: str, options: dict[str, Any]
) -> None:
    services = discord.services()
    seed_fact(services, BOB, "Plays the tuba", fact_id="abcdefgh")
    interaction = command(str(next(_ids)), "memory-staff", sub, options, "0", ALICE)
    # A forged claim in the payload changes nothing: rights come from member.permissions.
    interaction["data"]["default_member_permissions"] = STAFF

    answer = discord.send(interaction)

    assert "Only members with the Manage Server permission" in answer["data"]["content"]
    assert facts_of(services, BOB) == ["Plays the tuba"]
    assert services.repository.scope_pins(GUILD, 10) == []


def test_staff_list_a_members_facts_in_a_deferred_answer(discord: Discord) -> None:
    services = discord.services()
    tuba = seed_fact(services, BOB, "Plays the tuba")
    seed_fact(services, BOB, "Lives far away", scope=OTHER_GUILD)

    answer = discord.run("memory-staff", "user", {"member": BOB}, permissions=STAFF)

    assert answer == DEFERRED
    listing = discord.patched()["content"]
    assert f"`{tuba.fact_id}` Plays the tuba" in listing and "far away" not in listing


def test_staff_forget_a_fact_of_this_server_only(discord: Discord) -> None:
    services = discord.services()
    here = seed_fact(services, BOB, "Plays the tuba")
    elsewhere = seed_fact(services, BOB, "Plays the oboe", scope=OTHER_GUILD)

    deleted = discord.text("memory-staff", "forget-fact", {"id": here.fact_id}, permissions=STAFF)
    refused = discord.text(
        "memory-staff", "forget-fact", {"id": elsewhere.fact_id}, permissions=STAFF
    )

    assert f"Deleted `{here.fact_id}`" in deleted and "Plays the tuba" in deleted
    assert "no fact with that id in this server" in refused
    assert facts_of(services, BOB, OTHER_GUILD) == ["Plays the oboe"]


def test_staff_read_a_facts_history_oldest_first_as_text(discord: Discord) -> None:
    remembered = discord.text("memory", "remember", {"text": "I like *jazz* and _blues_"}, user=BOB)
    fact_id = remembered.split("`")[1]
    discord.text("memory", "remember", {"text": "I like *jazz* and _Blues_!"}, user=BOB)
    discord.text("memory-staff", "forget-fact", {"id": fact_id}, permissions=STAFF)

    # discord.text checks: ephemeral, allowed_mentions {"parse": []}.
    listing = discord.text("memory-staff", "history", {"id": fact_id.upper()}, permissions=STAFF)

    header, *lines = listing.splitlines()
    assert header == f"History of `{fact_id}` about <@{BOB}>, oldest first:"
    assert len(lines) == 3
    assert f"member <@{BOB}>: created " + '"I like \\*jazz\\* and \\_blues\\_"' in lines[0]
    assert "changed" in lines[1] and " → " in lines[1]
    assert f"staff <@{ALICE}>: deleted " in lines[2]
    assert all(line[:4].isdigit() and "UTC" in line for line in lines)


def test_staff_history_is_of_this_server_only(discord: Discord) -> None:
    discord.text("memory", "remember", {"text": "I keep bees"}, user=BOB, guild=OTHER_GUILD)
    (elsewhere,) = discord.services().repository.all_facts(OTHER_GUILD, BOB)
    quiet = seed_fact(discord.services(), BOB, "Plays the tuba")  # seeded: no history yet

    refused = discord.text("memory-staff", "history", {"id": elsewhere.fact_id}, permissions=STAFF)
    no_entries = discord.text("memory-staff", "history", {"id": quiet.fact_id}, permissions=STAFF)

    assert refused == "There is no fact with that id in this server."
    assert "bees" not in refused
    assert no_entries == f"No change to `{quiet.fact_id}` is on record."


def test_a_long_history_fits_one_discord_message(discord: Discord) -> None:
    services = discord.services()
    fact = seed_fact(services, BOB, "Plays the tuba")
    now = services.clock.now_ms()
    entries = [
        fact_history.history_entry(
            fact,
            FactChange.UPDATED,
            actor=HistoryActor.MODEL,
            actor_id=ALICE,
            at_ms=now - 1000 + n,
            retention_days=30,
            old=f"{n} " + "tuba " * 40,
            new=f"{n + 1} " + "tuba " * 40,
        )
        for n in range(30)
    ]
    services.repository.put_history(entries)

    listing = discord.text("memory-staff", "history", {"id": fact.fact_id}, permissions=STAFF)

    assert len(listing) <= 2000
    assert '"0 tuba' in listing.splitlines()[1]  # oldest first
    assert listing.endswith("more.")


def test_staff_pin_and_unpin_and_recall_shows_the_pin(discord: Discord) -> None:
    pinned = discord.text(
        "memory-staff",
        "pin",
        {"where": "channel", "text": "This channel is about gardening"},
        permissions=STAFF,
    )
    pin_id = pinned.split("`")[1]

    recall = discord.local.invoke(
        "RecallFunction", {"guild_id": GUILD, "channel_id": CHANNEL, "user_id": ALICE}
    )
    assert "This channel is about gardening" in recall["memory"]

    unpinned = discord.text("memory-staff", "unpin", {"id": pin_id}, permissions=STAFF)
    assert f"Unpinned `{pin_id}`" in unpinned
    recall = discord.local.invoke(
        "RecallFunction", {"guild_id": GUILD, "channel_id": CHANNEL, "user_id": ALICE}
    )
    assert "gardening" not in recall["memory"]


def test_autocomplete_offers_only_my_facts_and_this_servers_pins(discord: Discord) -> None:
    services = discord.services()
    mine = seed_fact(services, ALICE, "Likes green tea")
    seed_fact(services, BOB, "Likes black tea")
    services.repository.put_pin(
        Pin(pin_id="pinhere", scope=GUILD, target="global", text="Be kind", created_ms=1)
    )
    services.repository.put_pin(
        Pin(pin_id="pinaway", scope=OTHER_GUILD, target="global", text="Be brief", created_ms=1)
    )

    def complete(name: str, sub: str, option: str, typed: str, permissions: str = "0") -> list[str]:
        interaction = command(str(next(_ids)), name, sub, {option: typed}, permissions, ALICE)
        interaction["type"] = InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE
        interaction["data"]["options"][0]["options"][0]["focused"] = True
        answer = discord.send(interaction)
        assert answer["type"] == InteractionResponseType.APPLICATION_COMMAND_AUTOCOMPLETE_RESULT
        return [c["value"] for c in answer["data"]["choices"]]

    assert complete("memory", "forget", "what", "tea") == [mine.fact_id]
    assert complete("memory-staff", "unpin", "id", "", permissions=STAFF) == ["pinhere"]
    assert complete("memory-staff", "unpin", "id", "") == []  # not staff
