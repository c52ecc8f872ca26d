"""The privacy rule itself (botmemory.memory.visibility), case by case."""

from __future__ import annotations

from botmemory.memory.visibility import (
    MAX_FACT_CHANNELS,
    Visibility,
    Where,
    learned_where,
    place_label,
)
from botmemory.records import MemoryScope
from tests.support.facts import a_fact

HERE, PUBLIC, PRIVATE, GONE = "201", "202", "203", "204"


def test_a_fact_is_shown_where_it_was_learned_or_where_it_was_public_and_still_is() -> None:
    public_now = frozenset({HERE, PUBLIC})
    private_only = a_fact("1", "private", learned_in=(PRIVATE,))
    in_public = a_fact("1", "public", learned_in=(PUBLIC,), public=True)
    made_private = a_fact("1", "once public", learned_in=(GONE,), public=True)
    no_information = a_fact("1", "legacy", learned_in=())

    here = Visibility(HERE, public_now)
    assert here.facts([private_only, in_public, made_private, no_information]) == [in_public]
    assert Visibility(PRIVATE, public_now).shows(private_only)
    # Private when learned, public now: still not shown elsewhere (it was said in private).
    was_private = a_fact("1", "said in private", learned_in=(PUBLIC,))
    assert not here.shows(was_private) and Visibility(PUBLIC, public_now).shows(was_private)


def test_unknown_visibility_counts_as_private() -> None:
    fact = a_fact("1", "learned in public", learned_in=(PUBLIC,), public=True)
    assert not Visibility(HERE).shows(fact)  # no public channels known: nothing crosses
    assert not Visibility(HERE).shows_words_of(PUBLIC)
    assert Visibility(HERE).shows_words_of(HERE)


def test_a_direct_message_shows_its_reader_their_own_facts_only() -> None:
    dm = Visibility("299", reader="1")
    mine = a_fact("1", "mine, said in private", learned_in=(PRIVATE,))
    theirs = a_fact("2", "theirs", learned_in=(PRIVATE,))
    persona = a_fact("1", "a persona's note", learned_in=(PRIVATE,))
    persona = persona.model_copy(update={"memory_scope": MemoryScope.PERSONA_USER})
    assert dm.facts([mine, theirs, persona]) == [mine]


def test_where_learned_adds_up_and_is_listed() -> None:
    first = a_fact("1", "x", learned_in=(PRIVATE,))
    both = learned_where(PUBLIC, True).added_to(first)
    assert both.learned_in == [PRIVATE, PUBLIC] and both.learned_in_public == [PUBLIC]
    fact = first.model_copy(update=both.fields())
    assert place_label(fact) == f"learned in <#{PRIVATE}> (private), <#{PUBLIC}>"
    assert "not known" in place_label(a_fact("1", "y", learned_in=()))


def test_a_full_channel_set_takes_no_new_channel_and_stays_shown_where_it_was() -> None:
    full = [f"3{n:02d}" for n in range(MAX_FACT_CHANNELS)]
    fact = a_fact("1", "x", learned_in=tuple(full), public=True)
    # A restatement in a new public channel: neither set takes it (never public alone).
    assert learned_where(PUBLIC, True).within_cap(fact) == Where([], [])
    assert learned_where(PUBLIC, True).added_to(fact) == Where.of(fact)
    # In a channel it holds, the channel stays (a no-op for the ADD).
    assert learned_where(full[0], True).within_cap(fact) == Where([full[0]], [full[0]])
    # Room for one more: the first new channels only.
    almost = a_fact("1", "y", learned_in=tuple(full[1:]), public=True)
    assert Where([PRIVATE, PUBLIC], [PUBLIC]).within_cap(almost) == Where([PRIVATE], [])
    # A channel already learned, public now: added to the public set while it has room.
    private = a_fact("1", "z", learned_in=tuple(full))
    assert learned_where(full[3], True).within_cap(private) == Where([full[3]], [full[3]])
