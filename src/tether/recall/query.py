"""What a recall query says besides its words: the dates and periods it names ("on 13 October 2023", "in
July", "yesterday", "last week"), as time windows that rank entries from then higher, and the words it is
matched on (the store's tokens, so names compare with message authors); whether it asks *when* (then turns
that place something in time rank higher) and whom a question is about (`subject_of`)."""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..store.searchtext import STOP_WORDS, tokens

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_PATTERNS = [
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I),  # 13 October 2023
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I),  # October 13, 2023
    re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b"),  # 2023-10-13
    re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I),  # October 2023
    re.compile(rf"\b(?:in|during|since|from|of)\s+{_MONTH}\b", re.I),  # in October (the latest one)
    re.compile(rf"\b(?:in|during|of)\s+{_YEAR}\b", re.I),  # in 2023
]
_RELATIVE = {
    "today": (0, 1),
    "yesterday": (1, 1),
    "last week": (7, 7),
    "this week": (7, 8),
    "last month": (31, 31),
    "this month": (31, 32),
}


@dataclass(frozen=True)
class Period:
    """A half-open time window [start, end) in epoch seconds that a query names, and how it was named."""

    start: float
    end: float
    text: str

    def contains(self, t: float) -> bool:
        return self.start <= t < self.end


def periods(query: str, *, now: float) -> list[Period]:
    """The dates and periods named in `query`, as local-time windows. Month names alone mean their most
    recent occurrence up to `now`; relative words (yesterday, last week) count back from `now`."""
    found: list[Period] = []
    taken: list[tuple[int, int]] = []
    today = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    for pattern in _PATTERNS:
        for m in pattern.finditer(query):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue  # a longer form already took these words ("13 October 2023" is not also "October 2023")
            window = _window(m.groupdict(), today)
            if window is not None:
                taken.append((m.start(), m.end()))
                found.append(Period(window[0].timestamp(), window[1].timestamp(), m.group(0)))
    lowered = query.lower()
    for phrase, (back, length) in _RELATIVE.items():
        if re.search(rf"\b{phrase}\b", lowered):
            start = today - timedelta(days=back)
            found.append(Period(start.timestamp(), (start + timedelta(days=length)).timestamp(), phrase))
    return found


def _window(groups: dict[str, str | None], today: datetime) -> tuple[datetime, datetime] | None:
    month_text, day_text, year_text = groups.get("month"), groups.get("day"), groups.get("year")
    month = None
    if month_text is not None:
        month = int(month_text) if month_text.isdigit() else _MONTHS.get(month_text.lower().rstrip("."))
        if month is None or not 1 <= month <= 12:
            return None
    year = int(year_text) if year_text else None
    try:
        if year is not None and month is not None and day_text is not None:
            start = datetime(year, month, int(day_text))
            return start, start + timedelta(days=1)
        if year is not None and month is not None:
            start = datetime(year, month, 1)
            return start, _next_month(start)
        if year is not None:
            return datetime(year, 1, 1), datetime(year + 1, 1, 1)
        if month is not None:
            start = datetime(today.year if month <= today.month else today.year - 1, month, 1)
            return start, _next_month(start)
    except ValueError:
        return None  # 31 February
    return None


def _next_month(start: datetime) -> datetime:
    return datetime(start.year + (start.month == 12), start.month % 12 + 1, 1)


def content_words(query: str) -> set[str]:
    """The lower-case words of a query that are not stop words: what names are compared with."""
    return {t for t in tokens(query) if t not in STOP_WORDS}


_ASKS_WHEN = re.compile(
    r"^\W*(?:when\b|what\s+(?:date|day|month|year|time)\b|(?:in\s+)?which\s+(?:year|month|week|day)\b"
    r"|how\s+long\s+ago\b)",
    re.I,
)
_WEEKDAYS = "|".join(name.lower() for name in calendar.day_name)
_MONTH_NAMES = "|".join(name.lower() for name in calendar.month_name if name and name != "May")
_TIME_EXPRESSION = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|recently|lately|ago|the other day|weekends?"
    rf"|(?:last|this|next|past|previous|coming)\s+(?:week|weekend|month|year|night|morning|afternoon|evening"
    rf"|summer|winter|spring|fall|autumn|{_WEEKDAYS})"
    rf"|(?:{_WEEKDAYS})s?|{_MONTH_NAMES}|may\s+[0-3]?\d|[0-3]?\d\s+may|in\s+may"
    r"|(?:19|20)\d\d|[0-3]?\d/[0-3]?\d(?:/\d\d(?:\d\d)?)?)\b",
    re.I,
)


def asks_when(query: str) -> bool:
    """Whether the query asks for a time ("When did ...", "What year ...", "How long ago ...")."""
    return _ASKS_WHEN.search(query) is not None


def places_in_time(text: str) -> bool:
    """Whether the text says when something happened or will: a date, a month, a weekday, a year, or a
    relative time ("yesterday", "last weekend", "two weeks ago"). May counts only as a date ("in May",
    "May 23"), not as the verb."""
    return _TIME_EXPRESSION.search(text) is not None


_AUXILIARY = re.compile(
    r"\b(?:does|did|do|is|was|were|are|has|had|have|would|will|can|could|should|might)\s+([^\W\d_]+)", re.I
)


_AND_NAME = re.compile(r"\s+and\s+([^\W\d_]+)", re.I)


def subject_of(query: str, names: set[str]) -> str | None:
    """The person a question is about, among `names` (lower-case): the first of them right after an
    auxiliary verb ("What did *Jon* say about Gina's store?"), or None when the question has no such
    subject or a joint one ("How do Jon and Gina ...": then every name it mentions counts alike)."""
    for m in _AUXILIARY.finditer(query):
        word = m.group(1).lower()
        if word in names:
            joint = _AND_NAME.match(query, m.end())
            return None if joint is not None and joint.group(1).lower() in names else word
    return None
