"""Relative dates resolved against the day they were said, in the contract's form: the
words kept, the date beside them ("next Friday (2026-03-06)").

The rules model resolves the common English forms with this; a language model follows the
same rule, which the contract states (consolidation.model.contract.DATES_RULE):

- yesterday, today, tonight, tomorrow, the day before yesterday, the day after tomorrow;
- in N days / weeks, N days / weeks ago (N in figures, or one to twelve, or a / an);
- on, next or this <weekday>: the first such day after the day said ("next Friday" said on
  Monday 2026-03-02 is Friday 2026-03-06; said on a Friday, the Friday a week later), "this"
  counting the day itself; last <weekday>: the latest such day before it;
- next, this or last week: the Monday that week starts on ("next week (week of 2026-03-09)").

A phrase already followed by a parenthesis is left as it is.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_DAYS_FROM_TODAY = {
    "the day before yesterday": -2,
    "yesterday": -1,
    "today": 0,
    "tonight": 0,
    "tomorrow": 1,
    "the day after tomorrow": 2,
}
_COUNT = r"(?P<n>\d{1,3}|" + "|".join(_NUMBERS) + r")"
_WEEKDAY = r"(?P<weekday>" + "|".join(WEEKDAYS) + r")"
_PHRASE = re.compile(
    r"\b(?:"
    r"(?P<plain>the day before yesterday|the day after tomorrow|yesterday|today|tonight|tomorrow)"
    rf"|in {_COUNT} (?P<unit>days?|weeks?)"
    rf"|(?P<n_ago>\d{{1,3}}|{'|'.join(_NUMBERS)}) (?P<unit_ago>days?|weeks?) ago"
    rf"|(?P<which>on|next|this|last) {_WEEKDAY}"
    r"|(?P<week>next|this|last) week"
    r")\b(?!\s*\()",
    re.IGNORECASE,
)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.casefold()]


def _weekday(which: str, weekday: str, said: date) -> date:
    target = WEEKDAYS.index(weekday.casefold())
    if which == "last":
        back = (said.weekday() - target) % 7 or 7
        return said - timedelta(days=back)
    ahead = (target - said.weekday()) % 7
    if ahead == 0 and which != "this":
        ahead = 7
    return said + timedelta(days=ahead)


def _resolved(match: re.Match[str], said: date) -> str:
    if match["plain"]:
        return (said + timedelta(days=_DAYS_FROM_TODAY[match["plain"].casefold()])).isoformat()
    if match["unit"]:
        days = _count(match["n"]) * (7 if match["unit"].casefold().startswith("week") else 1)
        return (said + timedelta(days=days)).isoformat()
    if match["unit_ago"]:
        days = _count(match["n_ago"]) * (7 if match["unit_ago"].casefold().startswith("w") else 1)
        return (said - timedelta(days=days)).isoformat()
    if match["weekday"]:
        return _weekday(match["which"].casefold(), match["weekday"], said).isoformat()
    monday = said - timedelta(days=said.weekday())
    shift = {"next": 7, "this": 0, "last": -7}[match["week"].casefold()]
    return f"week of {(monday + timedelta(days=shift)).isoformat()}"


def with_dates(text: str, said: date) -> str:
    """The text with each relative date it holds followed by the date it names."""
    return _PHRASE.sub(lambda m: f"{m[0]} ({_resolved(m, said)})", text)
