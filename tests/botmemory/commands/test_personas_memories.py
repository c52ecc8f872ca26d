"""Persona commands, continued: teach, what members see and forget of a persona's memories, and
the protocol of the subcommand group."""

from __future__ import annotations

import json

import pytest

from botmemory.commands.invocation import deferred_interaction, parse_invocation
from botmemory.commands.router import Commands
from botmemory.discord.interactions import (
    InteractionType,
)
from botmemory.records import (
    FactChange,
    FactSource,
    HistoryActor,
    MemoryScope,
)
from botmemory.storage import keys
from localrun.storage import put_items
from scripts.make_events import ALICE, BOB, CHANNEL, GUILD, command
from tests.botmemory.commands.test_commands import OTHER_GUILD, STAFF, Discord, seed_fact
from tests.botmemory.commands.test_personas import (
    PROMPT,
    _ids,
    persona,
    persona_fact,
    persona_interaction,
    stored,
)
from tests.botmemory.commands.test_personas import discord as discord

# teach --------------------------------------------------------------------------------


def test_teach_writes_the_personas_own_knowledge_with_a_staff_history_entry(
    discord: Discord,
) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    lineage = stored(discord, "bard").lineage_id

    taught = persona(discord, "teach", {"id": "bard", "text": "The tavern opens at \u202edusk"})

    assert taught.startswith("Taught Bard (`bard`), as `") and "The tavern opens at dusk" in taught
    scope = keys.persona_scope(GUILD, lineage)
    repository = discord.services().repository
    (fact,) = repository.all_facts(scope, keys.PERSONA_SUBJECT)
    assert fact.fact_id in taught
    assert (fact.text, fact.memory_scope, fact.source, fact.lineage_id) == (
        "The tavern opens at dusk",
        MemoryScope.PERSONA,
        FactSource.OPERATOR,
        lineage,
    )
    (entry,) = repository.history_of(scope, fact.fact_id)
    assert (entry.actor, entry.actor_id, entry.change) == (
        HistoryActor.STAFF,
        ALICE,
        FactChange.CREATED,
    )
    # It is no one's: no member's /memory show lists it, no member can forget it.
    assert "tavern" not in discord.text("memory", "show")
    refused = discord.text("memory", "forget", {"what": fact.fact_id})
    assert "None of your facts here matches" in refused
    assert repository.all_facts(scope, keys.PERSONA_SUBJECT) == [fact]


@pytest.mark.parametrize(
    "text",
    [
        f"<@{BOB}> tells the best stories",
        f"<@!{BOB}> tells the best stories",
        f"Stories come from <#{CHANNEL}>",
        "The <@&1400000000000000009> role runs the tavern",
        f"Member {BOB} tells the best stories",
        "@everyone loves a ballad",
        "Rosalind tells the best stories",  # a member's name here
        "ROSALIND's lute is out of tune",
    ],
)
def test_teach_refuses_text_that_names_or_pings_anyone(discord: Discord, text: str) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    lineage = stored(discord, "bard").lineage_id
    services = discord.services()
    put_items(
        services.repository,
        [
            {
                "pk": keys.scope_pk(GUILD),
                "sk": keys.name_sk("rosalind"),
                "name": "Rosalind",
                "scope": GUILD,
                "user_ids": {BOB},
            }
        ],
    )

    answer = persona(discord, "teach", {"id": "bard", "text": text})

    assert "Taught" not in answer
    assert any(words in answer for words in ("about no one", "never store text that could ping")), (
        answer
    )
    scope = keys.persona_scope(GUILD, lineage)
    assert services.repository.all_facts(scope, keys.PERSONA_SUBJECT) == []


def test_teach_needs_a_live_persona(discord: Discord) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    persona(discord, "remove", {"id": "bard"})

    removed = persona(discord, "teach", {"id": "bard", "text": "The tavern opens at dusk"})
    unknown = persona(discord, "teach", {"id": "nobody", "text": "The tavern opens at dusk"})

    assert "`bard` is removed" in removed
    assert unknown == "There is no persona `nobody` in this server."


# People stay in control -----------------------------------------------------------------


def test_memory_show_lists_my_facts_by_scope_and_persona(discord: Discord) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    server = {"id": "sage", "name": "Sage *the wise*", "prompt": PROMPT, "where": "global"}
    persona(discord, "set", server)
    persona(discord, "set", {"id": "muse", "name": "Muse", "prompt": PROMPT}, channel="5")
    bard, sage = stored(discord, "bard").lineage_id, stored(discord, "sage").lineage_id
    services = discord.services()
    mine = seed_fact(services, ALICE, "Likes green tea")
    ballads = persona_fact(services, bard, ALICE, "Likes ballads about the sea")
    riddles = persona_fact(services, sage, ALICE, "Asks for riddles")
    persona_fact(services, bard, BOB, "Plays the lute")  # Bob's
    persona_fact(services, bard, keys.PERSONA_SUBJECT, "The tavern opens at dusk")  # no one's
    persona_fact(services, sage, ALICE, "Knows the old map", guild=OTHER_GUILD)  # elsewhere
    persona(discord, "remove", {"id": "sage"})

    shown = discord.text("memory", "show")

    lines = shown.splitlines()
    assert lines[0] == "What I remember about you here:"
    assert lines[1] == "About you (every persona here):"
    assert lines[2].startswith(f"`{mine.fact_id}` Likes green tea (preference, self, ")
    assert lines[3] == "What Bard knows about you:"
    assert lines[4].startswith(f"`{ballads.fact_id}` Likes ballads about the sea (")
    assert lines[5] == (
        "What Sage \\*the wise\\* knows about you (removed: kept until staff purge it):"
    )
    assert lines[6].startswith(f"`{riddles.fact_id}` Asks for riddles (")
    assert "Muse" not in shown  # it knows nothing of her
    assert "lute" not in shown and "tavern" not in shown and "old map" not in shown
    assert len(shown) <= 2000


def test_memory_show_of_someone_a_persona_alone_knows(discord: Discord) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    persona_fact(discord.services(), stored(discord, "bard").lineage_id, ALICE, "Hums sea shanties")

    shown = discord.text("memory", "show")

    assert "About you (every persona here)" not in shown
    assert "What Bard knows about you:" in shown and "Hums sea shanties" in shown


def test_forget_removes_my_persona_fact_and_never_anyone_elses(discord: Discord) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    lineage = stored(discord, "bard").lineage_id
    services = discord.services()
    ballads = persona_fact(services, lineage, ALICE, "Likes ballads about the sea")
    shanties = persona_fact(services, lineage, ALICE, "Hums sea shanties")
    bobs = persona_fact(services, lineage, BOB, "Likes ballads about the moon")
    scope = keys.persona_scope(GUILD, lineage)

    typing = command(str(next(_ids)), "memory", "forget", {"what": "ballads"}, "0", ALICE)
    typing["type"] = InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE
    typing["data"]["options"][0]["options"][0]["focused"] = True
    offered = discord.send(typing)
    by_id = discord.text("memory", "forget", {"what": ballads.fact_id})
    by_words = discord.text("memory", "forget", {"what": "shanties"})
    not_mine = discord.text("memory", "forget", {"what": bobs.fact_id})

    assert [c["value"] for c in offered["data"]["choices"]] == [ballads.fact_id]
    assert f"`{ballads.fact_id}` Likes ballads about the sea" in by_id
    assert f"`{shanties.fact_id}` Hums sea shanties" in by_words
    assert "None of your facts here matches" in not_mine
    assert services.repository.all_facts(scope, ALICE) == []
    assert services.repository.all_facts(scope, BOB) == [bobs]
    (entry,) = services.repository.history_of(scope, ballads.fact_id)  # kept in its scope
    assert (entry.change, entry.actor, entry.actor_id) == (
        FactChange.DELETED,
        HistoryActor.MEMBER,
        ALICE,
    )


def test_staff_forget_fact_and_history_find_persona_facts_of_this_server_only(
    discord: Discord,
) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    lineage = stored(discord, "bard").lineage_id
    services = discord.services()
    here = persona_fact(services, lineage, BOB, "Plays the lute", history=True)
    knowledge = persona_fact(services, lineage, keys.PERSONA_SUBJECT, "The tavern opens at dusk")
    elsewhere = persona_fact(services, lineage, BOB, "Plays the harp", guild=OTHER_GUILD)

    def staff(sub: str, fact_id: str) -> str:
        return discord.text("memory-staff", sub, {"id": fact_id}, permissions=STAFF)

    history = staff("history", here.fact_id)
    deleted = staff("forget-fact", here.fact_id)
    taught_gone = staff("forget-fact", knowledge.fact_id)
    refused = staff("forget-fact", elsewhere.fact_id)
    after = staff("history", here.fact_id)  # the fact is gone, its history is not

    assert history.startswith(
        f"History of `{here.fact_id}` about <@{BOB}>, as Bard (`bard`) knows them, oldest first:"
    )
    assert deleted == (
        f"Deleted `{here.fact_id}` about <@{BOB}>, as Bard (`bard`) knows them: Plays the lute"
    )
    assert taught_gone == (
        f"Deleted `{knowledge.fact_id}` known to Bard (`bard`) for everyone: "
        "The tavern opens at dusk"
    )
    assert refused == "There is no fact with that id in this server."
    assert "deleted" in after.splitlines()[-1] and f"staff <@{ALICE}>" in after
    assert staff("history", elsewhere.fact_id) == "There is no fact with that id in this server."
    scope_elsewhere = keys.persona_scope(OTHER_GUILD, lineage)
    assert services.repository.all_facts(scope_elsewhere, BOB) == [elsewhere]


# The protocol: a group's subcommand survives deferral ----------------------------------


def test_a_groups_subcommand_and_options_survive_a_deferred_job() -> None:
    interaction = persona_interaction("teach", {"id": "bard", "text": "The tavern opens"})

    parsed = parse_invocation(interaction)
    again = parse_invocation(json.loads(json.dumps(deferred_interaction(parsed))))

    assert parsed.path == ("memory-staff", "persona", "teach")
    assert (again.path, again.options) == (parsed.path, parsed.options)
    assert again.options == {"id": "bard", "text": "The tavern opens"}


def test_an_unknown_subcommand_of_the_group_is_named(discord: Discord) -> None:
    assert (
        persona(discord, "dance")
        == "Sorry, I don't know the command `/memory-staff persona dance`."
    )


def test_persona_ids_autocomplete_with_what_each_subcommand_can_act_on(discord: Discord) -> None:
    persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT})
    persona(discord, "set", {"id": "sage", "name": "Sage", "prompt": PROMPT, "where": "global"})
    persona(discord, "remove", {"id": "sage"})

    def offered(sub: str, permissions: str = STAFF) -> list[str]:
        interaction = persona_interaction(sub, {"id": ""}, permissions=permissions)
        interaction["type"] = InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE
        interaction["data"]["options"][0]["options"][0]["options"][0]["focused"] = True
        return [c["value"] for c in discord.send(interaction)["data"]["choices"]]

    assert offered("remove") == offered("teach") == ["bard"]
    assert offered("purge") == ["sage"]
    assert offered("remove", permissions="0") == []


def test_only_the_persona_list_skips_replay_protection(discord: Discord) -> None:
    commands = Commands(discord.services(), defer=lambda job: None)

    assert commands.changes_nothing(persona_interaction("list"))
    for sub, options in [
        ("set", {"id": "bard", "name": "Bard", "prompt": PROMPT}),
        ("remove", {"id": "bard"}),
        ("purge", {"id": "bard"}),
        ("teach", {"id": "bard", "text": "The tavern opens at dusk"}),
    ]:
        assert not commands.changes_nothing(persona_interaction(sub, options)), sub
