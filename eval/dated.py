"""The temporal questions whose answer is a date, and whether a block shows it.

LoCoMo's category 2 asks when ("When did Caroline go to the LGBTQ support group?"); most
answers name a day or a month ("7 May 2023", "The week before 9 June 2023", "June 2023").
A block answers such a question when it shows that date (as the dataset writes it, or a day
as ISO: 2023-05-07) or shows an evidence turn on a dated line: a passage or an episode
(dated since before issue 53), or a fact with its "(said ...)" (botmemory.when). Bare years
and durations ("2022", "4 years") are not dates here.
"""

from __future__ import annotations

import re

from botmemory.recall.contract import RecallResult
from botmemory.text import quote_for_prompt
from eval.evidence import EvidenceIndex

TEMPORAL = 2  # eval.dataset.CATEGORIES
_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTH = "|".join(_MONTHS)
_DAY_FIRST = re.compile(rf"\b(\d{{1,2}}) ({_MONTH}),? (\d{{4}})\b", re.IGNORECASE)
_MONTH_FIRST = re.compile(rf"\b({_MONTH}) (\d{{1,2}}),? (\d{{4}})\b", re.IGNORECASE)
_MONTH_YEAR = re.compile(rf"\b({_MONTH}),? (\d{{4}})\b", re.IGNORECASE)


def answer_date(answer: str) -> str | None:
    """The day ("2023-05-07") or month ("2023-06") an answer names; None for any other."""
    if found := _DAY_FIRST.search(answer):
        day, month, year = found.groups()
    elif found := _MONTH_FIRST.search(answer):
        month, day, year = found.groups()
    elif found := _MONTH_YEAR.search(answer):
        month, year = found.groups()
        return f"{year}-{_MONTHS.index(month.lower()) + 1:02d}"
    else:
        return None
    return f"{year}-{_MONTHS.index(month.lower()) + 1:02d}-{int(day):02d}"


def dated_turns(index: EvidenceIndex, result: RecallResult) -> frozenset[str]:
    """The turns a block shows on a dated line: its passages and the episodes quoting them
    (always dated), and the facts citing them whose line carries when they were said."""
    dated = set(index.shown(result.model_copy(update={"facts": {}})).strict)
    for facts in result.facts.values():
        for fact in facts:
            if f"{quote_for_prompt(fact.text)} (said " in result.memory:
                dated |= index.fact_turns(fact.id)
    return frozenset(dated)


def shows_date(index: EvidenceIndex, result: RecallResult, answer: str, evidence: set[str]) -> bool:
    """Whether the block shows the answer's date (a day as the dataset writes it or as ISO; a
    month as written), or an evidence turn with its date."""
    named = answer_date(answer)
    if named is None:
        return False
    if answer.strip() in result.memory or (len(named) == 10 and named in result.memory):
        return True
    return bool(evidence & dated_turns(index, result))
