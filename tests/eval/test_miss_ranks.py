"""eval.miss_ranks: where the evidence of a missed question ranks in the keyword leg."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from eval.harness import BLOCK_OVERHEAD, RANKED_HITS, run_conversation
from eval.miss_ranks import band_of, bands, main
from tests.eval.test_eval import TINY

# The tiny conversation, with a question sharing no word with its evidence ("I adopted a
# puppy named Biscuit"): only a vector leg could find it.
UNSHARED = "Which animal joined the household?"


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    conversation = copy.deepcopy(TINY)
    conversation["qa"].append({"question": UNSHARED, "evidence": ["D2:1"], "category": 4})
    (tmp_path / "1.json").write_text(json.dumps(conversation), encoding="utf-8")
    return tmp_path


def test_a_miss_gets_its_evidence_rank_and_a_hit_gets_none(dataset: Path) -> None:
    roomy = BLOCK_OVERHEAD + 150  # room for every passage the keyword leg finds here
    report = run_conversation(
        dataset / "1.json", sizes=(roomy,), vectors=False, rank_misses_at=roomy
    )
    by_text = {q.number: q for q in report.questions}
    missed = [q for q in by_text.values() if not next(iter(q.held["keywords"].values()))]
    assert [q.miss_rank for q in missed] == [0]  # the unshared question: not found at all
    assert all(q.miss_rank is None for q in by_text.values() if q not in missed)


def test_a_block_too_small_misses_evidence_the_keyword_leg_ranks(dataset: Path) -> None:
    tight = BLOCK_OVERHEAD + 60  # room for no passage
    report = run_conversation(
        dataset / "1.json", sizes=(tight,), vectors=False, rank_misses_at=tight
    )
    ranks = [q.miss_rank for q in report.questions]
    assert None not in ranks  # every question missed
    assert any(rank and 1 <= rank <= RANKED_HITS for rank in ranks)  # found, not shown
    assert 0 in ranks  # and the unshared question not found


def test_without_the_option_nothing_is_ranked(dataset: Path) -> None:
    tight = BLOCK_OVERHEAD + 60
    report = run_conversation(dataset / "1.json", sizes=(tight,), vectors=False)
    assert all(q.miss_rank is None for q in report.questions)


def test_ranks_fall_in_bands_up_to_the_hits_asked_then_below_then_absent() -> None:
    names = [name for _, name in bands(46)]
    assert names[0] == "ranks 1-5" and names[3] == "ranks 21-46"
    assert band_of(46, 46) == "ranks 21-46"
    assert band_of(47, 46) == names[-2] and band_of(RANKED_HITS, 46) == names[-2]
    assert band_of(0, 46) == names[-1] == f"not in the first {RANKED_HITS}"


def test_the_report_counts_misses_per_band(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["--dataset", str(dataset), "--chars", str(BLOCK_OVERHEAD + 150), "--jobs", "1"]) == 0
    )
    out = capsys.readouterr().out
    assert "1 of 5 questions missed" in out
    assert "not in the first 100" in out and "1  (category 4: 1)" in out
