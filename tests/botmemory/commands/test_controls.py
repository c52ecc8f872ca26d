"""Members and staff decide what is kept (botmemory.commands.controls, botmemory.people.controls):
a channel's memory switched off, a channel's memory erased, opt-in consent, the first
answer's notice, a member's pause.

Through the functions template.yaml declares: InteractionsFunction signed as Discord signs
(its timestamp the moving clock's), IngestFunction, the stream into ConsolidateFunction (a
memory model on 127.0.0.1 that learns "{name} keeps goldfish") and SearchIndexFunction,
AnswerFunction with a chat model on 127.0.0.1; one ManualClock every function reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from botmemory.answering.notices import NOTICE
from botmemory.discord.interactions import (
    InteractionResponseType,
    InteractionType,
    OptionType,
    Permissions,
)
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.storage import keys
from localrun import gateway as gw
from localrun.samtemplate import passes_filters
from tests.conftest import TABLE, scan_all
from tests.invariants.test_09_bad_input import signed_at
from tests.stack.test_sam_local import stream_records
from tests.support.deployment import Deployment, guild_create
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import RunningWriter, Teaching, fact_writer  # noqa: F401
from tests.support.fake_providers import ScriptServer

GENERAL, VENT = gw.CHANNEL, "200000000000000555"
STAFF = str(Permissions.MANAGE_GUILD.value)
CAROL = "300000000000000003"


class Controls:
    """The deployment, with signed interactions and the search index following the stream."""

    def __init__(self, deployment: Deployment, index_path: Path) -> None:
        self.d = deployment
        self.index_path = index_path
        self.indexed: set[str] = set()
        self._ids = iter(range(1_650_000_000_000_000_000, 1_660_000_000_000_000_000))

    def interact(self, interaction: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(interaction, separators=(",", ":"))
        event = signed_at(body, str(self.d.clock.now_ms() // 1000), f"r{interaction['id']}")
        response = self.d.local.invoke("InteractionsFunction", event)
        assert response["statusCode"] == 200, response
        answer: dict[str, Any] = json.loads(response["body"])
        return answer

    def base(self, user: str, channel: str, permissions: str) -> dict[str, Any]:
        interaction_id = str(next(self._ids))
        return {
            "id": interaction_id,
            "application_id": gw.BOT,
            "token": f"token-{interaction_id}",
            "version": 1,
            "guild_id": gw.GUILD,
            "channel_id": channel,
            "member": {"user": gw.user(user), "roles": [], "permissions": permissions},
        }

    def run(
        self,
        command: str,
        path: list[str],
        options: dict[str, Any] | None = None,
        *,
        user: str = gw.ALICE,
        channel: str = GENERAL,
        staff: bool = False,
    ) -> dict[str, Any]:
        """`/command group sub options` (a path of one or two names)."""
        given = [
            {
                "name": name,
                "type": OptionType.CHANNEL
                if name == "channel"
                else OptionType.INTEGER
                if isinstance(value, int)
                else OptionType.STRING,
                "value": value,
            }
            for name, value in (options or {}).items()
        ]
        nested: list[dict[str, Any]] = [
            {"name": path[-1], "type": OptionType.SUB_COMMAND, "options": given}
        ]
        if len(path) == 2:
            nested = [{"name": path[0], "type": OptionType.SUB_COMMAND_GROUP, "options": nested}]
        interaction = self.base(user, channel, STAFF if staff else "0")
        interaction.update(
            type=InteractionType.APPLICATION_COMMAND,
            data={"id": "1400000000000000001", "name": command, "type": 1, "options": nested},
        )
        return self.interact(interaction)

    def text(self, *args: Any, **kwargs: Any) -> str:
        answer = self.run(*args, **kwargs)
        assert answer["type"] == InteractionResponseType.CHANNEL_MESSAGE_WITH_SOURCE, answer
        return str(answer["data"]["content"])

    def press(self, custom_id: str, *, user: str = gw.ALICE, staff: bool = True) -> dict[str, Any]:
        interaction = self.base(user, GENERAL, STAFF if staff else "0")
        interaction.update(
            type=InteractionType.MESSAGE_COMPONENT,
            data={"custom_id": custom_id, "component_type": 2},
        )
        return self.interact(interaction)

    def follow_index(self) -> None:
        """SearchIndexFunction on the stream records not yet given to it."""
        d = self.d
        arn = d.dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        records = stream_records(d.dynamodb, arn, self.indexed)
        self.indexed |= {r["dynamodb"]["SequenceNumber"] for r in records}
        filters = d.local.template.stream_filters("SearchIndexFunction")
        delivered = [r for r in records if passes_filters(filters, r)]
        if delivered:
            answer = d.local.invoke("SearchIndexFunction", {"Records": delivered})
            assert answer == {"batchItemFailures": []}

    def passages(self) -> list[Any]:
        index = SqliteSearchIndex(str(self.index_path))
        try:
            return list(index.passages())
        finally:
            index.close()

    def items(self) -> list[dict[str, Any]]:
        return scan_all(self.d.dynamodb)


def channel_items(items: list[dict[str, Any]], channel: str) -> list[dict[str, Any]]:
    return [i for i in items if i["pk"]["S"] == keys.channel_pk(channel)]


def said(items: list[dict[str, Any]], channel: str, author: str) -> list[str]:
    """What `author` said in `channel`, as recorded."""
    return [
        i["content"]["S"]
        for i in channel_items(items, channel)
        if i["sk"]["S"].startswith(keys.OBS_PREFIX)
        and i.get("author_id", {}).get("S") == author
        and "content" in i
    ]


def short_term_channels(items: list[dict[str, Any]], user: str) -> set[str]:
    entries = [
        i
        for i in items
        if i["pk"]["S"] == keys.user_pk(gw.GUILD, user) and i["sk"]["S"] == "RECENT"
    ]
    return {
        name.removeprefix(keys.SHORT_TERM_ATTRIBUTE_PREFIX)
        for item in entries
        for name in item
        if name.startswith(keys.SHORT_TERM_ATTRIBUTE_PREFIX)
    }


@pytest.fixture
def notice() -> bool:
    """Whether AnswerFunction says the first answer's notice (a test asks for it)."""
    return False


@pytest.fixture
def controls(
    notice: bool,
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
    fact_writer: RunningWriter,  # noqa: F811
    tmp_path: Path,
) -> Controls:
    fact_writer.writer.teachings = [Teaching("goldfish", "{name} keeps goldfish")]
    deployment = Deployment(
        monkeypatch,
        fake_discord,
        dynamodb,
        chat_server,
        tmp_path / "index.db",
        {
            "ConsolidateFunction": {**fact_writer.environment(), "MEMORY_CONSOLIDATE_EVERY": "2"},
            "InteractionsFunction": {
                "DISCORD_API_BASE": fake_discord.url,
                "DEFERRED_WORK": "thread",
            },
            "AnswerFunction": {"MEMORY_PRIVACY_NOTICE": "true" if notice else "false"},
        },
    )
    deployment.say(guild_create([GENERAL, VENT], []))
    return Controls(deployment, tmp_path / "index.db")


# A channel's memory off -------------------------------------------------------------------


def test_a_channel_switched_off_keeps_nothing_new_and_still_gets_answers(
    controls: Controls,
) -> None:
    d = controls.d
    d.say(d.message(gw.ALICE, "before the switch", VENT))

    refused = controls.text("memory-staff", ["channel", "off"], {"channel": VENT})
    assert "Manage Server" in refused
    answer = controls.text("memory-staff", ["channel", "off"], {"channel": VENT}, staff=True)
    assert f"Memory is off in <#{VENT}>" in answer
    d.say(d.message(gw.ALICE, "a vent: nobody should keep this", VENT))
    d.ask(gw.BOB, "what do you think?", VENT, "I hear you.")
    d.say(d.message(gw.BOB, "still talking in general", GENERAL))

    items = controls.items()
    assert said(items, VENT, gw.ALICE) == ["before the switch"]
    assert said(items, VENT, gw.BOB) == []
    assert said(items, VENT, gw.BOT) == []  # the bot's own answer there neither
    assert VENT not in short_term_channels(items, gw.BOB)
    assert d.posted(VENT)[-1].startswith("I hear you.")  # it still answers there
    assert said(items, GENERAL, gw.BOB) == ["still talking in general"]
    status = controls.text("memory-staff", ["channel", "status"], {"channel": VENT}, staff=True)
    assert status.startswith(f"Memory is off in <#{VENT}>")

    controls.text("memory-staff", ["channel", "on"], {"channel": VENT}, staff=True)
    d.say(d.message(gw.ALICE, "after it is on again", VENT))
    assert said(controls.items(), VENT, gw.ALICE)[-1] == "after it is on again"


def test_channel_forget_leaves_nothing_of_the_channel_in_table_or_index(
    controls: Controls, fake_discord: FakeDiscordRest
) -> None:
    d = controls.d
    d.say(
        d.message(gw.ALICE, "I keep goldfish, two of them", VENT),
        d.message(gw.BOB, "lovely", VENT),
        d.message(gw.ALICE, "I like walking by the river", GENERAL),
        d.message(gw.BOB, "me too", GENERAL),
    )
    d.ask(gw.ALICE, "how are my goldfish?", VENT, "Swimming, I hope.")
    controls.follow_index()
    before = controls.items()
    assert channel_items(before, VENT) and channel_items(before, GENERAL)
    facts = [i for i in before if i["sk"]["S"].startswith(keys.FACT_PREFIX)]
    assert any("goldfish" in f["text"]["S"] for f in facts)
    assert any(p.channel_id == VENT for p in controls.passages())

    confirm = controls.run("memory-staff", ["channel", "forget"], {"channel": VENT}, staff=True)
    button = confirm["data"]["components"][0]["components"][0]["custom_id"]
    assert "Manage Server" in controls.press(button, staff=False)["data"]["content"]
    assert controls.press(button)["type"] == InteractionResponseType.DEFERRED_UPDATE_MESSAGE
    done = fake_discord.wait_for(lambda r: r.method == "PATCH" and "Erased" in str(r.body), 10)
    assert f"<#{VENT}>" in done.body["content"]
    controls.follow_index()

    after = controls.items()
    assert channel_items(after, VENT) == []
    assert not [i for i in after if "goldfish" in json.dumps(i)]
    assert not [i for i in after if i["sk"]["S"] == keys.spoke_sk(VENT)]
    assert VENT not in short_term_channels(after, gw.ALICE)
    left = controls.passages()
    assert not [p for p in left if p.channel_id == VENT or "goldfish" in p.text]
    assert said(after, GENERAL, gw.ALICE) == ["I like walking by the river"]
    assert [p for p in left if p.channel_id == GENERAL]


# Consent ----------------------------------------------------------------------------------


def test_opt_in_mode_stores_only_members_who_opted_in(controls: Controls) -> None:
    d = controls.d
    assert "Manage Server" in controls.text("memory-staff", ["consent"], {"mode": "opt-in"})
    assert "Opt-in" in controls.text("memory-staff", ["consent"], {"mode": "opt-in"}, staff=True)
    assert "opted in" in controls.text("memory", ["optin"], user=gw.ALICE)

    d.say(d.message(gw.ALICE, "I agreed", GENERAL), d.message(gw.BOB, "I did not", GENERAL))
    d.ask(gw.BOB, "do you remember me?", GENERAL, "Not a thing.")
    d.ask(gw.ALICE, "and me?", GENERAL, "Yes, Alice.")

    items = controls.items()
    assert said(items, GENERAL, gw.ALICE) == ["I agreed", f"<@{gw.BOT}> and me?"]
    assert said(items, GENERAL, gw.BOB) == []
    answers = said(items, GENERAL, gw.BOT)
    assert answers == ["Yes, Alice."]  # the answer to Bob is his exchange: not kept
    assert short_term_channels(items, gw.BOB) == set()

    controls.text("memory-staff", ["consent"], {"mode": "opt-out"}, staff=True)
    d.say(d.message(gw.BOB, "now everyone is recorded", GENERAL))
    assert said(controls.items(), GENERAL, gw.BOB) == ["now everyone is recorded"]


@pytest.mark.parametrize("notice", [True])
def test_the_first_answer_to_a_member_in_a_server_carries_the_notice_once(
    controls: Controls,
) -> None:
    d = controls.d
    d.ask(gw.ALICE, "hello?", GENERAL, "Hello, Alice.")
    d.ask(gw.ALICE, "hello again?", GENERAL, "Hello again.")
    d.ask(gw.BOB, "and me?", VENT, "Hello, Bob.")

    general, vent = d.posted(GENERAL), d.posted(VENT)
    assert general[0] == f"Hello, Alice.\n{NOTICE}"
    assert general[1] == "Hello again."
    assert vent[0] == f"Hello, Bob.\n{NOTICE}"
    privacy = controls.text("memory", ["privacy"], user=gw.BOB)
    assert "365 days" in privacy and "`/memory pause`" in privacy and "opt-out" in privacy


# A member's pause -------------------------------------------------------------------------


def test_a_pause_of_nothing_negative_or_years_is_refused_and_changes_nothing(
    controls: Controls,
) -> None:
    for duration in ["0m", "-5m", "3650d", "soon", "1y"]:
        answer = controls.text("memory", ["pause"], {"duration": duration})
        assert "duration" in answer or "at least a minute" in answer or "at most 30 days" in answer
    assert not [i for i in controls.items() if i["pk"]["S"] == keys.PAUSE_PK]


def test_a_paused_member_is_not_recorded_until_the_pause_ends(controls: Controls) -> None:
    d = controls.d
    answer = controls.text("memory", ["pause"], {"duration": "2h"})
    assert answer.startswith("Paused until")
    d.say(d.message(gw.ALICE, "off the record", GENERAL))
    d.ask(gw.ALICE, "are you listening?", GENERAL, "I am.")
    d.say(d.message(gw.BOB, "Bob is recorded", GENERAL))

    items = controls.items()
    assert said(items, GENERAL, gw.ALICE) == []
    assert said(items, GENERAL, gw.BOT) == []
    assert short_term_channels(items, gw.ALICE) == set()
    assert "You paused my memory until" in d.posted(GENERAL)[-1]
    assert said(items, GENERAL, gw.BOB) == ["Bob is recorded"]

    d.later(minutes=121)
    d.say(d.message(gw.ALICE, "back on the record", GENERAL))
    assert said(controls.items(), GENERAL, gw.ALICE) == ["back on the record"]


# Forget what was said lately ------------------------------------------------------------------


def test_forget_recent_out_of_bounds_is_refused_and_erases_nothing(controls: Controls) -> None:
    d = controls.d
    d.say(d.message(gw.ALICE, "still here", GENERAL))
    for minutes in [0, -3, 1_000_000]:
        answer = controls.text("memory", ["forget-recent"], {"minutes": minutes})
        assert answer.startswith("Please give between 1 and 10,080 minutes (a week)")
    assert said(controls.items(), GENERAL, gw.ALICE) == ["still here"]


def test_forget_recent_erases_the_last_minutes_everywhere_and_nothing_before(
    controls: Controls, fake_discord: FakeDiscordRest
) -> None:
    d = controls.d
    d.say(d.message(gw.ALICE, "I like tea", GENERAL), d.message(gw.BOB, "me too", GENERAL))
    d.later(minutes=30)
    d.say(
        d.message(gw.ALICE, "I keep goldfish, secretly", GENERAL),
        d.message(gw.BOB, "nice", GENERAL),
        d.message(gw.ALICE, "goldfish again, in the vent", VENT),
        d.message(gw.BOB, "ok", VENT),
    )
    controls.follow_index()
    assert any("goldfish" in json.dumps(i) for i in controls.items())

    answer = controls.run("memory", ["forget-recent"], {"minutes": 10})
    assert answer["type"] == InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE
    done = fake_discord.wait_for(lambda r: r.method == "PATCH" and "Erased" in str(r.body), 10)
    assert "2 recorded messages" in done.body["content"]
    controls.follow_index()

    items = controls.items()
    assert said(items, GENERAL, gw.ALICE) == ["I like tea"]
    assert said(items, VENT, gw.ALICE) == []
    assert said(items, GENERAL, gw.BOB) == ["me too", "nice"]
    assert not [i for i in items if "goldfish" in json.dumps(i)]
    assert not [p for p in controls.passages() if "goldfish" in p.text]


# /memory show, in pages ---------------------------------------------------------------------


def test_memory_show_pages_through_every_fact_with_buttons(controls: Controls) -> None:
    texts = [
        f"I collect stamp series number {n:02d} " + "from far away places " * 8 for n in range(24)
    ]
    for text in texts:
        assert "Remembered" in controls.text("memory", ["remember"], {"text": text[:240]})

    first = controls.run("memory", ["show"])
    pages = [first["data"]]
    while True:
        buttons = pages[-1]["components"][0]["components"]
        assert len(pages[-1]["content"]) <= 2000
        if buttons[1]["disabled"]:
            break
        pressed = controls.press(buttons[1]["custom_id"], staff=False)
        assert pressed["type"] == InteractionResponseType.UPDATE_MESSAGE
        pages.append(pressed["data"])
    assert len(pages) >= 3
    assert pages[-1]["content"].endswith(f"page {len(pages)} of {len(pages)}")
    shown = "".join(p["content"] for p in pages)
    assert all(f"number {n:02d}" in shown for n in range(24))
    back = controls.press(pages[-1]["components"][0]["components"][0]["custom_id"], staff=False)
    assert back["data"]["content"] == pages[-2]["content"]


def test_channel_forget_of_a_channel_not_of_this_server_is_refused(controls: Controls) -> None:
    d = controls.d
    elsewhere = "200000000000000999"  # another server's channel, by its id
    d.say(
        gw.message(
            gw.BOB, "not yours to erase", d.at + 10, channel=elsewhere, guild="100000000000000099"
        )
    )
    answer = controls.text(
        "memory-staff", ["channel", "forget"], {"channel": elsewhere}, staff=True
    )
    assert answer == "That is not a channel of this server that I know of."
    assert controls.press(f"channelforget:confirm:{elsewhere}")["data"]["content"] == answer
    assert said(controls.items(), elsewhere, gw.BOB) == ["not yours to erase"]
