"""`make eval ARGS=--folds`: each rule of search.rules removed alone, on folds of LoCoMo.

Each conversation is replayed once (as eval.harness does); then every question is asked at
the fixed block sizes with every rule in force, and again with each rule alone switched off
(search.rules.applied), on the keyword-only path and, with vectors, the embedded hybrid.
Only recall re-runs between variants: the table and the indexes stay, and the vectors are
read from eval/.vectors/ (eval.vector_cache) after the first run. The tables
(eval.fold_report) give each rule's questions won minus lost per fold of two
conversations and pooled, and what choosing it on the other folds would have gained.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

from botmemory.clock import ManualClock
from botmemory.consolidation.model.rules import RulesModel
from botmemory.runtime import build_services
from botmemory.search import rules
from botmemory.settings.config import Settings
from botmemory.snowflake import snowflake_ms
from eval.dataset import load_conversation
from eval.fold_report import (
    TODAY,
    Asked,
    baseline_lines,
    category_lines,
    fold_split,
    rule_lines,
    without,
)
from eval.harness import (
    BLOCK_SIZES,
    SWEEP_EVERY_MS,
    TABLE,
    Measurer,
    Replayer,
    RequestCounter,
    label,
    local_dynamodb,
    run_embedder,
)
from eval.paths import HYBRID, KEYWORDS, search_paths
from eval.vector_cache import DEFAULT_FOLDER, CachedEmbedder

FOLDS = 5
# Rules that only change what the vector leg embeds: no effect on the keyword-only path.
VECTOR_ONLY = frozenset({"names_out_of_vectors", "german_exception"})
REPORT_SIZE = "4,000"  # the size the category table is printed at (the target)
# Each conversation's answers, kept so that a run of ten (hours on two cores) can be made in
# pieces and rendered whole (--reuse-folds); gitignored, like the vectors.
RESULTS = Path(__file__).parent / ".folds"


def result_path(path: Path, limit: int | None, vectors: bool, folder: Path = RESULTS) -> Path:
    """Where one conversation's answers are kept: by id, turns replayed and paths."""
    turns = f"-{limit}" if limit else ""
    return folder / f"{path.stem}{turns}-{'hybrid' if vectors else 'keywords'}.json"


def save(asked: list[Asked], where: Path) -> None:
    where.parent.mkdir(parents=True, exist_ok=True)
    body = {"rules": list(rules.RULE_NAMES), "questions": [asdict(q) for q in asked]}
    where.write_text(json.dumps(body), encoding="utf-8")


def load(where: Path) -> list[Asked] | None:
    """Kept answers, or None when there are none or they were made with other switches."""
    if not where.is_file():
        return None
    body = json.loads(where.read_text(encoding="utf-8"))
    if body.get("rules") != list(rules.RULE_NAMES):
        return None
    return [Asked(**q) for q in body["questions"]]


def rules_for(vectors: bool) -> tuple[str, ...]:
    """The rules worth switching off on the paths that run."""
    return tuple(r for r in rules.RULE_NAMES if vectors or r not in VECTOR_ONLY)


def variants(names: Sequence[str]) -> dict[str, rules.SearchRules]:
    """Today's rules, then each one alone off, by variant name."""
    return {TODAY: rules.TODAY} | {without(r): rules.TODAY.without(r) for r in names}


def ablate_conversation(
    path: Path, limit: int | None, vectors: bool, folder: Path = DEFAULT_FOLDER
) -> list[Asked]:
    """One conversation replayed once, then every question under every variant."""
    conversation = load_conversation(path, limit)
    inner, _ = run_embedder(vectors)
    embedder = CachedEmbedder(inner, folder) if inner is not None else None
    names = rules_for(embedder is not None)
    sizes = tuple(BLOCK_SIZES)
    with local_dynamodb() as client:
        paths = search_paths(embedder)
        events = conversation.replay.events
        clock = ManualClock(snowflake_ms(events[0]["d"]["id"]))
        settings = Settings(table_name=TABLE, memory_model="rules", search_timeout_ms=5_000)
        services = build_services(
            settings, dynamodb=client, clock=clock, model=RulesModel(), search_index=paths.tee
        )
        Replayer(services, clock, conversation.replay.channel_id).replay(events)
        clock.set(clock.now_ms() + SWEEP_EVERY_MS)
        indexes = {p: i for p, i in paths.indexes.items() if p in (KEYWORDS, HYBRID)}
        measurer = Measurer(services, conversation, RequestCounter(client), sizes, indexes)
        asked = [Asked(conversation.sample_id, q.category) for q in conversation.questions]
        for variant, switches in variants(names).items():
            measurer.baselines = variant == TODAY  # the reference: packed under today's rules
            with rules.applied(switches):
                for question, record in zip(conversation.questions, asked, strict=True):
                    outcome = measurer.ask(question)
                    record.held[variant] = outcome.held
                    if variant == TODAY:  # the baseline under today's rules (snippets)
                        record.bm25 = dict(outcome.bm25_snippets)
        paths.close()
    if embedder is not None:
        embedder.close()
    return asked


def ablate_all(
    paths: list[Path],
    limit: int | None,
    jobs: int,
    vectors: bool,
    done: Callable[[str, float], None] = lambda _id, _s: None,
    reuse: bool = False,
) -> dict[str, list[Asked]]:
    """Every conversation's questions under every variant, by conversation id, each kept
    on disk (RESULTS); with `reuse`, those kept already are read back, not run again."""
    found: dict[str, list[Asked]] = {}
    for path in paths if reuse else []:
        kept = load(result_path(path, limit, vectors))
        if kept is not None:
            found[path.stem] = kept
            done(path.stem, 0.0)
    to_run = [p for p in paths if p.stem not in found]
    if not to_run:
        return found
    context = multiprocessing.get_context("spawn")  # as eval.locomo: a fresh moto each
    started = time.perf_counter()
    with ProcessPoolExecutor(max(1, min(jobs, len(to_run))), mp_context=context) as pool:
        futures = {pool.submit(ablate_conversation, p, limit, vectors): p for p in to_run}
        for future in as_completed(futures):
            path = futures[future]
            found[path.stem] = future.result()
            save(found[path.stem], result_path(path, limit, vectors))
            done(path.stem, time.perf_counter() - started)
    return found


def report_lines(by_conversation: dict[str, list[Asked]], ids: Sequence[str]) -> list[str]:
    """The folds' tables for every path that ran."""
    questions = [q for c in ids for q in by_conversation.get(c, [])]
    folds = fold_split(list(ids), FOLDS)
    ran = {p for q in questions for held in q.held.values() for p in held}
    lines = [f"Folds: {' | '.join(', '.join(f) for f in folds)}.", ""]
    for path in (p for p in (KEYWORDS, HYBRID) if p in ran):
        names = rules_for(path == HYBRID)
        lines += [f"Path {path}: every rule in force against BM25 (raw turns, snippets):", ""]
        lines += [*baseline_lines(questions, folds, path, [label(c) for c in BLOCK_SIZES]), ""]
        for size in (label(c) for c in BLOCK_SIZES):
            lines += [
                f"Path {path}, {size} characters, strict: each rule's questions won "
                "minus lost against the block without it:",
                "",
            ]
            lines += [*rule_lines(questions, folds, names, path, size), ""]
        lines += [f"Path {path}, {REPORT_SIZE} characters, by category, pooled:", ""]
        lines += [*category_lines(questions, ids, names, path, REPORT_SIZE), ""]
    return lines
