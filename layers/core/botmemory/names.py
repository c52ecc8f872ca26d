"""Which names point at one person: the rule erasure and consolidation share.

A member chooses their display name, so a name alone proves nothing: a member nicknamed
"the", or "Alice" like another member, must never make erasure touch text about anyone
else. A name counts as naming a person only when it is distinctive: long enough, not a
common word, and used by no other known member of that server.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from botmemory.text import normalized

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
