"""`/memory export` (botmemory.people.export, botmemory.answering.exports): everything kept
about the member, found as `/forgetme` finds it, reaches their direct messages as JSON
attachments, without another member's words or names; closed DMs are said; one a day.

Through the functions template.yaml declares (tests/botmemory/commands/test_controls.py's
deployment): InteractionsFunction starts AnswerFunction, which posts the parts to the fake
Discord on 127.0.0.1 as multipart messages.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from botmemory.discord.interactions import InteractionResponseType
from botmemory.storage import keys
from localrun import gateway as gw
from tests.botmemory.commands.test_controls import (  # noqa: F401
    GENERAL,
    VENT,
    Controls,
    controls,
    notice,
)
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import fact_writer  # noqa: F401

SECRET = "zebra-crossing-password"


def converse(controls: Controls) -> None:  # noqa: F811
    """Alice and Bob talk in two channels; Alice asks the bot and writes a fact herself."""
    d = controls.d
    d.say(
        d.message(gw.ALICE, "I keep goldfish in a big tank", GENERAL),
        d.message(gw.BOB, f"Bob here, my password is {SECRET}", GENERAL),
        d.message(gw.ALICE, f"thanks <@{gw.BOB}>, goldfish need care", VENT),
        d.message(gw.BOB, f"I keep goldfish too, {SECRET}", VENT),
    )
    d.ask(gw.ALICE, "what do I keep?", GENERAL, "Goldfish, Alice.")
    assert "Remembered" in controls.text("memory", ["remember"], {"text": "I like tea"})


def run_export(controls: Controls, user: str = gw.ALICE) -> dict[str, Any]:  # noqa: F811
    """`/memory export`, then the AnswerFunction invocations it started."""
    d = controls.d
    answer = controls.run("memory", ["export"], user=user)
    while d.answers:
        d.reports.append(d.local.invoke("AnswerFunction", d.answers.pop(0)))
    return answer


def exported(fake: FakeDiscordRest, user: str, since: int = 0) -> list[dict[str, Any]]:
    """The records of every part sent to `user`'s DMs (from the `since`th post), in order."""
    channel = fake.dm_channels[user]
    posts = fake.requests_matching("POST", f"/channels/{channel}/messages")[since:]
    records: list[dict[str, Any]] = []
    for post in posts:
        for data in post.body["_files"].values():
            records += json.loads(data)["records"]
    return records


def holding(items: list[dict[str, Any]], user: str) -> list[dict[str, Any]]:
    """The items that hold the person's id (what the by_user index lists)."""
    return [i for i in items if i.get("user_id", {}).get("S") == user]


def test_export_holds_every_kind_kept_and_forgetme_erases_the_same_items(
    controls: Controls,  # noqa: F811
    fake_discord: FakeDiscordRest,
) -> None:
    converse(controls)
    before = holding(controls.items(), gw.ALICE)

    answer = run_export(controls)
    assert answer["type"] == InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE
    records = exported(fake_discord, gw.ALICE)
    edit = fake_discord.wait_for(lambda r: r.method == "PATCH" and "Sent" in str(r.body), 5)
    assert "everything I keep about you" in edit.body["content"]

    kinds = Counter(r["record"] for r in records)
    table_kinds = Counter(keys.kind_of(i["sk"]["S"]).value for i in before)
    # Every item holding her id is in the export, one record each, kind for kind.
    assert {k: kinds[k] for k in table_kinds} == dict(table_kinds)
    for kind in ("observation", "fact", "history", "short_term", "spoke", "profile"):
        assert kinds[kind], kind
    assert kinds["episode"] + kinds["summary"] >= 1
    assert kinds["settings"] == 1
    text = json.dumps(records)
    assert SECRET not in text and gw.BOB not in text and "Bob" not in text
    assert "goldfish" in text and "I like tea" in text

    # /forgetme finds the same items: every one of them is gone after it.
    interaction = controls.base(gw.ALICE, GENERAL, "0")
    interaction.update(type=2, data={"id": "1", "name": "forgetme", "type": 1, "options": []})
    controls.interact(interaction)
    assert controls.press("forgetme:confirm", staff=False)["type"] == (
        InteractionResponseType.DEFERRED_UPDATE_MESSAGE
    )
    fake_discord.wait_for(lambda r: r.method == "PATCH" and "Done" in str(r.body), 10)
    after = {(i["pk"]["S"], i["sk"]["S"]) for i in controls.items()}
    assert not [i for i in before if (i["pk"]["S"], i["sk"]["S"]) in after]


def test_closed_dms_are_said_and_a_second_export_the_same_day_is_refused(
    controls: Controls,  # noqa: F811
    fake_discord: FakeDiscordRest,
) -> None:
    converse(controls)
    fake_discord.close_dms(gw.ALICE)
    run_export(controls)
    edit = fake_discord.wait_for(lambda r: r.method == "PATCH" and "DMs" in str(r.body), 5)
    assert "your DMs are closed" in edit.body["content"]

    # Unfinished, so asking again goes on where it stopped (no refusal) ...
    channel = fake_discord.dm_channels[gw.ALICE]
    refused = len(fake_discord.requests_matching("POST", f"/channels/{channel}/messages"))
    del fake_discord.forbidden[channel]
    run_export(controls)
    records = exported(fake_discord, gw.ALICE, since=refused)
    kept = holding(controls.items(), gw.ALICE)
    # Nothing of the part refused is skipped: every item holding her id is there.
    assert len([r for r in records if r["record"] not in ("episode", "summary", "settings")]) == (
        len(kept)
    )
    # ... and once done, another the same day is refused.
    again = controls.text("memory", ["export"])
    assert "one a day" in again


def test_a_long_export_goes_on_in_the_next_invocation_on_its_own(
    controls: Controls,  # noqa: F811
    fake_discord: FakeDiscordRest,
    monkeypatch: Any,
) -> None:
    """An invocation whose time runs short after one part starts the next with its cursor
    (AnswerFunction invokes itself): the member asks once and gets every part."""
    from botmemory.people.export import Exporter

    converse(controls)
    before = holding(controls.items(), gw.ALICE)
    whole = Exporter.parts

    def one_part_an_invocation(self: Exporter, cursor: Any, time_left_ms: Any = None) -> Any:
        self._part_chars = 1_500  # small parts: several of them
        for part in whole(self, cursor, time_left_ms):
            yield part
            return  # then the time runs short

    monkeypatch.setattr(Exporter, "parts", one_part_an_invocation)
    run_export(controls)

    exports = [r for r in controls.d.reports if "continued" in r]
    assert len(exports) >= 2 and all(r["parts"] == 1 for r in exports)
    assert [r["continued"] for r in exports] == [True] * (len(exports) - 1) + [False]
    assert exports[-1]["finished"]
    records = exported(fake_discord, gw.ALICE)
    kinds = Counter(r["record"] for r in records)
    table_kinds = Counter(keys.kind_of(i["sk"]["S"]).value for i in before)
    assert {k: kinds[k] for k in table_kinds} == dict(table_kinds)  # nothing lost between them
    assert kinds["settings"] == 1
    edit = fake_discord.wait_for(lambda r: r.method == "PATCH" and "everything" in str(r.body), 5)
    assert "everything I keep about you" in edit.body["content"]
