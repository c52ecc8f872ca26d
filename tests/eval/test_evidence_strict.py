"""The strict evidence check (eval/evidence.py): a hit counts only for what the block shows."""

from __future__ import annotations

from typing import Any

from botmemory.recall.contract import RecalledEpisode, RecalledFact, RecalledPassage, RecallResult
from botmemory.recall.search_leg import SNIPPET_CHARS, query_snippet
from botmemory.search.keywords import tokens
from botmemory.storage.keys import observation_sk
from eval.baselines import BLOCK_OVERHEAD, RawTurns
from eval.dataset import Turn
from eval.evidence import EvidenceIndex, answer_words, holds_evidence

# A long turn: recall shows it as the sentences that best match the query (its snippet).
LONG = (
    "We spent the whole morning at the market and it was packed with people. "
    "Then my brother called about the dinner plans for the weekend at his place. "
    "In the evening we walked down to the river and watched the boats come in. "
    "The ferry was late again, so we had dinner at the little place by the pier. "
    "Tomorrow it is back to work, and the inbox will be overflowing as usual. "
    "The neighbours are still building that fence between our two gardens. "
    "Anyway, the big news is that I finally adopted a grey cat and named her Pepper. "
    "She sleeps on the sofa all day long."
)
SHORT = "Nice!"


def turn(dia_id: str, text: str, at_ms: int, speaker: str = "Alice") -> Turn:
    return Turn(dia_id, speaker, text, message_id=str(1000 + at_ms), at_ms=at_ms)


TURNS = [turn("D1:1", LONG, 1), turn("D1:2", SHORT, 2, "Bob"), turn("D1:3", "See you!", 3)]


def sk(t: Turn) -> str:
    return observation_sk(t.at_ms, "message", t.message_id)


def passage(message: Turn, **fields: Any) -> RecalledPassage:
    return RecalledPassage(
        id=f"p-{message.dia_id}",
        channel_id="c",
        time_ms=message.at_ms,
        authors=[],
        author_names=[],
        text=message.text,
        provenance=[sk(message)],
        **fields,
    )


def result(**fields: Any) -> RecallResult:
    return RecallResult(memory="", system_prompt=None, enabled=True, **fields)


# The rule -------------------------------------------------------------------------------


def test_shown_text_must_hold_the_answer_words_the_turn_holds() -> None:
    assert answer_words(LONG, "Pepper, a grey cat") == {"pepper", "grey", "cat"}
    snippet_with = (
        "… Anyway, the big news is that I finally adopted a grey cat and named her Pepper. …"
    )
    snippet_without = "We spent the whole morning at the market and it was packed with people. …"
    assert holds_evidence(LONG, snippet_with, "Pepper, a grey cat")
    assert not holds_evidence(LONG, snippet_without, "Pepper, a grey cat")
    # A word cut in half is not the word.
    assert not holds_evidence(LONG, "… adopted a grey cat and named her Pep…", "Pepper")


def test_a_turn_holding_none_of_the_answer_counts_when_most_of_it_is_shown() -> None:
    # "When did Alice adopt her cat?" "7 May 2023": the date is the session's, not the turn's.
    assert not answer_words(LONG, "7 May 2023")
    assert holds_evidence(LONG, LONG, "7 May 2023")
    # All but its first sentence keep most of its words; one sentence does not.
    most = LONG.split(". ", 1)[1]
    assert holds_evidence(LONG, most, "7 May 2023")
    assert not holds_evidence(LONG, LONG[:72] + " …", "7 May 2023")
    assert not holds_evidence(LONG, "… adopted a grey cat and named her Pepper. …", "7 May 2023")


# Recall results --------------------------------------------------------------------------


def test_a_snippet_that_leaves_out_the_answer_is_cited_but_not_held() -> None:
    index = EvidenceIndex(TURNS, [])
    shown = result(passages=[passage(TURNS[0])])
    about_market = index.shown(shown, "How busy was the market in the morning?", "Pepper")
    assert "D1:1" in about_market.strict and "D1:1" not in about_market.held
    about_cat = index.shown(shown, "What did Alice name the cat she adopted?", "Pepper")
    assert "D1:1" in about_cat.strict and "D1:1" in about_cat.held
    # Without the answer there is no strict figure at all.
    assert not index.shown(shown, "cat").held


def test_the_snippet_checked_is_the_one_recall_shows() -> None:
    query = "How busy was the market in the morning?"
    shown = query_snippet(LONG, set(tokens(query)))
    assert "Pepper" not in shown and "market" in shown


def test_a_fact_is_held_when_it_holds_the_answer_words_the_turn_holds() -> None:
    from tests.support.facts import a_fact

    cited = a_fact("u", "Adopted a grey cat named Pepper", fact_id="f1", provenance=[sk(TURNS[0])])
    vague = a_fact("u", "Has a pet", fact_id="f2", provenance=[sk(TURNS[0])])
    index = EvidenceIndex(TURNS, [cited, vague])

    def recalled(fact_id: str, text: str) -> RecalledFact:
        return RecalledFact(id=fact_id, text=text, kind="k", source="s", updated_ms=1)

    good = result(facts={"u": [recalled("f1", cited.text)]})
    poor = result(facts={"u": [recalled("f2", vague.text)]})
    assert "D1:1" in index.shown(good, "cat?", "Pepper").held
    assert "D1:1" in index.shown(poor, "cat?", "Pepper").strict
    assert "D1:1" not in index.shown(poor, "cat?", "Pepper").held
    # The answer is not in the turn's words: the citation stands.
    assert "D1:1" in index.shown(poor, "cat?", "7 May 2023").held


def test_an_episode_quote_cut_short_holds_only_its_words() -> None:
    index = EvidenceIndex(TURNS, [])
    quote = "Alice: \u201cWe spent the whole morning at the market and it\u2026"
    episode = RecalledEpisode(id="e", summary=quote, participants=[], start_ms=1, end_ms=3)
    found = index.shown(result(episodes=[episode]), "market?", "Pepper")
    assert "D1:1" in found.strict and "D1:1" not in found.held
    assert "D1:1" in index.shown(result(episodes=[episode]), "market?", "market").held


# BM25 with the same freedom ----------------------------------------------------------------


def test_bm25_with_snippets_shows_each_turn_as_its_best_sentences_within_the_budget() -> None:
    raw = RawTurns(TURNS)
    query = "What did Alice name the cat she adopted?"
    ranking = raw.ranking(query)
    assert ranking[0] == 0
    whole = raw.pack(ranking, 1_200)
    snippets = raw.pack_snippets(ranking, 1_200, query)
    assert "D1:1" in snippets and len(snippets["D1:1"]) < len(LONG)
    assert holds_evidence(LONG, snippets["D1:1"], "Pepper")
    # The snippet fits a budget the whole turn does not.
    tight = BLOCK_OVERHEAD + SNIPPET_CHARS + 40
    assert len(LONG) > SNIPPET_CHARS + 40  # the whole turn does not fit that room
    assert "D1:1" not in raw.pack(ranking, tight) and "D1:1" in whole
    assert "D1:1" in raw.pack_snippets(ranking, tight, query)
