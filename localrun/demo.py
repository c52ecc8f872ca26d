"""`make demo`: the whole system on this machine, with no AWS account, no Docker, no network.

It starts a local DynamoDB (moto's server on 127.0.0.1), creates the table from
template.yaml, wires the five functions the way the template declares them, replays a
real conversation through IngestFunction with the offline `rules` memory model, lets the
stream drive ConsolidateFunction and the schedule drive SweepFunction, then shows what
the bot would remember. It stops everything it started.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from botmemory.recall.block import ELSEWHERE_HEADING, PASSAGE_HEADING
from botmemory.records import FactStatus
from botmemory.storage.keys import ItemKind, kind_of
from localrun.discord_sink import DISCORD_EPOCH_MS
from localrun.motoserver import LocalRunError, MotoServer
from localrun.replay import Replay, default_source, guild_create, load_replay
from localrun.stack import LocalStack

RELAY_BATCH = 20  # events per IngestFunction invoke, as the relay batches them
PROGRESS_EVERY = 100


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, help="a conversation in LoCoMo's JSON format")
    parser.add_argument("--limit", type=int, help="replay at most this many messages")
    parser.add_argument(
        "--port", type=int, default=0, help="port for the local DynamoDB (default: a free one)"
    )
    return parser.parse_args(argv)


def say(text: str = "") -> None:
    print(text, flush=True)


def count_items(stack: LocalStack) -> dict[str, int]:
    counts = {"observations": 0, "facts": 0, "active facts": 0, "episodes": 0, "consolidations": 0}
    kwargs: dict[str, Any] = {"TableName": stack.table_name}
    while True:
        page = stack.dynamodb.scan(**kwargs)
        for item in page["Items"]:
            kind = kind_of(item["sk"]["S"])
            if kind == ItemKind.OBSERVATION:
                counts["observations"] += 1
            elif kind == ItemKind.FACT:
                counts["facts"] += 1
                counts["active facts"] += item.get("status", {}).get("S") == FactStatus.ACTIVE
            elif kind == ItemKind.EPISODE:
                counts["episodes"] += 1
            elif kind == ItemKind.STATE:
                counts["consolidations"] += int(item.get("consolidations", {}).get("N", "0"))
        if "LastEvaluatedKey" not in page:
            return counts
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def replay(stack: LocalStack, server: MotoServer, conversation: Replay) -> None:
    events = conversation.events
    names = " and ".join(conversation.speakers)
    say(
        f"Replaying {conversation.source.name} ({names}, {len(events)} messages) through IngestFunction"
    )
    # The relay forwards the server's GUILD_CREATE first: which channels everyone can see.
    stack.invoke("IngestFunction", {"events": [guild_create(conversation)]})
    stored = 0
    for start in range(0, len(events), RELAY_BATCH):
        server.check()
        answer = stack.invoke("IngestFunction", {"events": events[start : start + RELAY_BATCH]})
        stored += answer["stored"]
        stack.pump_stream(flush=True)
        done = min(start + RELAY_BATCH, len(events))
        if done % PROGRESS_EVERY == 0 or done == len(events):
            say(
                f"  [{done:>4}/{len(events)}] stored {stored}, "
                f"consolidations {int(stack.metrics['Consolidation_consolidated'])}, "
                f"facts written {int(stack.metrics['FactsWritten'])}"
            )


def report(stack: LocalStack, conversation: Replay) -> None:
    from botmemory.commands.listing import user_facts_listing
    from botmemory.runtime import services_from_environment

    counts = count_items(stack)
    superseded = counts["facts"] - counts["active facts"]
    say()
    say("What was kept:")
    rows = [
        ("observations", counts["observations"]),
        ("consolidations", counts["consolidations"]),
        ("model calls", int(stack.metrics["ModelCalls"])),
        ("facts", f"{counts['facts']} ({counts['active facts']} active, {superseded} superseded)"),
        ("episodes", counts["episodes"]),
        ("discarded facts", int(stack.metrics["FactsDiscarded"])),
        ("search index", f"{int(stack.metrics['SearchIndexWrites'])} passages written"),
    ]
    for name, value in rows:
        say(f"  {name:<16} {value}")

    first, second = list(conversation.speakers.items())[:2]
    say()
    say(f"Recall for {first[0]} (the memory block in the bot's prompt):")
    answer = stack.invoke(
        "RecallFunction",
        {
            "guild_id": conversation.guild_id,
            "channel_id": conversation.channel_id,
            "user_id": first[1],
        },
    )
    say(answer["memory"] or "(empty)")
    summary = answer.get("summary")
    if summary:
        say()
        say(
            f"The channel's rolling summary ({len(summary['text'])} characters shown), rewritten "
            "by each consolidation in its one model call; replaced ones are archived and searchable."
        )
    elsewhere_in_general(stack, conversation, first)
    say()
    say(f"Staff listing for {second[0]} (/memory user):")
    say(user_facts_listing(services_from_environment(), conversation.guild_id, second[1]))
    if conversation.early_questions:
        ask_early(stack, conversation, first[1])
        answer_early(stack, conversation, first)


def elsewhere_in_general(stack: LocalStack, conversation: Replay, speaker: tuple[str, str]) -> None:
    """Short-term cross-channel memory: recall in the server's #general, for the same person,
    shows what they said lately in the replay's (public) channel."""
    name, user_id = speaker
    say()
    say(f"{name} moves to #general; recall there carries the thread over:")
    answer = stack.invoke(
        "RecallFunction",
        {
            "guild_id": conversation.guild_id,
            "channel_id": conversation.general_id,
            "user_id": user_id,
            "participants": [user_id],
        },
    )
    section = answer["memory"].split(ELSEWHERE_HEADING, 1)
    if len(section) == 2:
        say(ELSEWHERE_HEADING + section[1].split("\n\n", 1)[0])
    else:
        say("(no short-term entries)")


def ask_early(stack: LocalStack, conversation: Replay, user_id: str) -> None:
    """Recall with a query: a question about something said in the first session, long
    before the latest episodes, answered from the search index."""
    question, answer = conversation.early_questions[0]
    say()
    say(f"Recall with a query, about the first session: {question!r} (LoCoMo's answer: {answer})")
    result = stack.invoke(
        "RecallFunction",
        {
            "guild_id": conversation.guild_id,
            "channel_id": conversation.channel_id,
            "user_id": user_id,
            "query": question,
        },
    )
    passages = result["memory"].split(PASSAGE_HEADING, 1)
    if len(passages) == 2:
        say(PASSAGE_HEADING + passages[1].split("\n\n", 1)[0])
    else:
        say(f"(no passages: search {result['search']})")


def answer_early(stack: LocalStack, conversation: Replay, speaker: tuple[str, str]) -> None:
    """The bot answers: the same question, as a message mentioning it, through
    IngestFunction, which starts AnswerFunction (chat model `rules`, offline)."""
    question, _ = conversation.early_questions[0]
    name, user_id = speaker
    bot = stack.environment()["DISCORD_BOT_USER_ID"]
    now_ms = int(time.time() * 1000)
    mention = {
        "t": "MESSAGE_CREATE",
        "d": {
            "id": str((now_ms - DISCORD_EPOCH_MS) << 22),
            "channel_id": conversation.channel_id,
            "guild_id": conversation.guild_id,
            "author": {"id": user_id, "username": name.lower(), "global_name": name},
            "content": f"<@{bot}> {question}",
            "mentions": [{"id": bot, "username": "memorybot", "bot": True}],
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now_ms / 1000)),
        },
    }
    say()
    say(f"{name} asks the bot, mentioning it: {question!r}")
    stack.invoke("IngestFunction", {"events": [mention]})
    posted = stack.discord.posted if stack.discord else []
    if posted:
        say(f"The bot replies (chat model: rules, offline): {posted[-1].content}")
    else:
        say("(no answer was posted)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    say("Discord memory bot, local demo: no AWS, no Docker, no network.")
    server: MotoServer | None = None
    stack: LocalStack | None = None
    try:
        conversation = load_replay(args.dataset or default_source(), args.limit)
        server = MotoServer(args.port).start()
        say(f"  local DynamoDB: moto server on {server.url} (pid {server.pid})")
        stack = LocalStack(
            server.url,
            parameters={
                "MemoryModel": "rules",
                "ChatModel": "rules",
                "DiscordApplicationId": "1399999999999999999",
            },
            # Time is compressed: the schedule's sweep takes whatever is still pending.
            # The embedded search index (SQLite FTS5, keyword leg): no embedding model offline.
            environment={
                "MEMORY_IDLE_FLUSH_MINUTES": "0",
                "POWERTOOLS_LOG_LEVEL": "WARNING",
                "MEMORY_SEARCH_INDEX": "sqlite::memory:",
            },
        ).start()
        functions = ", ".join(stack.template.function_ids())
        say(f"  table {stack.table_name} created from template.yaml; functions: {functions}")
        say(
            "  memory model: rules (offline); search: SQLite FTS5 (embedded); the stream feeds "
            "ConsolidateFunction and SearchIndexFunction through their filters"
        )
        replay(stack, server, conversation)
        say("The schedule fires: SweepFunction consolidates what is still pending.")
        server.check()
        stack.run_schedule()
        stack.pump_stream(flush=True)
        report(stack, conversation)
        say()
        say(f"Done in {time.monotonic() - started:.1f} s; the local DynamoDB is stopped.")
        return 0
    except LocalRunError as error:
        print(f"make demo: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        if server is not None and not server.alive():
            print(
                f"make demo: the local DynamoDB stopped during the run ({error})", file=sys.stderr
            )
        else:
            print(f"make demo: failed: {error!r}", file=sys.stderr)
        return 1
    finally:
        if stack is not None:
            stack.stop()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
