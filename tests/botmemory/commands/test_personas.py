"""Personas are configuration staff own (`/memory-staff persona set|list|remove|purge|teach`);
people stay in control of what each persona keeps about them (`/memory show`, `/memory
forget`), and staff find a persona's facts of their server by id like any other.

Through InteractionsFunction's handler, signed as Discord signs them (tests/botmemory/commands/test_commands.py's
`Discord`), except where a deployment's personas or memory off need services of their own.
"""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.clock import DAY_MS, SystemClock, epoch_seconds
from botmemory.commands.router import Commands
from botmemory.discord.interactions import (
    ComponentType,
    InteractionResponseType,
    InteractionType,
    OptionType,
)
from botmemory.memory.fact_history import history_entry
from botmemory.records import (
    Fact,
    FactChange,
    FactKind,
    FactSource,
    HistoryActor,
    MemoryScope,
    Persona,
)
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.items import fact_values
from botmemory.storage.personas import PERSONA_MEMBER_PREFIX
from localrun.storage import put_items
from scripts.make_events import ALICE, BOB, CHANNEL, GUILD, command
from tests.botmemory.commands.test_commands import STAFF, Discord, seed_fact
from tests.conftest import TABLE
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401

OTHER_CHANNEL = "1200000000000000077"
PROMPT = "You are Bard, a cheerful storyteller.\n\nWhat you remember:\n{memory}"
_ids = iter(range(1_710_000_000_000_000_000, 1_800_000_000_000_000_000))


@pytest.fixture
def discord(
    monkeypatch: pytest.MonkeyPatch, fake_discord: FakeDiscordRest, dynamodb: Any
) -> Discord:
    return Discord(monkeypatch, fake_discord, dynamodb)


def persona_interaction(
    sub: str,
    options: dict[str, Any] | None = None,
    *,
    permissions: str = STAFF,
    user: str = ALICE,
    channel: str = CHANNEL,
    guild: str = GUILD,
) -> dict[str, Any]:
    """`/memory-staff persona <sub>` as Discord sends it: the group, then the subcommand."""
    interaction = command(str(next(_ids)), "memory-staff", "", None, permissions, user)
    values = [
        {"name": k, "type": OptionType.STRING, "value": v} for k, v in (options or {}).items()
    ]
    interaction["data"]["options"] = [
        {
            "name": "persona",
            "type": OptionType.SUB_COMMAND_GROUP,
            "options": [{"name": sub, "type": OptionType.SUB_COMMAND, "options": values}],
        }
    ]
    interaction.update(channel_id=channel, guild_id=guild, token=f"token-{interaction['id']}")
    return interaction


def persona(discord: Discord, sub: str, options: dict[str, Any] | None = None, **kw: Any) -> str:
    """Run a persona subcommand through the handler; its ephemeral answer's text."""
    answer = discord.send(persona_interaction(sub, options, **kw))
    assert answer["type"] == InteractionResponseType.CHANNEL_MESSAGE_WITH_SOURCE, answer
    assert answer["data"]["allowed_mentions"] == {"parse": []}
    return str(answer["data"]["content"])


def stored(discord: Discord, persona_id: str, guild: str = GUILD) -> Persona:
    found = discord.services().repository.persona_item(guild, persona_id)
    assert found is not None
    return found


def persona_fact(
    services: MemoryServices,
    lineage: str,
    user: str,
    text: str,
    *,
    guild: str = GUILD,
    history: bool = False,
) -> Fact:
    """A fact a persona keeps: about `user` (persona_user, with the member marker
    consolidation writes), or its own knowledge (user keys.PERSONA_SUBJECT)."""
    now = services.clock.now_ms()
    scope = keys.persona_scope(guild, lineage)
    fact = Fact(
        fact_id=f"p{abs(hash((lineage, user, text))) % 10**7:07d}",
        scope=scope,
        user_id=user,
        text=text,
        kind=FactKind.PREFERENCE,
        source=FactSource.SELF,
        created_ms=now,
        updated_ms=now,
        expires_at=epoch_seconds(now + 30 * DAY_MS),
        memory_scope=(
            MemoryScope.PERSONA if user == keys.PERSONA_SUBJECT else MemoryScope.PERSONA_USER
        ),
        lineage_id=lineage,
    )
    items = [fact_values(fact)]
    if user != keys.PERSONA_SUBJECT:
        items.append(
            {"pk": keys.scope_pk(scope), "sk": PERSONA_MEMBER_PREFIX + user, "user_id": user}
        )
    put_items(services.repository, items)
    if history:
        services.repository.put_history(
            [
                history_entry(
                    fact,
                    FactChange.CREATED,
                    actor=HistoryActor.CONSOLIDATION,
                    at_ms=now,
                    retention_days=30,
                    new=text,
                )
            ]
        )
    return fact


def items_of_lineage(dynamodb: Any, lineage: str) -> list[dict[str, Any]]:
    """Every item of the table kept in a persona's scope, or the persona item of it."""
    found = []
    kwargs: dict[str, Any] = {"TableName": TABLE}
    while True:
        page = dynamodb.scan(**kwargs)
        found += [
            item
            for item in page["Items"]
            if f"{keys.PERSONA_SCOPE_SEPARATOR}{lineage}" in item["pk"]["S"]
            or item.get("lineage_id", {}).get("S") == lineage
        ]
        if "LastEvaluatedKey" not in page:
            return found
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def click(discord: Discord, custom_id: str, *, permissions: str = STAFF) -> dict[str, Any]:
    """Press a button of an ephemeral answer."""
    interaction = command(str(next(_ids)), "memory-staff", "", None, permissions, ALICE)
    interaction.update(
        type=InteractionType.MESSAGE_COMPONENT,
        token=f"token-click-{interaction['id']}",
        data={"custom_id": custom_id, "component_type": ComponentType.BUTTON},
    )
    return discord.send(interaction)


def purge_buttons(discord: Discord, persona_id: str) -> list[str]:
    answer = discord.send(persona_interaction("purge", {"id": persona_id}))
    return [b["custom_id"] for b in answer["data"]["components"][0]["components"]]


def purge(discord: Discord, persona_id: str) -> str:
    """`purge`, confirmed: the deferred work's answer, which edits the confirmation."""
    confirm, _cancel = purge_buttons(discord, persona_id)
    assert click(discord, confirm) == {"type": InteractionResponseType.DEFERRED_UPDATE_MESSAGE}
    request = discord.fake.wait_for(
        lambda r: r.method == "PATCH" and "token-click-" in r.path, timeout=10
    )
    assert request.body["allowed_mentions"] == {"parse": []}
    assert request.body["components"] == []
    return str(request.body["content"])


# set, list, remove ----------------------------------------------------------------------


def test_set_creates_a_persona_that_answers_in_this_channel_and_list_shows_it(
    discord: Discord,
) -> None:
    created = persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})

    assert created == f"Created persona `bard` (Bard): it answers in <#{CHANNEL}>."
    bard = stored(discord, "bard")
    assert (bard.name, bard.prompt, bard.channels, bard.guild_id) == (
        "Bard",
        PROMPT,
        [CHANNEL],
        GUILD,
    )
    personas = discord.services().personas
    assert personas.for_channel(GUILD, CHANNEL) == bard
    assert personas.for_channel(GUILD, OTHER_CHANNEL) is None
    listing = persona(discord, "list")
    assert listing.startswith("In this channel the bot answers as Bard (`bard`).")
    assert f"`bard` Bard: answers in <#{CHANNEL}> (in this channel)" in listing
    elsewhere = persona(discord, "list", channel=OTHER_CHANNEL)
    assert "No persona answers in this channel" in elsewhere
    assert f"`bard` Bard: answers in <#{CHANNEL}>" in elsewhere
    assert "(in this channel)" not in elsewhere


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"id": "Bad Id!", "name": "Bard", "prompt": PROMPT}, "a persona id is 1 to 32"),
        ({"id": "-bard", "name": "Bard", "prompt": PROMPT}, "a persona id is 1 to 32"),
        ({"id": "bard", "name": "Bard", "prompt": "You are Bard."}, "{memory} exactly once"),
        (
            {"id": "bard", "name": "Bard", "prompt": "{memory} and again {memory}"},
            "{memory} exactly once",
        ),
        ({"id": "bard", "name": "\u200b\u202e", "prompt": PROMPT}, "name is 1 to 80"),
        ({"id": "bard", "name": "Bard", "prompt": PROMPT, "where": "moon"}, "Choose where"),
        ({"id": "bard", "name": "Bard"}, "Please give `prompt`"),
    ],
)
def test_set_refuses_a_bad_definition_clearly_and_writes_nothing(
    discord: Discord, options: dict[str, Any], refusal: str
) -> None:
    answer = discord.send(persona_interaction("set", options))

    assert answer["data"]["flags"] == 64  # ephemeral
    assert refusal in answer["data"]["content"]
    assert discord.services().repository.personas_of(GUILD) == []


@pytest.mark.parametrize(
    ("sub", "options"),
    [
        ("set", {"id": "sage", "name": "Sage", "prompt": PROMPT, "where": "global"}),
        ("list", {}),
        ("remove", {"id": "bard"}),
        ("purge", {"id": "bard"}),
        ("teach", {"id": "bard", "text": "The tavern opens at dusk"}),
    ],
)
def test_a_member_cannot_use_any_persona_subcommand(
    discord: Discord, sub: str, options: dict[str, Any]
) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    before = discord.services().repository.personas_of(GUILD)
    interaction = persona_interaction(sub, options, permissions="0", user=BOB)
    # A forged claim in the payload changes nothing: rights come from member.permissions.
    interaction["data"]["default_member_permissions"] = STAFF

    answer = discord.send(interaction)

    assert "Only members with the Manage Server permission" in answer["data"]["content"]
    assert "Bard" not in answer["data"]["content"]  # not even the list
    assert discord.services().repository.personas_of(GUILD) == before
    only_the_persona = [keys.scope_pk(GUILD)]  # nothing taught, nothing purged
    pks = [i["pk"]["S"] for i in items_of_lineage(discord.dynamodb, before[0].lineage_id)]
    assert pks == only_the_persona


def test_a_member_cannot_confirm_a_purge(discord: Discord) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    persona(discord, "remove", {"id": "bard"})
    confirm, _ = purge_buttons(discord, "bard")

    answer = click(discord, confirm, permissions="0")

    assert "Only members with the Manage Server permission" in answer["data"]["content"]
    assert not stored(discord, "bard").active  # still there, removed, not purged


def test_a_channel_has_one_server_persona_and_the_refusal_names_the_holder(
    discord: Discord,
) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})

    here = persona(discord, "set", {"id": "sage", "name": "Sage", "prompt": PROMPT})
    assert here == (
        f"<#{CHANNEL}> already has a persona: Bard (`bard`). Remove it or move it first; "
        "nothing was changed."
    )
    assert [p.persona_id for p in discord.services().repository.personas_of(GUILD)] == ["bard"]

    # The whole server is one place too; a channel's persona and the server's may coexist.
    server = {"id": "sage", "name": "Sage", "prompt": PROMPT, "where": "global"}
    assert persona(discord, "set", server).startswith("Created persona `sage` (Sage)")
    third = {"id": "muse", "name": "Muse", "prompt": PROMPT, "where": "global"}
    assert persona(discord, "set", third).startswith(
        "The whole server already has a persona: Sage (`sage`)."
    )
    personas = discord.services().personas
    assert personas.for_channel(GUILD, CHANNEL).persona_id == "bard"  # type: ignore[union-attr]
    assert personas.for_channel(GUILD, OTHER_CHANNEL).persona_id == "sage"  # type: ignore[union-attr]
    # Sage moved into Bard's channel: refused, Sage unchanged.
    move = {"id": "sage", "name": "Sage", "prompt": PROMPT, "where": "channel"}
    assert "already has a persona: Bard (`bard`)" in persona(discord, "set", move)
    assert stored(discord, "sage").channels == []


def test_an_update_keeps_the_lineage_and_so_its_memories(discord: Discord) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    first = stored(discord, "bard")
    services = discord.services()
    persona_fact(services, first.lineage_id, ALICE, "Likes ballads about the sea")

    changed = persona(
        discord,
        "set",
        {"id": "bard", "name": "Minstrel", "prompt": "Sing! {memory}", "where": "global"},
    )

    assert changed.startswith("Changed persona `bard` (Minstrel): it answers in the whole server.")
    assert "Its memories stay with it." in changed
    now = stored(discord, "bard")
    assert (now.lineage_id, now.created_ms) == (first.lineage_id, first.created_ms)
    assert (now.name, now.prompt, now.channels) == ("Minstrel", "Sing! {memory}", [])
    shown = discord.text("memory", "show")
    assert "What Minstrel knows about you:" in shown and "ballads about the sea" in shown
    # Without `where`, a change keeps where it answers.
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    assert stored(discord, "bard").channels == []


def test_this_channel_is_added_to_where_a_persona_answers(discord: Discord) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    options = {"id": "bard", "name": "Bard", "prompt": PROMPT, "where": "channel"}

    answer = persona(discord, "set", options, channel=OTHER_CHANNEL)

    assert f"answers in <#{CHANNEL}>, <#{OTHER_CHANNEL}>." in answer
    assert stored(discord, "bard").channels == [CHANNEL, OTHER_CHANNEL]


def test_remove_keeps_the_memories_and_the_persona_answers_nowhere(discord: Discord) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    lineage = stored(discord, "bard").lineage_id
    services = discord.services()
    fact = persona_fact(services, lineage, ALICE, "Likes ballads about the sea")

    removed = persona(discord, "remove", {"id": "bard"})

    assert removed.startswith("Removed persona `bard` (Bard): it answers nowhere now.")
    assert "kept until it is purged" in removed
    assert stored(discord, "bard").removed_ms is not None
    assert services.personas.for_channel(GUILD, CHANNEL) is None
    assert services.repository.fact(fact.scope, ALICE, fact.fact_id) == fact
    listing = persona(discord, "list")
    assert "`bard` Bard: removed " in listing and "memories kept until purged" in listing
    assert "No persona answers in this channel" in listing
    shown = discord.text("memory", "show")
    assert "What Bard knows about you (removed: kept until staff purge it):" in shown
    assert "is removed" in persona(discord, "remove", {"id": "bard"})
    # Its id cannot start a new persona while its memories are kept: they would be lost.
    again = persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    assert "`/memory-staff persona purge bard` first" in again
    assert stored(discord, "bard").lineage_id == lineage


def test_an_id_whose_removed_persona_holds_nothing_starts_a_new_lineage(
    discord: Discord,
) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    old = stored(discord, "bard")
    persona(discord, "remove", {"id": "bard"})

    again = persona(discord, "set", {"id": "bard", "name": "Bard II", "prompt": PROMPT})

    assert again.startswith("Created persona `bard` (Bard II)")
    new = stored(discord, "bard")
    assert new.active and new.lineage_id != old.lineage_id


def test_at_most_the_server_limit_of_live_personas(discord: Discord) -> None:
    from botmemory.memory.personas import MAX_PERSONAS_PER_SERVER

    services = discord.services()
    for n in range(MAX_PERSONAS_PER_SERVER):
        services.repository.put_persona(
            Persona(
                persona_id=f"p{n}",
                lineage_id=f"l{n}",
                name=f"P{n}",
                prompt=PROMPT,
                guild_id=GUILD,
                channels=[str(n)],
            ),
            replaces_ms=None,
        )

    answer = persona(discord, "set", {"id": "one-more", "name": "One", "prompt": PROMPT})

    assert f"already has {MAX_PERSONAS_PER_SERVER} personas" in answer
    assert len(services.repository.personas_of(GUILD)) == MAX_PERSONAS_PER_SERVER


def test_a_persona_changed_meanwhile_is_not_overwritten(
    discord: Discord, monkeypatch: pytest.MonkeyPatch
) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    from botmemory.storage.personas import PersonaRepository

    original = PersonaRepository.personas_of

    def stale(self: PersonaRepository, guild_id: str) -> list[Persona]:
        seen = original(self, guild_id)  # read, then someone else changes it
        bard = seen[0]
        original_put(self, bard.model_copy(update={"updated_ms": 1}), replaces_ms=bard.updated_ms)
        return seen

    original_put = PersonaRepository.put_persona
    monkeypatch.setattr(PersonaRepository, "personas_of", stale)

    answer = persona(discord, "set", {"id": "bard", "name": "Minstrel", "prompt": PROMPT})

    assert answer == "`bard` changed meanwhile: nothing was written. Please try again."
    monkeypatch.setattr(PersonaRepository, "personas_of", original)
    assert stored(discord, "bard").name == "Bard"


def test_list_shows_the_deployments_personas_and_which_one_answers_here(
    discord: Discord,
) -> None:
    helper = Persona(persona_id="helper", lineage_id="d-helper", name="Helper", prompt=PROMPT)
    services = build_services(
        Settings(table_name=TABLE, memory_model="rules"),
        dynamodb=discord.dynamodb,
        clock=SystemClock(),
        deployment_personas=lambda: [helper],
    )
    commands = Commands(services, defer=lambda job: None)

    def listing(channel: str) -> str:
        return str(commands.handle(persona_interaction("list", channel=channel))["data"]["content"])

    assert listing(CHANNEL).startswith("In this channel the bot answers as Helper (`helper`).")
    commands.handle(persona_interaction("set", {"id": "bard", "name": "Bard", "prompt": PROMPT}))

    here, elsewhere = listing(CHANNEL), listing(OTHER_CHANNEL)

    assert here.startswith("In this channel the bot answers as Bard (`bard`).")
    assert "The deployment's (this server's own come first):" in here
    assert "`helper` Helper: answers in the whole server\n" in here + "\n"
    assert elsewhere.startswith("In this channel the bot answers as Helper (`helper`).")
    assert "`helper` Helper: answers in the whole server (in this channel)" in elsewhere
    # The deployment's persona is not staff's to remove.
    removed = commands.handle(persona_interaction("remove", {"id": "helper"}))
    assert "is the deployment's persona" in removed["data"]["content"]


def test_personas_are_configuration_memory_off_or_not_but_teaching_needs_memory(
    discord: Discord,
) -> None:
    services = build_services(
        Settings(table_name=TABLE), dynamodb=discord.dynamodb, clock=SystemClock()
    )  # memory off
    commands = Commands(services, defer=lambda job: None)

    def run(sub: str, options: dict[str, Any]) -> str:
        return str(commands.handle(persona_interaction(sub, options))["data"]["content"])

    assert run("set", {"id": "bard", "name": "Bard", "prompt": PROMPT}).startswith("Created")
    assert "Memory is off" in run("teach", {"id": "bard", "text": "The tavern opens at dusk"})
    pks = [
        i["pk"]["S"] for i in items_of_lineage(discord.dynamodb, stored(discord, "bard").lineage_id)
    ]
    assert pks == [keys.scope_pk(GUILD)]  # the persona item, nothing taught


# purge --------------------------------------------------------------------------------


def test_purge_needs_a_removed_persona_and_a_confirmation(discord: Discord) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    lineage = stored(discord, "bard").lineage_id
    fact = persona_fact(discord.services(), lineage, ALICE, "Likes ballads about the sea")

    live = persona(discord, "purge", {"id": "bard"})
    assert "still answers: only a removed persona can be purged" in live
    assert "no persona `nobody`" in persona(discord, "purge", {"id": "nobody"})

    persona(discord, "remove", {"id": "bard"})
    asked = discord.send(persona_interaction("purge", {"id": "bard"}))
    assert "deletes for good everything it remembers" in asked["data"]["content"]
    assert purge_buttons(discord, "bard") == [
        f"persona-purge:confirm:bard:{lineage}",
        "persona-purge:cancel",
    ]
    cancelled = click(discord, "persona-purge:cancel")
    assert cancelled["type"] == InteractionResponseType.UPDATE_MESSAGE
    assert cancelled["data"]["content"] == "Cancelled: nothing was purged."

    repository = discord.services().repository
    assert repository.fact(fact.scope, ALICE, fact.fact_id) == fact  # asking deleted nothing
    assert not stored(discord, "bard").active


def test_purge_deletes_everything_of_that_lineage_and_nothing_of_another_or_of_people(
    discord: Discord,
) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    server = {"id": "sage", "name": "Sage", "prompt": PROMPT, "where": "global"}
    persona(discord, "set", server)
    bard, sage = stored(discord, "bard").lineage_id, stored(discord, "sage").lineage_id
    services = discord.services()
    for lineage in (bard, sage):
        persona_fact(services, lineage, keys.PERSONA_SUBJECT, "The tavern opens at dusk")
        persona_fact(services, lineage, ALICE, "Likes ballads about the sea", history=True)
        persona_fact(services, lineage, BOB, "Plays the lute")
        gone = persona_fact(services, lineage, BOB, "Hums off key")
        services.repository.forget_facts([gone], services.clock.now_ms(), 2_000_000_000)
    persona(discord, "teach", {"id": "bard", "text": "Dragons sleep in winter"})
    mine = seed_fact(services, ALICE, "Likes green tea")
    persona(discord, "remove", {"id": "bard"})
    before_sage = items_of_lineage(discord.dynamodb, sage)
    assert len(items_of_lineage(discord.dynamodb, bard)) > 8

    done = purge(discord, "bard")

    assert done == (
        "Purged `bard` (Bard): 2 facts of its own, 2 facts about 2 people, 2 history entries "
        "and 4 other records."
    )  # a tombstone, the ACTED# pointer of the staff member who taught it, 2 markers
    assert items_of_lineage(discord.dynamodb, bard) == []
    assert services.repository.persona_item(GUILD, "bard") is None
    assert items_of_lineage(discord.dynamodb, sage) == before_sage
    assert services.repository.fact(GUILD, ALICE, mine.fact_id) == mine
    assert "What Sage knows about you:" in discord.text("memory", "show")
    # A purge done is done: confirming again purges nothing more.
    assert click(discord, f"persona-purge:confirm:bard:{bard}")["type"] == (
        InteractionResponseType.DEFERRED_UPDATE_MESSAGE
    )


def test_a_purge_confirmed_for_a_lineage_never_purges_the_id_set_again(
    discord: Discord,
) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    old = stored(discord, "bard").lineage_id
    persona(discord, "remove", {"id": "bard"})
    confirm, _ = purge_buttons(discord, "bard")
    persona(discord, "set", {"id": "bard", "name": "Bard II", "prompt": PROMPT})  # meanwhile
    new = stored(discord, "bard").lineage_id
    persona_fact(discord.services(), new, ALICE, "Likes ballads about the sea")

    click(discord, confirm)

    request = discord.fake.wait_for(lambda r: r.method == "PATCH", timeout=10)
    assert "changed since you confirmed: nothing was purged" in request.body["content"]
    assert old != new and stored(discord, "bard").active
    assert items_of_lineage(discord.dynamodb, new)
