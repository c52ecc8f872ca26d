"""make eval's dated figure (eval/dated.py): which answers are dates, and what shows one."""

from __future__ import annotations

from botmemory.recall.contract import RecallResult
from eval.dated import answer_date, shows_date
from eval.evidence import EvidenceIndex


def test_a_day_or_a_month_is_a_date_a_year_or_a_duration_is_not() -> None:
    assert answer_date("7 May 2023") == "2023-05-07"
    assert answer_date("The Friday before 15 July 2023") == "2023-07-15"
    assert answer_date("19 January, 2023") == "2023-01-19"
    assert answer_date("June 2023") == "2023-06"
    assert answer_date("2022") is None and answer_date("4 years") is None


def test_the_block_shows_the_day_as_iso_or_as_written() -> None:
    index = EvidenceIndex([], [])

    def block(memory: str) -> RecallResult:
        return RecallResult(memory=memory, system_prompt=None, enabled=True)

    assert shows_date(index, block('- 2023-05-07, "Caroline": "hi"'), "7 May 2023", set())
    assert shows_date(index, block("on 7 May 2023 she went"), "7 May 2023", set())
    assert not shows_date(index, block('- 2023-05-08, "Caroline": "hi"'), "7 May 2023", set())
    assert not shows_date(index, block("- 2023-06-01"), "June 2023", set())
