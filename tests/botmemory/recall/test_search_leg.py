"""Recall with a query (docs/architecture.md section 9): consolidation indexes what it consumed, and
recall shows the passages most relevant to the message being answered, checked against the
table, within their own budget; facts and episodes are ranked by relevance first; search
fails open; a hostile query is clipped or ignored, never an error."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pytest

from botmemory.clock import DAY_MS, ManualClock, epoch_seconds
from botmemory.recall.block import PASSAGE_HEADING
from botmemory.recall.recaller import respond
from botmemory.recall.search_leg import SearchStatus
from botmemory.records import Episode, Fact, Observation
from botmemory.runtime import build_services
from botmemory.search.port import Passage, SearchHit, SearchIndex, SearchQuery
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.items import observation_values
from localrun.storage import put_episode, put_facts, put_items
from tests.conftest import START_MS, CountingModel
from tests.support.facts import a_fact

GUILD = "1100000000000000001"
OTHER_GUILD = "1100000000000000009"
CHANNEL = "1200000000000000001"
PRIVATE = "1200000000000000002"
ALICE, BOB, CAROL = "1300000000000000001", "1300000000000000002", "1300000000000000003"
NAMES = {ALICE: "Alice", BOB: "Bob", CAROL: "Carol"}
_ids = iter(range(1_456_000_000_000_000_000, 1_457_000_000_000_000_000))


def said(
    author: str, content: str, at_ms: int, channel: str = CHANNEL, guild: str | None = GUILD
) -> Observation:
    message_id = str(next(_ids))
    return Observation(
        channel_id=channel,
        scope=guild or "dm",
        sk=keys.observation_sk(at_ms, "msg", message_id),
        kind="msg",
        at_ms=at_ms,
        author_id=author,
        author_name=NAMES.get(author, "Someone"),
        message_id=message_id,
        content=content,
        expires_at=epoch_seconds(at_ms + 30 * DAY_MS),
    )


def consolidated(services: MemoryServices, observations: Sequence[Observation]) -> None:
    """Record the observations as ingest would, then consolidate each channel they are in."""
    put_items(services.repository, (observation_values(o) for o in observations))
    for channel in dict.fromkeys(o.channel_id for o in observations):
        services.consolidator.consolidate(channel, force=True)


def conversation(start_ms: int = START_MS) -> list[Observation]:
    lines = [
        (ALICE, "Morning all! Did anyone watch the match last night?"),
        (BOB, "I did, what a finish."),
        (ALICE, "I signed up for a pottery class at the community centre in 2022."),
        (BOB, "Nice. My sister went to Lisbon for her honeymoon."),
        (ALICE, "Our cat Biscuit turned 7 this week."),
        (BOB, "Happy birthday Biscuit!"),
    ]
    return [said(author, text, start_ms + n * 60_000) for n, (author, text) in enumerate(lines)]


def ask(
    services: MemoryServices, query: str | None, channel: str = CHANNEL, **extra: Any
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "guild_id": GUILD,
        "channel_id": channel,
        "user_id": ALICE,
        "participants": [BOB],
        **extra,
    }
    if query is not None:
        payload["query"] = query
    status, body = respond(services.recaller, payload)
    assert status == 200, body
    return body


def passage_lines(memory: str) -> list[str]:
    if PASSAGE_HEADING not in memory:
        return []
    section = memory.split(PASSAGE_HEADING, 1)[1].split("\n\n", 1)[0]
    return [line for line in section.splitlines() if line.startswith("- ")]


def sized(
    services: tuple[Any, Settings, ManualClock, SqliteSearchIndex],
    search: int,
    facts: int,
    episodes: int,
) -> MemoryServices:
    """Searching services whose passages, facts and episodes have these budgets."""
    dynamodb, settings, clock, index = services
    budgets = {
        "recall_search_chars": search,
        "recall_fact_chars": facts,
        "recall_episode_chars": episodes,
    }
    return build_services(
        settings.model_copy(update=budgets),
        dynamodb=dynamodb,
        clock=clock,
        model=CountingModel(),
        search_index=index,
    )


# What a query adds --------------------------------------------------------------------


def test_a_question_about_something_said_early_finds_the_message_dated_and_attributed(
    searching: MemoryServices, clock: ManualClock
) -> None:
    consolidated(searching, conversation())
    # Weeks of other talk later, the early message is far beyond the latest episodes.
    clock.advance(days=20)
    for day_n in range(1, 6):
        later = START_MS + day_n * DAY_MS
        consolidated(searching, [said(BOB, f"Standup notes for day {day_n}", later)])

    body = ask(searching, "When did Alice start going to pottery class?")

    lines = passage_lines(body["memory"])
    assert lines and lines[0].startswith('- 2026-01-01, "Alice": "I signed up for a pottery class')
    passage = body["passages"][0]
    assert passage["channel_id"] == CHANNEL and passage["authors"][-1] == ALICE
    assert passage["time_ms"] == START_MS + 2 * 60_000
    assert passage["provenance"][-1].startswith("OBS#")
    assert body["search"] == SearchStatus.OK


def test_a_short_answer_is_found_by_the_message_it_answers_and_shown_alone(
    searching: MemoryServices,
) -> None:
    consolidated(
        searching,
        [
            said(BOB, "Where did you go hiking in the summer holidays?", START_MS),
            said(ALICE, "The Dolomites, with my brother.", START_MS + 60_000),
        ],
    )

    body = ask(searching, "hiking in the Dolomites")

    lines = passage_lines(body["memory"])
    # Found by Bob's words too ("hiking"), shown on a line of its own, on its own words: the
    # room a quoted question took goes to more passages (docs/eval.md, issue 50).
    assert lines[0] == '- 2026-01-01, "Alice": "The Dolomites, with my brother."'
    assert body["passages"][0]["provenance"] == [body["passages"][0]["provenance"][-1]]
    assert "context" not in body["passages"][0]


LONG_ANSWER = (
    "Luna and Oliver! They are so sweet and playful, they really liven up the house, and "
    "Oliver steals one of my socks every single morning before breakfast."
)


@pytest.mark.parametrize(
    ("before", "found"),
    [
        (said(BOB, "What are the names of your pets?", START_MS), True),
        (said(BOB, "Cute photo! What are your pets called? Tell me everything.", START_MS), True),
        # A question mark in a link asks nothing.
        (said(BOB, "The shop I told you about: https://example.com/shop?pets=1", START_MS), False),
        # Not a question: the long message stands on its own words.
        (said(BOB, "I finally bought the new pets bed for the kitchen.", START_MS), False),
        # Her own question: a message never borrows its author's earlier words.
        (said(ALICE, "Want to hear what my pets are called?", START_MS), False),
    ],
)
def test_a_long_answer_is_found_by_the_question_someone_asked(
    searching: MemoryServices, before: Observation, found: bool
) -> None:
    answer = said(ALICE, LONG_ANSWER, START_MS + 60_000)
    assert len(answer.content) > 120 and "pet" not in answer.content.lower()
    consolidated(searching, [before, answer])

    body = ask(searching, "Any pets at home?")

    answers = [p for p in body["passages"] if p["text"] == LONG_ANSWER]
    assert bool(answers) is found
    if found:
        # Shown on its own words: a long message needs no context to be read.
        assert answers[0]["provenance"] == [answer.sk]


def test_without_a_query_recall_is_what_it_was(
    searching: MemoryServices, dynamodb: Any, settings: Settings, clock: ManualClock
) -> None:
    consolidated(searching, conversation())
    plain = build_services(settings, dynamodb=dynamodb, clock=clock, model=CountingModel())

    with_index = ask(searching, None)
    without_index = ask(plain, None)

    assert with_index["memory"] == without_index["memory"]
    assert with_index["passages"] == [] and PASSAGE_HEADING not in with_index["memory"]
    assert with_index["search"] == SearchStatus.NO_QUERY
    assert without_index["search"] == SearchStatus.OFF


def test_passages_stay_within_their_own_budget(
    dynamodb: Any, settings: Settings, clock: ManualClock, index: SqliteSearchIndex
) -> None:
    # Facts and episodes get nothing here, so they leave no room over to the passages.
    services = sized((dynamodb, settings, clock, index), 300, 0, 0)
    consolidated(
        services,
        [
            said(ALICE, f"Pottery note {n}: glazing, kilns and wheels.", START_MS + n)
            for n in range(30)
        ],
    )

    body = ask(services, "pottery glazing kilns")

    section = body["memory"].split(PASSAGE_HEADING, 1)[1].split("\n\n", 1)[0]
    assert len(PASSAGE_HEADING) + len(section) <= 300
    assert 1 <= len(body["passages"]) < 30


# Facts and episodes, relevance first ----------------------------------------------------


def fact(user: str, text: str, updated_ms: int, hits: int = 1) -> Fact:
    return a_fact(user, text, scope=GUILD, at_ms=updated_ms, learned_in=(CHANNEL,), hits=hits)


def test_the_relevant_fact_comes_first_even_when_old_and_little_used(
    searching: MemoryServices,
) -> None:
    # Alice has spoken here: the server's name registry knows her.
    consolidated(searching, [said(ALICE, "Morning everyone", START_MS)])
    facts = [
        fact(ALICE, f"Alice collects stamps from country {n}", START_MS + n, hits=9)
        for n in range(12)
    ]
    facts.append(fact(ALICE, "Alice is allergic to peanuts", START_MS - DAY_MS, hits=1))
    put_facts(searching.repository, facts)

    asked = ask(searching, "Can Alice eat peanuts?")
    unasked = ask(searching, None)

    assert asked["facts"][ALICE][0]["text"] == "Alice is allergic to peanuts"
    # With a query, two of the rest at most: their room goes to what the query found.
    assert len(asked["facts"][ALICE]) == 3
    assert "peanuts" not in unasked["memory"]  # five most-used only, without a query
    assert len(unasked["facts"][ALICE]) == 5


def test_facts_the_query_is_not_about_take_only_the_room_the_passages_leave(
    dynamodb: Any, settings: Settings, clock: ManualClock, index: SqliteSearchIndex
) -> None:
    services = sized((dynamodb, settings, clock, index), 400, 500, 0)
    unrelated = [
        "Alice has collected stamps from every country she has visited since she was a child, "
        "and keeps them in twelve albums",
        "Alice plays the violin in a string quartet that meets on Thursday evenings downtown, "
        "near the old train station",
    ]
    put_facts(
        services.repository,
        [fact(ALICE, text, START_MS, hits=9) for text in unrelated]
        + [fact(ALICE, "Alice is allergic to peanuts", START_MS - DAY_MS, hits=1)],
    )
    consolidated(
        services,
        [
            said(
                BOB,
                f"Peanut note {n}: keep the peanut butter and satay far away from Alice",
                START_MS + n,
            )
            for n in range(30)
        ],
    )

    busy = ask(services, "Are peanuts safe to eat?")
    quiet = ask(services, "Any plans for the weekend?")

    # Passages fill the facts' unused room and leave less than one of the facts the question
    # is not about, the most used: those wait; the one it is about is shown.
    print(busy["memory"])
    assert [f["text"] for f in busy["facts"][ALICE]] == ["Alice is allergic to peanuts"]
    assert len(busy["passages"]) >= 4
    assert len(busy["memory"]) <= len(ask(services, None)["memory"]) + 800
    # Search finds nothing: the facts the question is not about have the room.
    assert quiet["passages"] == []
    assert {f["text"] for f in quiet["facts"][ALICE]} == set(unrelated)


def test_facts_of_a_member_the_query_names_are_shown_never_a_stranger_s(
    searching: MemoryServices,
) -> None:
    put_facts(searching.repository, [fact(CAROL, "Carol plays the cello", START_MS)])
    # Carol is a member here: she spoke in this server, so the name registry knows her.
    consolidated(searching, [said(CAROL, "Hello from Carol, cello practice went well", START_MS)])
    stranger = fact(CAROL, "Carol plays the cello", START_MS).model_copy(
        update={"scope": OTHER_GUILD, "fact_id": "fother01", "text": "Carol secretly plays drums"}
    )
    put_facts(searching.repository, [stranger])

    body = ask(searching, "Does Carol play an instrument? the cello maybe", participants=[])

    assert [f["text"] for f in body["facts"].get(CAROL, [])][:1] == ["Carol plays the cello"]
    assert "drums" not in body["memory"]


def episode(summary: str, end_ms: int) -> Episode:
    episode_id = f"ep{end_ms}"
    return Episode(
        channel_id=CHANNEL,
        episode_id=episode_id,
        sk=keys.episode_sk(end_ms, episode_id),
        summary=summary,
        participant_ids=[ALICE, BOB],
        participant_names=["Alice", "Bob"],
        start_ms=end_ms - 60_000,
        end_ms=end_ms,
        created_ms=end_ms,
        expires_at=epoch_seconds(end_ms + 90 * DAY_MS),
    )


def test_a_relevant_episode_is_preferred_to_merely_recent_ones(
    searching: MemoryServices,
) -> None:
    put_episode(
        searching.repository,
        episode("Alice and Bob talked about a pottery class and glazing.", START_MS),
        GUILD,
    )
    for n in range(1, 6):
        newer = episode(f"Bob went through release checklist {n}.", START_MS + n * DAY_MS)
        put_episode(searching.repository, newer, GUILD)

    asked = ask(searching, "how was the pottery class?")
    unasked = ask(searching, None)

    assert [e["summary"] for e in asked["episodes"]] == [
        "Alice and Bob talked about a pottery class and glazing.",
        "Bob went through release checklist 5.",  # the latest: what is going on now
    ]
    assert [e["summary"] for e in unasked["episodes"]] == [
        f"Bob went through release checklist {n}." for n in (5, 4, 3)
    ]


def test_a_fact_that_repeats_a_better_one_in_other_words_gives_its_room_away(
    searching: MemoryServices,
) -> None:
    consolidated(searching, [said(ALICE, "Morning everyone", START_MS)])
    put_facts(
        searching.repository,
        [
            fact(ALICE, "Alice is looking into counseling and mental health jobs", START_MS, 5),
            fact(ALICE, "Alice has been looking into counseling or mental health work", START_MS),
            fact(ALICE, "Alice looks into mental health counseling jobs", START_MS),
            fact(ALICE, "Alice volunteers at a mental health helpline", START_MS),
            # One word of four apart: two facts, both kept.
            fact(ALICE, "Alice collects stamps from Spain", START_MS, 3),
            fact(ALICE, "Alice collects stamps from France", START_MS, 3),
        ],
    )

    shown = [
        f["text"]
        for f in ask(searching, "What mental health work does Alice want?")["facts"][ALICE]
    ]
    unasked = [f["text"] for f in ask(searching, None)["facts"][ALICE]]

    # One of the three saying one thing (the best-ranked: it shares "work" with the question),
    # then what else is relevant.
    assert shown[:2] == [
        "Alice has been looking into counseling or mental health work",
        "Alice volunteers at a mental health helpline",
    ]
    assert sum("counseling" in t for t in shown) == 1
    assert sum("counseling" in t for t in unasked) == 1
    assert {"Alice collects stamps from Spain", "Alice collects stamps from France"} <= set(unasked)
    assert len(unasked) == 4


def test_an_episode_naming_the_asked_about_is_not_about_the_question_and_waits_for_room(
    dynamodb: Any, settings: Settings, clock: ManualClock, index: SqliteSearchIndex
) -> None:
    services = sized((dynamodb, settings, clock, index), 400, 0, 500)
    consolidated(
        services,
        [
            said(BOB, f"Peanut note {n}: keep the peanut butter and satay far away", START_MS + n)
            for n in range(30)
        ],
    )
    for n in range(1, 4):
        later = episode(f"Bob went through release checklist {n}.", START_MS + n * DAY_MS)
        put_episode(services.repository, later, GUILD)

    busy = ask(services, "What did Bob say about peanuts?")
    quiet = ask(services, "Any plans for the weekend?")

    # Every checklist episode names Bob, none is about peanuts: the passages take their
    # room first (the latest checklist gets only what the last passage line left); the
    # episode consolidation wrote of the notes is about peanuts, and is shown first.
    summaries = [e["summary"] for e in busy["episodes"]]
    assert summaries[0] == "Bob talked about peanut butter."
    assert summaries[1:] in ([], ["Bob went through release checklist 3."])
    assert len(busy["passages"]) >= 4
    # Nothing found: the latest episode, what is going on now, has the room.
    assert quiet["passages"] == []
    assert [e["summary"] for e in quiet["episodes"]] == ["Bob went through release checklist 3."]


# Privacy: what search may return ------------------------------------------------------


def test_another_guild_and_another_channel_are_never_searched_by_default(
    searching: MemoryServices,
) -> None:
    consolidated(
        searching,
        [
            said(BOB, "The vault code is tangerine-42", START_MS, channel=PRIVATE),
            said(
                BOB,
                "Our vault code is tangerine-99",
                START_MS,
                channel="1200000000000000077",
                guild=OTHER_GUILD,
            ),
        ],
    )

    body = ask(searching, "what is the vault code tangerine")

    assert "tangerine" not in body["memory"] and body["passages"] == []


def test_guild_wide_search_crosses_public_channels_of_one_server_only(
    dynamodb: Any, settings: Settings, clock: ManualClock, index: SqliteSearchIndex
) -> None:
    wide = settings.model_copy(update={"search_scope": "guild"})
    services = build_services(
        wide, dynamodb=dynamodb, clock=clock, model=CountingModel(), search_index=index
    )
    public = "1200000000000000055"
    services.repository.put_channel_visibility(GUILD, public, True)
    consolidated(
        services,
        [
            said(BOB, "The vault code is tangerine-42", START_MS, channel=public),
            said(BOB, "The staff vault code is tangerine-77", START_MS, channel=PRIVATE),
            said(
                BOB,
                "Our vault code is tangerine-99",
                START_MS,
                channel="1200000000000000077",
                guild=OTHER_GUILD,
            ),
        ],
    )

    body = ask(services, "what is the vault code tangerine")

    assert "tangerine-42" in body["memory"] and "tangerine-99" not in body["memory"]
    # A channel @everyone cannot view (here: never seen, so unknown) keeps its words.
    assert "tangerine-77" not in body["memory"]


def test_direct_messages_never_search_beyond_their_own_channel_even_guild_wide(
    dynamodb: Any, settings: Settings, clock: ManualClock, index: SqliteSearchIndex
) -> None:
    wide = settings.model_copy(update={"search_scope": "guild"})
    services = build_services(
        wide, dynamodb=dynamodb, clock=clock, model=CountingModel(), search_index=index
    )
    bobs_dm, alices_dm = "1200000000000000101", "1200000000000000102"
    consolidated(
        services, [said(BOB, "my bank pin is 4242", START_MS, channel=bobs_dm, guild=None)]
    )

    status, body = respond(
        services.recaller,
        {"channel_id": alices_dm, "user_id": ALICE, "query": "what is the bank pin 4242"},
    )

    assert status == 200 and "4242" not in body["memory"] and body["passages"] == []


def test_a_hit_whose_message_left_the_table_is_dropped_never_shown(
    searching: MemoryServices, index: SqliteSearchIndex
) -> None:
    consolidated(searching, conversation())
    pottery = next(
        o for o in searching.repository.channel_observations(CHANNEL) if "pottery" in o.content
    )
    # Deleted behind the index's back (no stream follows here): the index still has it.
    searching.repository.client.delete_item(
        TableName=searching.repository.table_name,
        Key={"pk": {"S": keys.channel_pk(CHANNEL)}, "sk": {"S": pottery.sk}},
    )
    assert any("pottery" in p.text for p in index.passages())

    body = ask(searching, "pottery class")

    assert body["passages"] == [] and passage_lines(body["memory"]) == []


def test_an_expired_message_is_never_shown(searching: MemoryServices, clock: ManualClock) -> None:
    consolidated(searching, conversation())
    clock.advance(days=31)  # past the observations' retention; DynamoDB deletes lazily

    body = ask(searching, "pottery class")

    assert body["passages"] == []


# Fail-open ------------------------------------------------------------------------------


class BrokenIndex:
    def __init__(
        self, inner: SearchIndex, error: Exception | None = None, delay_s: float = 0
    ) -> None:
        self.inner = inner
        self.error = error
        self.delay_s = delay_s
        self.released = threading.Event()

    def add(self, passages: Sequence[Passage]) -> int:
        return self.inner.add(passages)

    def search(self, query: SearchQuery) -> list[SearchHit]:
        if self.delay_s:
            self.released.wait(self.delay_s)
        if self.error:
            raise self.error
        return self.inner.search(query)

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        return self.inner.remove(ids, scope=scope)

    def passages(self) -> Iterator[Passage]:
        return self.inner.passages()


@pytest.mark.parametrize(
    ("broken", "status"),
    [
        (lambda inner: BrokenIndex(inner, error=RuntimeError("index down")), SearchStatus.FAILED),
        (lambda inner: BrokenIndex(inner, delay_s=5), SearchStatus.TIMEOUT),
    ],
)
def test_a_failing_or_slow_search_leaves_the_block_without_passages_and_says_so(
    dynamodb: Any,
    settings: Settings,
    clock: ManualClock,
    index: SqliteSearchIndex,
    broken: Any,
    status: SearchStatus,
) -> None:
    faulty = broken(index)
    quick = settings.model_copy(update={"search_timeout_ms": 200})
    services = build_services(
        quick, dynamodb=dynamodb, clock=clock, model=CountingModel(), search_index=faulty
    )
    consolidated(services, conversation())

    try:
        body = ask(services, "pottery class")
    finally:
        faulty.released.set()

    assert body["search"] == status and body["passages"] == []
    assert body["facts"] or body["episodes"]  # the rest of the block is still there


# Bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "note"),
    [
        ("", "empty query"),
        ("\x00\x01\x02\u200b   \t", "empty query"),
        ("pottery " * 500_000, "query clipped to 4000 characters"),
    ],
)
def test_a_hostile_query_is_clipped_or_ignored_with_a_reason_never_an_error(
    searching: MemoryServices, query: str, note: str
) -> None:
    consolidated(searching, conversation())

    body = ask(searching, query)

    assert body["query_note"] == note
    assert body["enabled"] is True


def test_a_query_that_is_not_text_is_a_400_naming_it(searching: MemoryServices) -> None:
    status, body = respond(
        searching.recaller, {"channel_id": CHANNEL, "user_id": ALICE, "query": {"$ne": 1}}
    )

    assert status == 400 and body["fields"] == ["query"]
