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
from itertools import accumulate
from typing import Any

import pytest

from botmemory import invocation
from botmemory.answering import exports
from botmemory.discord.interactions import InteractionResponseType
from botmemory.discord.rest import DiscordApi
from botmemory.people import export
from botmemory.records import Episode, Observation, ObservationKind
from botmemory.storage import keys
from botmemory.storage.items import episode_values, observation_values
from botmemory.storage.keys import observation_sk
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.table import BATCH_GET_LIMIT
from localrun import gateway as gw
from localrun.storage import put_in_moto
from tests.botmemory.commands.test_controls import (  # noqa: F401
    GENERAL,
    VENT,
    Controls,
    controls,
    notice,
)
from tests.conftest import TABLE
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
        self._part_bytes = 1_500  # small parts: several of them
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


def her_messages(controls: Controls, count: int) -> set[str]:  # noqa: F811
    """`count` of Alice's recorded messages in GENERAL, seeded straight into the table (and
    GENERAL in the channels she spoke in); their message ids."""
    repository = MemoryRepository(controls.d.dynamodb, TABLE)
    now = controls.d.clock.now_ms()
    observations = [
        Observation(
            channel_id=GENERAL,
            scope=gw.GUILD,
            sk=observation_sk(now - n * 1_000, ObservationKind.MESSAGE, f"{10**17 + n}"),
            kind=ObservationKind.MESSAGE,
            at_ms=now - n * 1_000,
            author_id=gw.ALICE,
            author_name="Alice",
            message_id=f"{10**17 + n}",
            content=f"message {n}: " + "the hives did well " * (n % 7),
        )
        for n in range(count)
    ]
    put_in_moto(repository, (observation_values(o, pending=False) for o in observations))
    return {o.message_id for o in observations if o.message_id}


def sent_parts(fake: FakeDiscordRest, user: str) -> list[list[dict[str, Any]]]:
    """The records of each part in `user`'s DMs: the posts Discord kept (not the ones refused),
    each once (a post again with its nonce is the same message)."""
    channel = fake.dm_channels[user]
    kept = [m["nonce"] for m in fake.channel_messages.get(channel, []) if "nonce" in m]
    posts = {
        p.body["nonce"]: p for p in fake.requests_matching("POST", f"/channels/{channel}/messages")
    }
    return [json.loads(d)["records"] for n in kept for d in posts[n].body["_files"].values()]


@pytest.mark.parametrize("answered", ["in the order asked", "in reverse"])
def test_an_export_out_of_time_inside_a_page_goes_on_from_its_last_record_each_once(
    controls: Controls,  # noqa: F811
    fake_discord: FakeDiscordRest,
    monkeypatch: pytest.MonkeyPatch,
    answered: str,
) -> None:
    """2,500 of Alice's messages: Query pages of 1,000 keys, parts of 30 KB that close inside
    a page (and inside a BatchGetItem's hundred), invocations whose time runs short after
    four BatchGetItem calls (inside a page), chains cut after three invocations (as MAX_HOPS
    cuts one), and the command run again until done: every message arrives once, whatever
    order BatchGetItem answers in (DynamoDB promises none)."""
    ids = her_messages(controls, 2_500)
    if answered == "in reverse":
        read = MemoryRepository.plain_items_at
        monkeypatch.setattr(
            MemoryRepository, "plain_items_at", lambda self, refs: read(self, refs)[::-1]
        )
    monkeypatch.setattr(export, "PART_BYTES", 30_000)
    monkeypatch.setattr(exports, "MAX_HOPS", 2)
    asked = {"times": 0}  # how often this invocation asked for its time

    def begin(context: Any) -> None:
        asked["times"] = 0

    def time_left_ms() -> int:
        asked["times"] += 1  # before a Query or a BatchGetItem
        return 60_000 if asked["times"] <= 4 else export.RESERVE_MS - 1

    monkeypatch.setattr(invocation, "begin", begin)
    monkeypatch.setattr(invocation, "time_left_ms", time_left_ms)
    commands = 0
    while not controls.d.reports or not controls.d.reports[-1].get("finished"):
        commands += 1
        assert commands <= 5, "the export does not finish"
        run_export(controls)

    parts = sent_parts(fake_discord, gw.ALICE)
    said = Counter(r["message_id"] for part in parts for r in part if r["record"] == "observation")
    assert set(said) == ids and set(said.values()) == {1}  # each once, none lost
    assert [r["record"] for part in parts for r in part].count("settings") == 1
    assert commands == 3  # cut twice, run again twice
    stops = [r["records"] for r in controls.d.reports if not r["finished"]]
    assert any(n % export.PAGE for n in stops)  # an invocation stopped inside a page
    ends = list(accumulate(len(p) for p in parts))
    assert any(n % BATCH_GET_LIMIT for n in ends[:-1])  # a part ended inside a page's hundred


def test_a_part_refused_inside_a_channels_episodes_is_sent_again_nothing_twice(
    controls: Controls,  # noqa: F811
    fake_discord: FakeDiscordRest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thirty long episodes of a channel she spoke in, parts of 20 KB: her DMs close at the
    part that ends inside the channel's episodes; once opened, the command goes on and every
    episode arrives once, the refused part's included."""
    her_messages(controls, 3)
    repository = MemoryRepository(controls.d.dynamodb, TABLE)
    now = controls.d.clock.now_ms()
    put_in_moto(
        repository,
        [
            {"pk": keys.user_pk(gw.GUILD, gw.ALICE), "sk": f"{keys.SPOKE_PREFIX}{GENERAL}"}
            | {"user_id": gw.ALICE, "scope": gw.GUILD}
        ]
        + [
            episode_values(
                Episode(
                    channel_id=GENERAL,
                    episode_id=f"e{e}",
                    sk=keys.episode_sk(now - e * 60_000, f"e{e}"),
                    summary=f"Alice talked about bees ({e}). " + "Hives and honey. " * 100,
                    participant_ids=[gw.ALICE],
                    participant_names=["Alice"],
                    start_ms=now - e * 60_000 - 1_000,
                    end_ms=now - e * 60_000,
                    created_ms=now - e * 60_000,
                ),
                gw.GUILD,
            )
            for e in range(30)
        ],
    )
    monkeypatch.setattr(export, "PART_BYTES", 20_000)
    send_files = DiscordApi.send_files

    def closed_at_the_second_part(self: DiscordApi, channel: str, content: str, *a: Any, **k: Any):
        if "part 2" in content:
            fake_discord.close_dms(gw.ALICE)
        return send_files(self, channel, content, *a, **k)

    with monkeypatch.context() as closing:
        closing.setattr(DiscordApi, "send_files", closed_at_the_second_part)
        run_export(controls)
    assert controls.d.reports[-1]["dms_closed"]
    del fake_discord.forbidden[fake_discord.dm_channels[gw.ALICE]]
    run_export(controls)

    assert controls.d.reports[-1]["finished"]
    parts = sent_parts(fake_discord, gw.ALICE)
    episodes = Counter(r["start_ms"] for part in parts for r in part if r["record"] == "episode")
    assert len(episodes) == 30 and set(episodes.values()) == {1}
    first = [r["record"] for r in parts[0]]
    assert first.count("episode") and len(parts) >= 3  # the refused part ended among them
