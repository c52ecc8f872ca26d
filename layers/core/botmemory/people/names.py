"""Which names point at one person: the rule erasure and consolidation share.

A member chooses their display name, so a name alone proves nothing: a member nicknamed
"the", or "Alice" like another member, must never make erasure touch text about anyone
else. A name counts as naming a person only when it is distinctive: long enough, not a
common word, and used by no other known member of that server.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping

from botmemory.text import normalized

# What a person's mention or name becomes in text kept about others.
REDACTED = "[someone]"
# A Discord user mention, `<@id>` or `<@!id>`.
_MENTION = re.compile(r"<@!?(\d{5,25})>")

# Shorter names are too likely to occur inside ordinary text.
MIN_NAME_CHARS = 3

# Words that occur in ordinary chat often enough that a nickname made of them names nobody.
_COMMON_WORDS = frozenset(
    """\
    the and for are but not you all any can had her was one our out day get has him his how
    man new now old see two way who boy did its let put say she too use yes yeah yep nope
    that with have this will your from they know want been good much some time very when come
    here just like long make many more only over such take than them well were what where
    which while would there their about after again also back because before being below
    between both could does doing down during each even every first into most never next other
    same should since still then these those thing things think through under until upon
    using want what whom why work world year years about above ever okay hey hello hiya
    thanks thank please sorry lol lmao rofl omg wtf brb afk idk imo gg wp xd haha hahaha
    someone somebody anyone anybody everyone everybody nobody none noone nothing something
    anything everything here there user users member members admin admins mod mods moderator
    owner staff bot bots guest guests server channel general chat team friend friends people
    person human name nick nickname unknown deleted test tester new newbie noob player
    love like cool nice great best good bad sad happy real true false null undefined none
    yes no maybe today tomorrow yesterday night morning evening game games music art code
    """.split()  # noqa: SIM905 (a word list reads better as text)
)


def is_distinctive(name: str, users_with_name: Iterable[str], user_id: str) -> bool:
    """Whether `name` names `user_id` alone: long enough, not a common word, and not used by
    any other member known in the scope (`users_with_name`: who has been seen using it)."""
    key = normalized(name)
    if len(key) < MIN_NAME_CHARS or key in _COMMON_WORDS:
        return False
    if all(word in _COMMON_WORDS for word in key.split()):
        return False
    return set(users_with_name) <= {user_id}


def names_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    """One pattern that finds any of these names as whole words, case-insensitively."""
    usable = sorted(
        {n.strip() for n in names if len(n.strip()) >= MIN_NAME_CHARS}, key=len, reverse=True
    )
    if not usable:
        return None
    return re.compile(
        r"(?<!\w)(?:" + "|".join(re.escape(n) for n in usable) + r")(?!\w)", re.IGNORECASE
    )


def mentioned_ids(text: str) -> set[str]:
    """The user ids a text mentions (`<@id>`, `<@!id>`)."""
    return set(_MENTION.findall(text))


def mention_pattern(user_id: str) -> re.Pattern[str]:
    """A mention of the person (`<@id>`, `<@!id>`) or their bare id."""
    escaped = re.escape(user_id)
    return re.compile(rf"<@!?{escaped}>|(?<!\d){escaped}(?!\d)")


def redacted(text: str, user_ids: Iterable[str], names: Iterable[str]) -> str:
    """The text minus these people's mentions and ids, and these names of theirs."""
    for user_id in user_ids:
        text = mention_pattern(user_id).sub(REDACTED, text)
    pattern = names_pattern(names)
    return pattern.sub(REDACTED, text) if pattern is not None else text


def _haystack(text: str) -> str:
    """Text as names are looked for in it: NFKC, case-folded, punctuation as spaces."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.sub(r"[^\w\s]", " ", folded).split())


class NameIndex:
    """Who a text names: a Discord mention of their id, or a distinctive name of a member of
    the scope (names.is_distinctive: long enough, not a common word, used by one member)."""

    def __init__(
        self,
        registry: dict[str, list[str]],
        authors: Mapping[str, str],
        aliases: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        """`authors`: who spoke, by the name they were shown under; `aliases`: every other
        name each goes by (account name, global name): all of them name that member."""
        self.stored = {name: set(ids) for name, ids in registry.items()}  # as the table has it
        users: dict[str, set[str]] = {name: set(ids) for name, ids in registry.items()}
        spoken = [(user_id, name) for user_id, name in authors.items()]
        spoken += [(user_id, n) for user_id, names in (aliases or {}).items() for n in names]
        for user_id, name in spoken:
            if normalized(name):
                users.setdefault(normalized(name), set()).add(user_id)
        self.registry = users
        self.person_of = {
            name: next(iter(ids))
            for name, ids in users.items()
            if len(ids) == 1 and is_distinctive(name, ids, next(iter(ids)))
        }
        self._pattern = names_pattern(self.person_of)

    def named_in(self, text: str) -> set[str]:
        found = mentioned_ids(text)
        if self._pattern is not None and text:
            found |= {
                self.person_of[m.group(0).casefold()]
                for m in self._pattern.finditer(_haystack(text))
                if m.group(0).casefold() in self.person_of
            }
        return found

    def redact(self, text: str, people: set[str]) -> str:
        """The text without these people's mentions, ids and names."""
        names = [name for name, user_id in self.person_of.items() if user_id in people]
        return redacted(text, people, names)


# A Discord display name is at most 32 characters: no longer run of words can be one; and
# runs of more than three words are not looked up (each costs a key read every round).
MAX_NAME_CHARS = 32
MAX_NAME_WORDS = 3
# Registry keys one lookup reads at most (BatchGetItem, 100 a call): a text of random words
# costs a bounded read, whatever the server's size. Single words come first, then pairs.
MAX_NAME_LOOKUPS = 400


def name_candidates(texts: Iterable[str], limit: int = MAX_NAME_LOOKUPS) -> list[str]:
    """The registry keys (normalized names) these texts could name someone by: each run of
    words a name pattern could match (`NameIndex.named_in` looks for whole words), up to
    MAX_NAME_WORDS words and MAX_NAME_CHARS, that could be distinctive; shorter runs first,
    at most `limit`."""
    tokens = [_haystack(text).split() for text in texts if text]
    found: dict[str, None] = {}
    for size in range(1, MAX_NAME_WORDS + 1):
        longer = False
        for words in tokens:
            for start in range(len(words) - size + 1):
                run = " ".join(words[start : start + size])
                if len(run) > MAX_NAME_CHARS:
                    continue
                longer = True
                if run in found or len(run) < MIN_NAME_CHARS:
                    continue
                if all(word in _COMMON_WORDS for word in words[start : start + size]):
                    continue
                found[run] = None
                if len(found) >= limit:
                    return list(found)
        if not longer:
            break
    return list(found)


class NameLookup:
    """The name registry of one scope, read by key for the names texts could hold (never the
    whole registry: a server of 500,000 members has as many entries), cached per lookup."""

    def __init__(
        self,
        read: Callable[[list[str]], dict[str, list[str]]],
        authors: Mapping[str, str],
        aliases: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        """`read`: registry entries by normalized name (botmemory.storage PeopleRepository
        `names_at` of the scope); `authors` and `aliases` as NameIndex takes them."""
        self._read = read
        self._authors = dict(authors)
        self._aliases = {k: list(v) for k, v in (aliases or {}).items()}
        self._registry: dict[str, list[str]] = {}
        self._looked: set[str] = set()
        own = [normalized(n) for n in self._authors.values()]
        own += [normalized(n) for names in self._aliases.values() for n in names]
        self._fetch([n for n in own if n])  # what the registry has each speaker under

    def _fetch(self, wanted: list[str]) -> None:
        new = [n for n in dict.fromkeys(wanted) if n not in self._looked]
        if new:
            self._registry.update(self._read(new))
            self._looked.update(new)

    def index(self, texts: Iterable[str]) -> NameIndex:
        """Who these texts (and any looked up before) can name."""
        self._fetch(name_candidates(texts))
        return NameIndex(self._registry, self._authors, self._aliases)


def nobody_named() -> NameIndex:
    """An index that finds mentions by id only (no names)."""
    return NameIndex({}, {})
