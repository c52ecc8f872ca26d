"""The order of the memory block's sections: what search found for this message opens it
(models attend most to the start and the end of a long prompt), then the pins, the summary,
the facts, the other channels lately and the episodes."""

from __future__ import annotations

from botmemory.recall.block import (
    BLOCK_HEADER,
    ELSEWHERE_HEADING,
    EPISODE_HEADING,
    FACT_HEADING,
    PASSAGE_HEADING,
    PIN_HEADING,
    SUMMARY_HEADING,
)
from botmemory.records import Pin
from botmemory.services import MemoryServices
from tests.botmemory.recall.test_search_leg import (
    ALICE,
    GUILD,
    ask,
    consolidated,
    conversation,
    fact,
)
from tests.conftest import START_MS

ORDER = [
    PASSAGE_HEADING,
    PIN_HEADING,
    SUMMARY_HEADING,
    FACT_HEADING,
    ELSEWHERE_HEADING,
    EPISODE_HEADING,
]


def test_the_passages_search_found_open_the_block(searching: MemoryServices) -> None:
    consolidated(searching, conversation())
    searching.repository.put_pin(
        Pin(pin_id="p1", scope=GUILD, target="global", text="Be kind.", created_ms=START_MS)
    )
    searching.repository.put_fact(fact(ALICE, "Alice throws pots on Tuesdays", START_MS))

    memory = ask(searching, "when did I sign up for the pottery class?")["memory"]

    headings = [line for line in memory.splitlines() if line in ORDER]
    assert headings[0] == PASSAGE_HEADING
    assert {PIN_HEADING, FACT_HEADING, EPISODE_HEADING} <= set(headings)
    assert headings == [h for h in ORDER if h in headings]
    assert memory.startswith(BLOCK_HEADER + "\n\n" + PASSAGE_HEADING + "\n- ")
    assert "pottery class" in memory.split(PASSAGE_HEADING, 1)[1].split("\n\n", 1)[0]
