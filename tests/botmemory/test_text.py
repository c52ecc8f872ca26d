from __future__ import annotations

from botmemory.text import clip, content_hash, normalized, scrub, short_id


def test_scrub_removes_invisible_and_control_characters() -> None:
    assert scrub("a\u202eb\u200bc\u2066d\u2069\ufeffe\x00f\x1bg\x85h") == "abcdefgh"
    assert scrub("  one\n\n two\tthree  ") == "one two three"
    assert scrub("one\n\n two", keep_newlines=True) == "one\ntwo"
    assert scrub("lone \ud800 surrogate") == "lone surrogate"


def test_line_and_paragraph_separators_are_line_breaks() -> None:
    # Each starts a line wherever text is split into lines (str.splitlines, many renderers).
    assert scrub("one\u2028# two\u2029three") == "one # two three"
    assert scrub("one\u2028two", keep_newlines=True) == "one\ntwo"


def test_clip_marks_the_cut() -> None:
    assert clip("abcdef", 10) == "abcdef"
    assert clip("abcdef", 4) == "abc…" and len(clip("abcdef", 4)) == 4


def test_equal_facts_normalize_to_one_id() -> None:
    a = short_id(content_hash("g", "u", normalized("Likes green tea.")))
    b = short_id(content_hash("g", "u", normalized("  likes GREEN tea")))
    c = short_id(content_hash("g", "other", normalized("Likes green tea.")))

    assert a == b != c
    assert len(a) == 8 and a.isalnum()
