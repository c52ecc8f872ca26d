"""`make eval` (eval/): the BM25 baseline, evidence tracing, and a smoke run on a tiny slice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from botmemory.recall.contract import RecalledEpisode
from eval.bm25 import BM25, stem, tokenize
from eval.dataset import dia_ids, load_conversation
from eval.evidence import EvidenceIndex
from eval.harness import BLOCK_SIZES, label, run_conversation, sized_settings
from eval.locomo import main, run_all
from localrun.replay import SHARED_DATASET

# A conversation in LoCoMo's format, small enough to replay in a second.
TINY: dict[str, Any] = {
    "speaker_a": "Alice",
    "speaker_b": "Bob",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Alice", "dia_id": "D1:1", "text": "Hi Bob! I love playing the cello."},
        {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice! I work as a carpenter these days."},
        {"speaker": "Alice", "dia_id": "D1:3", "text": "How is the workshop going?"},
        {"speaker": "Bob", "dia_id": "D1:4", "text": "Busy: we are building a boat for a fair."},
    ],
    "session_2_date_time": "10:15 am on 20 May, 2023",
    "session_2": [
        {"speaker": "Bob", "dia_id": "D2:1", "text": "I adopted a puppy named Biscuit."},
        {"speaker": "Alice", "dia_id": "D2:2", "text": "So cute! Did Biscuit like the park?"},
        {"speaker": "Bob", "dia_id": "D2:3", "text": "He ran around the pond all afternoon."},
    ],
    "qa": [
        {"question": "What instrument does Alice play?", "evidence": ["D1:1"], "category": 4},
        {"question": "What is Bob's job?", "evidence": ["D1:2"], "category": 1},
        {"question": "When did Bob adopt Biscuit?", "evidence": ["D2:1"], "category": 2},
        {"question": "What is Bob building?", "evidence": ["D1:4"], "category": 3},
        {"question": "What does Bob play?", "adversarial_answer": "cello", "category": 5},
        {"question": "Where is the boat?", "evidence": ["D7:7"], "category": 4},
    ],
}


@pytest.fixture
def tiny_dataset(tmp_path: Path) -> Path:
    (tmp_path / "1.json").write_text(json.dumps(TINY), encoding="utf-8")
    return tmp_path


# BM25 -----------------------------------------------------------------------------------


def test_stemming_folds_common_inflections_and_keeps_names_and_numbers() -> None:
    assert {stem(w) for w in ("hiking", "hiked", "hikes", "hike")} == {"hik"}
    assert stem("running") == stem("runs") == "run"
    assert stem("studies") == stem("studied") == "study"
    assert stem("falling") == "fall"
    assert tokenize("When did Caroline go to the 2022 parade?") == [
        "carolin",
        "go",
        "2022",
        "parad",
    ]


def test_bm25_ranks_the_turn_that_shares_the_rare_words_first() -> None:
    index = BM25(
        [
            "I went to the park with my dog",
            "My sister adopted two kittens last spring",
            "The park was crowded, the dog was happy",
            "We talked about the weather",
        ]
    )
    assert index.rank("When did her sister adopt the kittens?")[0] == 1
    assert index.rank("dog park") == [0, 2]  # equal scores: the earlier first
    assert index.rank("spaceship") == []
    scores = index.scores("adopting kitten")
    assert scores[1] > 0 and scores[0] == scores[2] == scores[3] == 0


def test_bm25_weighs_rare_terms_above_common_ones_and_prefers_short_documents() -> None:
    index = BM25(["cat dog", "cat", "cat cat bird", "cat fish fish fish fish fish fish"])
    assert index.rank("bird cat")[0] == 2  # "bird" is rare
    ranking = index.rank("cat")
    assert ranking.index(1) < ranking.index(3)  # same term, shorter document


# Evidence tracing -----------------------------------------------------------------------


def test_dia_ids_are_read_in_the_dataset_s_variants() -> None:
    assert dia_ids(["D8:6; D9:17"]) == ["D8:6", "D9:17"]
    assert dia_ids(["D:11:26", "D30:05", "D"]) == ["D11:26", "D30:5"]


def test_an_episode_counts_the_turns_it_quotes_and_its_sources_apart(tiny_dataset: Path) -> None:
    conversation = load_conversation(tiny_dataset / "1.json")
    index = EvidenceIndex(conversation.turns, [])
    first = [t for t in conversation.turns if t.dia_id.startswith("D1:")]
    episode = RecalledEpisode(
        id="e1",
        summary="Alice, Bob talked (4 events). Bob: \u201cBusy: we are building a boat for a fair.\u201d "
        "Alice: \u201cHi Bob!\u201d Bob: \u201cNice! I work as a carp\u2026",
        participants=[],
        start_ms=first[0].at_ms,
        end_ms=first[-1].at_ms,
    )
    quoted, sources = index.episode_turns(episode)
    assert quoted == {"D1:1", "D1:2", "D1:4"}
    assert sources == {"D1:1", "D1:2", "D1:3", "D1:4"}


def test_block_settings_fit_the_total_size() -> None:
    from botmemory.settings.config import Settings

    base = Settings(memory_model="rules")
    for chars in BLOCK_SIZES:
        sized = sized_settings(base, chars)
        assert sized.recall_pin_chars == 0
        sections = sized.recall_fact_chars + sized.recall_search_chars + sized.recall_episode_chars
        assert sections < chars
    assert sized_settings(base, None) == base


# The harness ----------------------------------------------------------------------------


def test_the_harness_traces_memory_and_baselines_back_to_evidence(tiny_dataset: Path) -> None:
    report = run_conversation(tiny_dataset / "1.json", vectors=False)

    assert report.unanswerable == 1  # the question whose evidence is no turn
    assert [q.category for q in report.questions] == [4, 1, 2, 3]
    assert report.stats.turns == 7 and report.stats.rounds >= 2  # the sweep took each session
    cello = report.questions[0]
    size = label(BLOCK_SIZES[0])
    assert cello.bm25[size] and cello.system[size]  # BM25 and the fact "Likes playing the cello"
    for chars in (None, *BLOCK_SIZES):
        name = label(chars)
        assert len(report.latencies_ms[name]) == len(report.questions)
        assert all(n > 0 for n in report.requests[name])
        assert all(0 < q.block_chars[name] <= (chars or 4_000) for q in report.questions)


def test_no_languages_with_two_jobs_runs_nothing_and_does_not_fail() -> None:
    # A process pool of zero workers is an error: an empty list must not reach it.
    assert run_all([], None, jobs=2) == []


def test_make_eval_prints_a_table_per_block_size(
    tiny_dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--dataset", str(tiny_dataset), "--jobs", "1", "--no-languages", "--keywords-only"]
    assert main(args) == 0
    out = capsys.readouterr().out
    titles = [line for line in out.splitlines() if line.startswith(("Today's", "Block of"))]
    assert len(titles) == 1 + len(BLOCK_SIZES)
    for size in BLOCK_SIZES:
        assert f"Block of at most {size:,} characters" in out
    rows = [
        line.split()[0]
        for line in out.splitlines()
        if line[:1].isdigit() or line.startswith("overall")
    ]
    assert rows.count("overall") == 1 + len(BLOCK_SIZES)
    header = next(line for line in out.splitlines() if line.startswith("category"))
    assert header.split("  ")[0].strip() == "category"
    for column in (
        "questions",
        "keywords (cited / held)",
        "+ episode sources",
        "recency window",
        "BM25",
        "BM25 snippets (held)",
    ):
        assert column in header
    assert "p50" in out and "p95" in out and "requests per recall" in out
    assert "Done in" in out


def test_make_eval_names_a_missing_dataset_or_conversation(
    tiny_dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--dataset", str(tiny_dataset / "nowhere")]) == 2
    assert "no LoCoMo dataset" in capsys.readouterr().err
    assert main(["--dataset", str(tiny_dataset), "--conversations", "1,99"]) == 2
    assert "no conversation 99" in capsys.readouterr().err


@pytest.mark.skipif(not SHARED_DATASET.is_dir(), reason="the LoCoMo dataset is not here")
def test_a_slice_of_a_real_conversation_runs() -> None:
    report = run_conversation(SHARED_DATASET / "30.json", limit=40, vectors=False)
    assert report.stats.turns == 40
    assert report.stats.rounds >= 2 and report.stats.facts and report.stats.episodes
    assert report.questions  # those whose evidence lies in the first 40 turns
    # The block follows the question: a query finds different passages for each.
    assert len({q.block_chars[label(None)] for q in report.questions}) > 1
    assert report.stats.passages and report.stats.search.get("ok") == 4 * len(report.questions)
    assert any(q.system[label(4_000)] for q in report.questions)
