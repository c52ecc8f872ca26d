"""`make eval ARGS=--folds`: the fold split, the pooling of what each rule wins and loses,
"n/a" where there is nothing to count, and search.rules at its defaults changing nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from botmemory.recall.dates import DateMention, date_mentions
from botmemory.recall.search_leg import query_snippet
from botmemory.search import rules
from botmemory.search.embeddings import question_for_vectors
from botmemory.search.fusion import LEGS_K, fused_legs
from botmemory.search.keywords import feedback_terms, query_terms
from botmemory.search.port import Passage, PassageKind
from eval import embedding_server
from eval.embedding_server import OfflineModel
from eval.fold_report import (
    NA,
    TODAY,
    Asked,
    Tally,
    baseline_lines,
    category_lines,
    fold_split,
    rule_effect,
    tally,
    without,
)
from eval.folds import (
    LANGUAGE_RULES,
    VECTOR_ONLY,
    ablate_conversation,
    load,
    merged,
    result_path,
    rules_for,
    save,
    still_to_ask,
    variants,
)
from eval.harness import BLOCK_SIZES, QuestionOutcome, label, run_conversation
from eval.paths import HYBRID, KEYWORDS
from eval.report import margin, margin_lines
from eval.vector_cache import CachedEmbedder, cache_key
from tests.eval.test_eval import tiny_dataset  # noqa: F401  (a fixture)
from tests.eval.test_search_paths import DIMENSIONS, hashed_encode

SIZE = "4,000"


def asked(conversation: str, category: int, today: bool, off: bool, bm25: bool = False) -> Asked:
    """A question held (or not) with every rule, and with rule "r" off."""
    return Asked(
        conversation,
        category,
        held={
            TODAY: {KEYWORDS: {SIZE: today}},
            without("r"): {KEYWORDS: {SIZE: off}},
        },
        bm25={SIZE: bm25},
    )


# The split -------------------------------------------------------------------------------


def test_ten_conversations_make_five_folds_of_two_in_order() -> None:
    ids = [str(n) for n in range(10)]
    assert fold_split(ids) == [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"], ["8", "9"]]


def test_fewer_conversations_than_folds_give_one_fold_each_and_none_is_empty() -> None:
    assert fold_split(["26", "30"]) == [["26"], ["30"]]
    assert fold_split(["a", "b", "c"], 2) == [["a", "b"], ["c"]]
    assert fold_split([]) == []
    with pytest.raises(ValueError):
        fold_split(["a"], 0)


# Pooling ---------------------------------------------------------------------------------


def test_a_rule_s_net_is_the_questions_it_wins_minus_those_it_loses() -> None:
    questions = [
        asked("a", 1, today=True, off=False),  # won
        asked("a", 1, today=True, off=False),  # won
        asked("a", 2, today=False, off=True),  # lost
        asked("a", 2, today=True, off=True),  # both: neither
        asked("a", 4, today=False, off=False),  # neither
    ]
    assert tally(questions, "r", KEYWORDS, SIZE) == Tally(won=2, lost=1, asked=5)
    assert tally(questions, "r", KEYWORDS, SIZE).net == 1


def test_pooled_is_the_sum_of_the_folds_and_each_fold_is_judged_on_the_others() -> None:
    questions = [
        asked("a", 1, True, False),
        asked("a", 1, True, False),  # fold 1: +2
        asked("b", 1, False, True),  # fold 2: -1
        asked("c", 1, True, False),  # fold 3: +1
    ]
    effect = rule_effect(questions, [["a"], ["b"], ["c"]], "r", KEYWORDS, SIZE)
    assert [t.net for t in effect.folds] == [2, -1, 1]
    assert effect.pooled == Tally(won=3, lost=1, asked=4)
    # Fold 1's others net 0: dropped; fold 2's +3: kept; fold 3's +1: kept.
    assert effect.chosen == [False, True, True]
    assert effect.held_out == -1 + 1
    assert effect.spread == pytest.approx(1.5275, abs=1e-3)


# Nothing to count ------------------------------------------------------------------------


def test_a_category_no_conversation_asks_is_na_not_a_division_by_zero() -> None:
    questions = [asked("a", 1, True, False)]
    lines = category_lines(questions, ["a"], ["r"], KEYWORDS, SIZE)
    assert lines[-1] == f"| r | +1 | {NA} | {NA} | {NA} |"


def test_a_fold_with_no_question_is_na_and_a_fold_bm25_misses_is_shown() -> None:
    questions = [asked("a", 1, True, False, bm25=False)]
    lines = baseline_lines(questions, [["a"], ["b"]], KEYWORDS, [SIZE])
    assert "| 1 | a | 4,000 | 1 | 100.0% | 0.0% | +100.0 |" in lines
    assert f"| 2 | b | 4,000 | 0 | {NA} | {NA} | {NA} |" in lines
    effect = rule_effect(questions, [["a"], ["b"]], "r", KEYWORDS, SIZE)
    assert effect.folds[1] == Tally() and effect.spread != effect.spread  # NaN: one fold


# The switches ----------------------------------------------------------------------------


def test_every_switch_defaults_to_today_and_each_can_be_turned_off_alone() -> None:
    assert rules.current() == rules.TODAY == rules.SearchRules()
    assert rules.TODAY.legs_k == LEGS_K == 10
    for name in rules.RULE_NAMES:
        off = rules.TODAY.without(name)
        changed = [
            f.name
            for f in dataclasses.fields(off)
            if getattr(off, f.name) != getattr(rules.TODAY, f.name)
        ]
        assert changed == [name]
    with pytest.raises(ValueError):
        rules.TODAY.without("no such rule")
    assert set(variants(rules_for(False))) == {TODAY} | {
        without(r) for r in rules.RULE_NAMES if r not in VECTOR_ONLY | LANGUAGE_RULES
    }


def test_applied_rules_are_in_force_only_within_the_block() -> None:
    off = rules.TODAY.without("snippets")
    with pytest.raises(RuntimeError), rules.applied(off):
        assert rules.current() is off
        raise RuntimeError
    assert rules.current() is rules.TODAY


def test_switches_reach_the_rules_they_name() -> None:
    long = "I painted a lot this summer. " * 30
    assert query_snippet(long, {"paint"}) != long
    assert query_terms("what kind of art") == ["art"]
    assert feedback_terms(["x"], ["lake boat", "lake boat"]) == ["lake", "boat"]
    assert question_for_vectors("What did Melanie paint?") == "What did paint?"
    assert question_for_vectors("Was hat Melanie für Anna gemalt?") == (
        "Was hat Melanie für Anna gemalt?"
    )
    passages = [
        Passage(id=i, kind=PassageKind.MESSAGE, text=i, scope="s", channel_id="c", time_ms=0)
        for i in "ab"
    ]
    with rules.applied(rules.SearchRules(snippets=False)):
        assert query_snippet(long, {"paint"}) == long
    with rules.applied(rules.SearchRules(question_frame=False)):
        assert query_terms("what kind of art") == ["kind", "art"]
    with rules.applied(rules.SearchRules(feedback_pass=False)):
        assert feedback_terms(["x"], ["lake boat", "lake boat"]) == []
    with rules.applied(rules.SearchRules(names_out_of_vectors=False)):
        assert question_for_vectors("What did Melanie paint?") == "What did Melanie paint?"
    with rules.applied(rules.SearchRules(german_exception=False)):
        assert "Melanie" not in question_for_vectors("Was hat Melanie für Anna gemalt?")
    assert date_mentions("2023年11月16日に何をした?") == [DateMention(2023, 11, 16)]
    with rules.applied(rules.SearchRules(cjk_dates=False)):
        assert date_mentions("2023年11月16日に何をした?") == []
    today = fused_legs(passages, [], 2)[0].score
    with rules.applied(rules.TODAY.without("legs_k")):
        assert fused_legs(passages, [], 2)[0].score == pytest.approx(1 / 61)
    assert today == pytest.approx(1 / 11)


def test_today_s_variant_is_the_plain_eval_s_block(tiny_dataset: Path) -> None:  # noqa: F811
    """Every switch at its default: each question holds at each size exactly what
    `make eval` without --folds finds; every variant is asked every question."""
    plain = run_conversation(tiny_dataset / "1.json", sizes=BLOCK_SIZES, vectors=False)
    folded = ablate_conversation(tiny_dataset / "1.json", None, vectors=False)
    assert [q.held[TODAY] for q in folded] == [q.held for q in plain.questions]
    assert [q.bm25 for q in folded] == [q.bm25_snippets for q in plain.questions]
    sizes = {label(c) for c in BLOCK_SIZES}
    for question in folded:
        assert set(question.held) == set(variants(rules_for(False)))
        assert all(set(by_path[KEYWORDS]) == sizes for by_path in question.held.values())


# The vector cache ------------------------------------------------------------------------


class Counting:
    name = "m"
    dimensions = 2

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += texts
        return [[float(len(t)), 1.0] for t in texts]


def test_vectors_are_read_back_by_model_and_text_across_runs(tmp_path: Path) -> None:
    inner = Counting()
    first = CachedEmbedder(inner, tmp_path)
    assert first.embed(["ab", "abc"]) == [[2.0, 1.0], [3.0, 1.0]]
    assert first.embed_query("ab") == [2.0, 1.0]
    first.close()
    again = CachedEmbedder(inner, tmp_path)
    assert again.embed(["abc", "ab", "abcd"]) == [[3.0, 1.0], [2.0, 1.0], [4.0, 1.0]]
    assert again.embed_query("ab") == [2.0, 1.0]
    assert inner.texts == ["ab", "abc", "ab", "abcd"]  # each once per role
    assert cache_key("m", "query", "ab") != cache_key("other", "query", "ab")


@pytest.fixture
def counted_model(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stand-in model of test_search_paths, recording every text it embeds."""
    import eval.harness as harness

    seen: list[str] = []

    def encode(texts: list[str]) -> list[list[float]]:
        seen.extend(texts)
        return hashed_encode(texts)

    model = OfflineModel("hashed words (test)", DIMENSIONS, encode)
    monkeypatch.setattr(embedding_server, "offline_model", lambda: (model, ""))
    monkeypatch.setattr(harness, "_SERVER", None)
    monkeypatch.delenv("EMBEDDING_MODEL", raising=False)
    return seen


def test_with_vectors_the_hybrid_is_ablated_too_and_a_rerun_embeds_nothing(
    tiny_dataset: Path,  # noqa: F811
    counted_model: list[str],
    tmp_path: Path,
) -> None:
    folder = tmp_path / "vectors"
    first = ablate_conversation(tiny_dataset / "1.json", None, vectors=True, folder=folder)
    assert counted_model
    assert all(set(q.held) == set(variants(rules_for(True))) for q in first)
    assert all(HYBRID in by_path for q in first for by_path in q.held.values())
    counted_model.clear()
    again = ablate_conversation(tiny_dataset / "1.json", None, vectors=True, folder=folder)
    assert counted_model == []
    assert [q.held for q in again] == [q.held for q in first]


def test_kept_answers_read_back_and_only_the_variants_they_lack_are_asked(
    tmp_path: Path,
) -> None:
    answers = [asked("26", 2, True, False, bm25=True), asked("26", 4, False, True)]
    where = result_path(tmp_path / "locomo" / "26.json", None, False, folder=tmp_path / "kept")
    assert where.name == "locomo-26-keywords.json"  # another dataset's 26 is kept apart
    assert load(where) is None
    save(answers, where)
    kept = load(where)
    assert kept == answers
    wanted = {TODAY, without("r"), without("s")}
    assert still_to_ask(None, wanted) == sorted(wanted)
    assert still_to_ask(kept, wanted) == [without("s")]  # "r" was asked already
    assert still_to_ask(kept, {TODAY, without("r")}) == []
    no_today = [Asked("26", 2, held={without("r"): {}})]
    assert still_to_ask(no_today, wanted) == sorted(wanted)  # no reference: all again
    fresh = [
        Asked("26", 2, held={without("s"): {KEYWORDS: {SIZE: False}}}),
        Asked("26", 4, held={without("s"): {KEYWORDS: {SIZE: True}}}),
    ]
    both = merged(kept, fresh)
    assert [set(q.held) for q in both] == [wanted, wanted]
    assert [q.bm25 for q in both] == [{SIZE: True}, {SIZE: False}]  # kept: today's not asked
    assert tally(both, "s", KEYWORDS, SIZE) == Tally(won=1, lost=1, asked=2)


def test_only_the_chosen_rules_are_asked_without() -> None:
    assert rules_for(False, ["snippets", "names_out_of_vectors"]) == ("snippets",)
    assert rules_for(True, ["snippets", "names_out_of_vectors"]) == (
        "snippets",
        "names_out_of_vectors",
    )
    assert rules_for(False) == tuple(
        r for r in rules.RULE_NAMES if r not in VECTOR_ONLY | LANGUAGE_RULES
    )
    assert "cjk_dates" in rules_for(False, ["cjk_dates"])  # on the multilingual set


# The margins `make eval` prints -------------------------------------------------------------


def outcome(conversation: str, held: bool, bm25: bool) -> QuestionOutcome:
    return QuestionOutcome(
        conversation,
        1,
        1,
        cited={KEYWORDS: {SIZE: held}},
        held={KEYWORDS: {SIZE: held}},
        bm25_snippets={SIZE: bm25},
    )


def test_margins_are_pooled_and_per_fold_and_a_fold_bm25_misses_is_reported() -> None:
    questions = [
        outcome("26", True, True),
        outcome("26", True, False),  # 26: +50.0
        outcome("30", False, True),  # 30: −100.0
        outcome("41", True, False),  # 41: BM25 holds nothing: +100.0, shown
        outcome("42", False, False),  # 42: +0.0
    ]
    assert margin(questions, KEYWORDS, SIZE) == pytest.approx(20.0)
    assert margin([], KEYWORDS, SIZE) is None
    lines = margin_lines(questions, [SIZE])
    assert lines[1].split() == ["path", "size", "pooled", "26", "30", "41", "42"]  # a fold each
    assert lines[2].split() == [KEYWORDS, SIZE, "+20.0", "+50.0", "-100.0", "+100.0", "+0.0"]
    assert any("target +5: meets" in line for line in lines)
    assert any("floor" in line and "holds" in line for line in lines)
    behind = margin_lines([outcome("26", False, True)], [SIZE])
    assert any("target +5: below" in line for line in behind)
    assert any("does not hold" in line for line in behind)
