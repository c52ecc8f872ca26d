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

The last day a statement holds (`valid_until`), by the same rule, when the words give it:

- until, till, til or through <weekday> (with or without on / next; "this" counts the day
  said), tomorrow, today, tonight, the day after tomorrow, a day of a month ("10 March",
  "March 10th", "the 10th of March", a year optional: without one, the next such day on or
  after the day said): that day;
- until the end of the week / of the month: its Sunday / its last day; until next week: the
  Sunday before it;
- back <when> (back on Monday, back tomorrow, back next week, back on 10 March): the day
  before the return. The rules model reads "back" only for a passing state it recognises
  ("I'm away, back on Monday"), where what ends is clear.
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


_MONTHS = (
    "jan",
    "feb",
    "mar",
    "apr",
    "may",
    "jun",
    "jul",
    "aug",
    "sep",
    "oct",
    "nov",
    "dec",
)
_MONTH_NAME = (
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
)
_ORDINAL = r"(?:st|nd|rd|th)?"


def _year(name: str) -> str:
    return rf"(?:,?\s+(?P<{name}>\d{{4}}))?"


_DAY_MONTH = (
    rf"(?:the\s+)?(?P<day>\d{{1,2}}){_ORDINAL}(?:\s+of)?\s+(?P<month>{_MONTH_NAME})" + _year("year")
)
_MONTH_DAY = (
    rf"(?P<month_first>{_MONTH_NAME})\s+(?:the\s+)?(?P<day_after>\d{{1,2}}){_ORDINAL}"
    + _year("year_after")
)
_END = (
    r"(?:(?P<which>on|next|this)\s+)?(?P<weekday>" + "|".join(WEEKDAYS) + r")"
    r"|(?P<plain>the day after tomorrow|tomorrow|today|tonight)"
    rf"|{_DAY_MONTH}|{_MONTH_DAY}"
    r"|(?:the\s+)?end\s+of\s+(?:the\s+|this\s+)?(?P<end_of>week|month)"
    r"|(?P<next_week>next\s+week)"
)
_UNTIL = re.compile(rf"\b(?:until|till|'?til|through)\s+(?:{_END})\b", re.IGNORECASE)
_BACK = re.compile(rf"\bback\s+(?:{_END})\b", re.IGNORECASE)


def _month_day(month: str, day: str, year: str | None, said: date) -> date | None:
    number = _MONTHS.index(month[:3].casefold()) + 1
    try:
        found = date(int(year) if year else said.year, number, int(day))
        if found < said and not year:  # "until 10 March" said in April: next year's
            found = date(said.year + 1, number, int(day))
    except ValueError:  # 31 April, or 29 February of a year without one
        return None
    return found


def _end_day(match: re.Match[str], said: date) -> date | None:
    """The day an end phrase names, as the rule above reads it."""
    if match["weekday"]:
        return _weekday((match["which"] or "on").casefold(), match["weekday"], said)
    if match["plain"]:
        return said + timedelta(days=max(_DAYS_FROM_TODAY[match["plain"].casefold()], 0))
    if match["month"]:
        return _month_day(match["month"], match["day"], match["year"], said)
    if match["month_first"]:
        return _month_day(match["month_first"], match["day_after"], match["year_after"], said)
    sunday = said + timedelta(days=6 - said.weekday())
    if match["next_week"]:
        return sunday + timedelta(days=1)  # its Monday: until then, the Sunday before
    if match["end_of"].casefold() == "week":
        return sunday
    following = date(said.year + said.month // 12, said.month % 12 + 1, 1)
    return following - timedelta(days=1)


def last_day(words: str, said: date, *, back: bool = False) -> date | None:
    """The last day `words` say something holds ("until Friday": that Friday; with `back`,
    "back on Monday": the Sunday before), by the rule above; None when they give none, or
    one before the day said."""
    until = _UNTIL.search(words)
    returns = _BACK.search(words) if back and not until else None
    try:
        if until:
            day = _end_day(until, said)
            # "until next week": holds until it starts, so through the Sunday before.
            day = day - timedelta(days=1) if day and until["next_week"] else day
        elif returns:
            found = _end_day(returns, said)
            day = found - timedelta(days=1) if found else None
        else:
            return None
    except (OverflowError, ValueError):  # a day said at the end of the calendar
        return None
    return day if day is not None and day >= said else None


def with_dates(text: str, said: date) -> str:
    """The text with each relative date it holds followed by the date it names."""
    return _PHRASE.sub(lambda m: f"{m[0]} ({_resolved(m, said)})", text)
