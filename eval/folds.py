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
    FOLDS,
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
    EVAL_SEARCH_TIMEOUT_MS,
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

# Rules that only change what the vector leg embeds: no effect on the keyword-only path.
VECTOR_ONLY = frozenset({"names_out_of_vectors", "german_exception"})
# Rules for languages LoCoMo (English) lacks: no question of it can win or lose by them.
LANGUAGE_RULES = frozenset({"german_exception", "cjk_dates"})
REPORT_SIZE = "4,000"  # the size the category table is printed at (the target)
# Each conversation's answers, kept so that a run of ten (hours on two cores) can be made in
# pieces and rendered whole (--reuse-folds); gitignored, like the vectors.
RESULTS = Path(__file__).parent / ".folds"


def result_path(path: Path, limit: int | None, vectors: bool, folder: Path = RESULTS) -> Path:
    """Where one conversation's answers are kept: by dataset folder and id, turns replayed
    and paths ("locomo-26-keywords.json")."""
    turns = f"-{limit}" if limit else ""
    dataset = path.parent.name.lstrip(".")
    return folder / f"{dataset}-{path.stem}{turns}-{'hybrid' if vectors else 'keywords'}.json"


def save(asked: list[Asked], where: Path) -> None:
    where.parent.mkdir(parents=True, exist_ok=True)
    body = {"rules": list(rules.RULE_NAMES), "questions": [asdict(q) for q in asked]}
    where.write_text(json.dumps(body), encoding="utf-8")


def load(where: Path) -> list[Asked] | None:
    """Kept answers, each with the variants it was asked under, or None when none are kept.
    A variant is named by its switch (`without(rule)`), so answers kept before a switch was
    added still count for the others, and only the new variant is asked (merged)."""
    if not where.is_file():
        return None
    body = json.loads(where.read_text(encoding="utf-8"))
    return [Asked(**q) for q in body["questions"]]


def asked_variants(asked: Sequence[Asked]) -> set[str]:
    """The variants every one of these questions was asked under."""
    if not asked:
        return set()
    return set.intersection(*(set(q.held) for q in asked))


def still_to_ask(kept: list[Asked] | None, wanted: set[str]) -> list[str]:
    """The variants a conversation still needs: all of them when nothing is kept or today's
    answers (the reference every variant is compared with) are not; else those it lacks."""
    if kept is None or TODAY not in asked_variants(kept):
        return sorted(wanted)
    return sorted(wanted - asked_variants(kept))


def merged(kept: list[Asked], new: list[Asked]) -> list[Asked]:
    """Kept answers with those of the variants asked since (the same questions, in order)."""
    for old, fresh in zip(kept, new, strict=True):
        old.held |= fresh.held
        old.bm25 = fresh.bm25 or old.bm25
    return kept


def rules_for(vectors: bool, chosen: Sequence[str] | None = None) -> tuple[str, ...]:
    """The rules worth switching off on the paths that run: of `chosen` when given, else
    all but those for languages LoCoMo lacks (judged on the multilingual set: `--dataset
    eval/multilingual --rules ...`)."""
    names = tuple(chosen or (r for r in rules.RULE_NAMES if r not in LANGUAGE_RULES))
    return tuple(r for r in names if vectors or r not in VECTOR_ONLY)


def variants(names: Sequence[str]) -> dict[str, rules.SearchRules]:
    """Today's rules, then each one alone off, by variant name."""
    return {TODAY: rules.TODAY} | {without(r): rules.TODAY.without(r) for r in names}


def ablate_conversation(
    path: Path,
    limit: int | None,
    vectors: bool,
    folder: Path = DEFAULT_FOLDER,
    wanted: Sequence[str] | None = None,
) -> list[Asked]:
    """One conversation replayed once, then every question under every variant (those of
    `wanted`, variant names, when given: what a kept run lacks)."""
    conversation = load_conversation(path, limit)
    inner, _ = run_embedder(vectors)
    embedder = CachedEmbedder(inner, folder) if inner is not None else None
    names = rules_for(embedder is not None, None if wanted is None else rules.RULE_NAMES)
    sizes = tuple(BLOCK_SIZES)
    with local_dynamodb() as client:
        paths = search_paths(embedder)
        events = conversation.replay.events
        clock = ManualClock(snowflake_ms(events[0]["d"]["id"]))
        settings = Settings(
            table_name=TABLE, memory_model="rules", search_timeout_ms=EVAL_SEARCH_TIMEOUT_MS
        )
        services = build_services(
            settings, dynamodb=client, clock=clock, model=RulesModel(), search_index=paths.tee
        )
        Replayer(services, clock, conversation.replay.channel_id).replay(events)
        clock.set(clock.now_ms() + SWEEP_EVERY_MS)
        indexes = {p: i for p, i in paths.indexes.items() if p in (KEYWORDS, HYBRID)}
        measurer = Measurer(services, conversation, RequestCounter(client), sizes, indexes)
        asked = [Asked(conversation.sample_id, q.category) for q in conversation.questions]
        to_ask = {v: r for v, r in variants(names).items() if wanted is None or v in wanted}
        for variant, switches in to_ask.items():
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
    chosen: Sequence[str] | None = None,
    kept_in: Path = RESULTS,
) -> dict[str, list[Asked]]:
    """Every conversation's questions under every variant (the rules `chosen`, else all),
    by conversation id, each kept on disk (RESULTS); with `reuse`, the variants kept already
    are read back and only those missing are asked."""
    wanted = set(variants(rules_for(vectors, chosen)))
    found: dict[str, list[Asked]] = {}
    missing: dict[Path, list[str]] = {}
    for path in paths:
        kept = load(result_path(path, limit, vectors, kept_in)) if reuse else None
        if kept is not None:
            found[path.stem] = kept
        if lacking := still_to_ask(kept, wanted):
            missing[path] = lacking
        else:
            done(path.stem, 0.0)
    if not missing:
        return found
    context = multiprocessing.get_context("spawn")  # as eval.locomo: a fresh moto each
    started = time.perf_counter()
    with ProcessPoolExecutor(max(1, min(jobs, len(missing))), mp_context=context) as pool:
        futures = {
            pool.submit(ablate_conversation, p, limit, vectors, DEFAULT_FOLDER, asks): p
            for p, asks in missing.items()
        }
        for future in as_completed(futures):
            path = futures[future]
            fresh = future.result()
            kept = found.get(path.stem)
            found[path.stem] = fresh if kept is None else merged(kept, fresh)
            save(found[path.stem], result_path(path, limit, vectors, kept_in))
            done(path.stem, time.perf_counter() - started)
    return found


def report_lines(
    by_conversation: dict[str, list[Asked]],
    ids: Sequence[str],
    chosen: Sequence[str] | None = None,
) -> list[str]:
    """The folds' tables for every path that ran, for the rules (of `chosen`, when given)
    every conversation was asked without."""
    questions = [q for c in ids for q in by_conversation.get(c, [])]
    folds = fold_split(list(ids), FOLDS)
    ran = {p for q in questions for held in q.held.values() for p in held}
    asked = asked_variants(questions)
    lines = [f"Folds: {' | '.join(', '.join(f) for f in folds)}.", ""]
    for path in (p for p in (KEYWORDS, HYBRID) if p in ran):
        names = tuple(r for r in rules_for(path == HYBRID, chosen) if without(r) in asked)
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
