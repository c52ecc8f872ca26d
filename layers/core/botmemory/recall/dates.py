"""The calendar dates a query names, so recall can move up what was said on them.

"What did Tim say on 16 November, 2023?" is answered by a message of that day, whatever
words it uses; "what did we plan in June?" by one of a June. A query names a day, a month
or a year in English ("16 November 2023", "November 16th", "in June", "June 2023",
"in 2023"), as an ISO date ("2023-11-16"), or the way Chinese, Japanese and Korean write
one ("2023年11月16日", "11月16日", "2023년 11월 16일"). What it names is matched against
a message's time in every time zone at once (UTC-12 to UTC+14): a member's "Tuesday" is
their own calendar's, and the table keeps UTC.

Names only lift messages search already found (search_leg.named_first); they filter
nothing, so a number misread as a date ("May 3 of us come?") costs order, never a hit.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from botmemory.search import rules
from botmemory.search.keywords import clip_query
from botmemory.search.port import MAX_SPANS

MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
# A bare month name is a date only spelt in full and capitalised ("in March", not "march
# on" or "may I"); "May" also not as the query's first word, where it is the verb.
_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_PATTERNS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"\b" + _YEAR + r"-(?P<month>[01]?\d)-(?P<day>[0-3]?\d)\b",  # ISO 8601
        # 16 November 2023, 16th of Nov, 1 February, 2023
        r"\b" + _DAY + r"\s+(?:of\s+)?(?P<name>" + _MONTH + r")\.?\b(?:,?\s*" + _YEAR + r"\b)?",
        # November 16, 2023; Nov 16th; December 1,2023
        r"\b(?P<name>" + _MONTH + r")\.?\s+" + _DAY + r"\b(?:\s*,?\s*" + _YEAR + r"\b)?",
        r"\b(?P<name>" + _MONTH + r")\.?,?\s+" + _YEAR + r"\b",  # June 2023
    )
)
# 2023年11月16日, 11月16日, 2023年11月 (Chinese, Japanese); 2023년 11월 16일 (Korean)
_CJK_PATTERN = re.compile(
    r"(?:" + _YEAR + r"\s*[年년]\s*)?(?P<month>[01]?\d)\s*[月월]"
    r"(?:\s*(?P<day>[0-3]?\d)\s*[日일号號])?"
)
_BARE_MONTH = re.compile(
    r"\b(?P<name>January|February|March|April|May|June|July|August|September|October"
    r"|November|December)\b"
)
_BARE_YEAR = re.compile(r"(?<![\w.,:/-])" + _YEAR + r"(?!\w|[.,:/-]\d)")
# Local dates run from UTC-12 to UTC+14: the dates a moment is somewhere on Earth.
_ZONES = (timedelta(hours=-12), timedelta(0), timedelta(hours=14))
MAX_MENTIONS = 8  # a query listing more dates than this is not asking about one of them


def _patterns() -> tuple[re.Pattern[str], ...]:
    """The date forms read (the CJK ones behind search.rules' `cjk_dates`)."""
    return (*_PATTERNS, _CJK_PATTERN) if rules.current().cjk_dates else _PATTERNS


@dataclass(frozen=True)
class DateMention:
    """A day, a month or a year a query names; what is not named matches any value."""

    year: int | None = None
    month: int | None = None
    day: int | None = None

    def covers(self, at_ms: int) -> bool:
        """Whether a moment falls on what this names in some time zone."""
        moment = datetime.fromtimestamp(at_ms / 1000, UTC)
        return any(self._matches((moment + offset).date()) for offset in _ZONES)

    def spans(self, now_ms: int) -> list[tuple[int, int]]:
        """The times this names, as [start, end) epoch milliseconds wide enough for every
        time zone: the named year, or without one the latest two (this year's and last
        year's June for "in June"; a year-less month later this year is last year's only
        in effect, the table holding nothing from the future)."""
        now = datetime.fromtimestamp(now_ms / 1000, UTC)
        years = [self.year] if self.year is not None else [now.year, now.year - 1]
        return [span for year in years if (span := self._span(year)) is not None]

    def _span(self, year: int) -> tuple[int, int] | None:
        try:
            if self.month is None:
                start, end = date(year, 1, 1), date(year + 1, 1, 1)
            elif self.day is None:
                start = date(year, self.month, 1)
                end = date(year + self.month // 12, self.month % 12 + 1, 1)
            else:
                start = date(year, self.month, self.day)
                end = start + timedelta(days=1)
        except ValueError:  # 29 February of a year without one
            return None
        earliest, latest = _ZONES[-1], _ZONES[0]  # UTC+14 starts a day first, UTC-12 last
        return (_ms(start) - _ms_of(earliest), _ms(end) - _ms_of(latest))

    def _matches(self, local: date) -> bool:
        return (
            (self.year is None or local.year == self.year)
            and (self.month is None or local.month == self.month)
            and (self.day is None or local.day == self.day)
        )


def date_mentions(query: str | None) -> list[DateMention]:
    """The dates a query names, most precise first in each place; none for most queries.
    Full-width digits are plain ones (NFKC), zero-width characters inside a word are
    dropped (search's clip_query). An impossible day ("31 February") names only its month."""
    cleaned, _ = clip_query(query or "")  # zero-width characters go, as search drops them
    if cleaned is None:
        return []
    text = unicodedata.normalize("NFKC", cleaned)
    claimed = _Claimed()
    mentions = [
        mention
        for pattern in _patterns()
        for match in pattern.finditer(text)
        if (mention := _mention(match)) is not None and claimed.take(match)
    ]
    mentions += [
        DateMention(month=MONTHS[match["name"].lower()])
        for match in _BARE_MONTH.finditer(text)
        if not (match["name"] == "May" and not text[: match.start()].strip())
        and claimed.take(match)
    ]
    mentions += [
        DateMention(year=int(match["year"]))
        for match in _BARE_YEAR.finditer(text)
        if claimed.take(match)
    ]
    return mentions if len(mentions) <= MAX_MENTIONS else []


class _Claimed:
    """The parts of a query already read as a date: each character names one date at most."""

    def __init__(self) -> None:
        self._spans: list[tuple[int, int]] = []

    def take(self, match: re.Match[str]) -> bool:
        start, end = match.span()
        if any(start < e and end > s for s, e in self._spans):
            return False
        self._spans.append((start, end))
        return True


def _mention(match: re.Match[str]) -> DateMention | None:
    groups = match.groupdict()
    name = groups.get("name")
    month = MONTHS[name.lower()] if name else int(groups["month"])
    year = int(groups["year"]) if groups.get("year") else None
    day = int(groups["day"]) if groups.get("day") else None
    if not 1 <= month <= 12:
        return None
    if day is not None:
        try:  # a leap year when none is named, so 29 February stands
            date(year or 2000, month, day)
        except ValueError:
            return None
    return DateMention(year, month, day)


def _ms(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def _ms_of(offset: timedelta) -> int:
    return int(offset.total_seconds() * 1000)


def spans_of(mentions: list[DateMention], now_ms: int) -> list[tuple[int, int]]:
    """Every span the mentions name (SearchQuery.during), at most MAX_SPANS, in order."""
    spans = [span for mention in mentions for span in mention.spans(now_ms)]
    return list(dict.fromkeys(spans))[:MAX_SPANS]


def said_on(at_ms: int, mentions: list[DateMention]) -> bool:
    """Whether a message sent at `at_ms` falls on a date the query names."""
    return any(mention.covers(at_ms) for mention in mentions)


# A question asking when something happened ("When did Alice move?", "How long ago…"), in
# the languages the multilingual set speaks and French and Portuguese.
_ASKS_WHEN = re.compile(
    r"\b(?:when|since when|how long ago|what (?:year|month|day|date)|cu[aá]ndo|wann|quand"
    r"|quando)\b|いつ|什么时候|何时|哪一?年|哪一?天|언제",
    re.IGNORECASE,
)
# Words that place what a message tells in time ("yesterday", "last week", "two years ago",
# "next Friday"): the message that answers "when?" says one of them, or a date.
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_TELLS_WHEN = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|(?:last|next|this|past) (?:few |couple of )?"
    r"(?:night|week|weekend|month|year|summer|winter|spring|fall|autumn|" + _WEEKDAYS + r")s?"
    r"|" + _WEEKDAYS + r")\b",
    re.IGNORECASE,
)


def asks_when(query: str | None) -> bool:
    """Whether a query asks when something happened."""
    return bool(query) and _ASKS_WHEN.search(query or "") is not None


def tells_when(text: str) -> bool:
    """Whether a message places what it tells in time: a relative time or a date."""
    return (
        _TELLS_WHEN.search(text) is not None
        or _BARE_MONTH.search(text) is not None
        or bool(date_mentions(text))
    )
