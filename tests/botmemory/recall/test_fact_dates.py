"""When each fact was said, in the memory block (botmemory.when, docs/time.md): facts are
chosen and placed undated; the dates of those the query is about come after the passages that
fit best first, before those that only fill the room left; the others' dates in what is left.
A date never costs a fact, an episode or a passage in rank order its place."""

from __future__ import annotations

from typing import Any

from botmemory.clock import DAY_MS, ManualClock
from botmemory.recall.block import FACT_HEADING, PASSAGE_HEADING
from botmemory.search import rules
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.settings.config import Settings
from localrun.storage import put_facts
from tests.botmemory.recall.test_search_leg import (
    ALICE,
    BOB,
    ask,
    consolidated,
    fact,
    passage_lines,
    said,
    sized,
)
from tests.conftest import START_MS

ALLERGY = "Alice is allergic to peanuts"
VIOLIN = "Alice plays the violin in a string quartet"
QUERY = "Are peanuts safe to eat?"


def fact_lines(memory: str) -> list[str]:
    section = memory.split(FACT_HEADING, 1)[1].split("\n\n", 1)[0]
    return [line for line in section.splitlines() if line.startswith("  - ")]


def test_a_fact_s_date_never_costs_a_passage_in_rank_order_its_place(
    dynamodb: Any, settings: Settings, clock: ManualClock, index: SqliteSearchIndex
) -> None:
    world = (dynamodb, settings, clock, index)
    roomy = sized(world, 3000, 1000, 0)
    put_facts(roomy.repository, [fact(ALICE, ALLERGY, START_MS - DAY_MS)])
    notes = [
        said(BOB, f"Peanut note {n}: keep the peanut butter away from Alice", START_MS + n)
        for n in range(8)
    ]
    consolidated(roomy, notes)

    shown = ask(roomy, QUERY)["memory"]
    assert fact_lines(shown) == [f'  - "{ALLERGY}" (said 2025-12-31)']
    passages = passage_lines(shown)
    assert len(passages) == 8

    # Budgets where, the fact undated, the passages' own room and the facts' unused room
    # hold five passages and 3 characters more: too few for the date.
    subject = len(f'- "Alice" (user {ALICE}):') + 1
    facts_undated = len(FACT_HEADING) + 1 + subject + len(f'  - "{ALLERGY}"') + 1
    five = len(PASSAGE_HEADING) + 1 + sum(len(line) + 1 for line in passages[:5])
    tight = sized(world, five - 5, facts_undated + 8, 0)

    body = ask(tight, QUERY)

    assert passage_lines(body["memory"]) == passages[:5]  # not four: the date waits
    assert fact_lines(body["memory"]) == [f'  - "{ALLERGY}"']


def test_the_query_s_facts_are_dated_first(
    dynamodb: Any, settings: Settings, clock: ManualClock, index: SqliteSearchIndex
) -> None:
    world = (dynamodb, settings, clock, index)
    roomy = sized(world, 0, 1000, 0)
    put_facts(
        roomy.repository,
        [fact(ALICE, VIOLIN, START_MS, hits=9), fact(ALICE, ALLERGY, START_MS - DAY_MS)],
    )
    consolidated(roomy, [said(ALICE, "Morning everyone", START_MS)])
    assert fact_lines(ask(roomy, QUERY)["memory"]) == [
        f'  - "{ALLERGY}" (said 2025-12-31)',
        f'  - "{VIOLIN}" (said 2026-01-01)',
    ]

    # Room for one date: the fact the query is about has it.
    subject = len(f'- "Alice" (user {ALICE}):') + 1
    lines = len(f'  - "{ALLERGY}"') + 1 + len(f'  - "{VIOLIN}"') + 1
    one_date = sized(world, 0, len(FACT_HEADING) + 1 + subject + lines + 20, 0)

    assert fact_lines(ask(one_date, QUERY)["memory"]) == [
        f'  - "{ALLERGY}" (said 2025-12-31)',
        f'  - "{VIOLIN}"',
    ]


def test_the_query_s_facts_are_dated_before_passages_that_only_fill_the_room(
    dynamodb: Any, settings: Settings, clock: ManualClock, index: SqliteSearchIndex
) -> None:
    world = (dynamodb, settings, clock, index)
    roomy = sized(world, 3000, 1000, 0)
    put_facts(roomy.repository, [fact(ALICE, ALLERGY, START_MS - DAY_MS)])
    notes = [
        said(BOB, f"Note {n}: peanuts are not safe for Alice to eat, keep them away", START_MS + n)
        for n in range(4)
    ]
    consolidated(roomy, [*notes, said(BOB, "Peanuts.", START_MS + 9)])
    passages = passage_lines(ask(roomy, QUERY)["memory"])
    filler = '- 2026-01-01, "Bob": "Peanuts."'
    assert filler in passages[2:] and len(passages) == 5  # ranked below two of the notes

    # Room for two of the best and 40 characters: the filler's line or the fact's date.
    date = len(" (said 2025-12-31)")
    subject = len(f'- "Alice" (user {ALICE}):') + 1
    facts = len(FACT_HEADING) + 1 + subject + len(f'  - "{ALLERGY}"') + 1 + date
    two = len(PASSAGE_HEADING) + 1 + sum(len(line) + 1 for line in passages[:2])
    body = ask(sized(world, two + 40 - date, facts, 0), QUERY)

    assert passage_lines(body["memory"]) == passages[:2]
    assert fact_lines(body["memory"]) == [f'  - "{ALLERGY}" (said 2025-12-31)']


def test_with_passages_not_taking_the_spare_the_facts_own_room_holds_their_dates(
    dynamodb: Any, settings: Settings, clock: ManualClock, index: SqliteSearchIndex
) -> None:
    world = (dynamodb, settings, clock, index)
    roomy = sized(world, 3000, 1000, 0)
    put_facts(roomy.repository, [fact(ALICE, ALLERGY, START_MS - DAY_MS)])
    notes = [
        said(BOB, f"Note {n}: peanuts are not safe for Alice to eat, keep them away", START_MS + n)
        for n in range(6)
    ]
    consolidated(roomy, notes)
    passages = passage_lines(ask(roomy, QUERY)["memory"])
    # Passages that fill their own budget but for 5 characters: no room for a date there.
    three = len(PASSAGE_HEADING) + 1 + sum(len(line) + 1 for line in passages[:3]) + 5

    # The eval's ablation (eval/folds.py): the passages get no spare room.
    with rules.applied(rules.TODAY.without("passages_take_spare")):
        body = ask(sized(world, three, 1000, 0), QUERY)

    assert passage_lines(body["memory"]) == passages[:3]
    assert fact_lines(body["memory"]) == [f'  - "{ALLERGY}" (said 2025-12-31)']
