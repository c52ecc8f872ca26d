"""Table 2d: memory model calls per 1,000 messages, with the refresh after answered turns
(MEMORY_ANSWERED_TURNS_PER_REFRESH) off and at its default, as the bot answers more or less
of a channel's messages."""

from __future__ import annotations

from collections.abc import Callable

from tables import print_table
from world import CHAT_LINES, SPEAKERS, Lab

from botmemory.runtime import build_services
from botmemory.settings.config import Settings
from localrun import gateway as gw

MESSAGES = 1000
MESSAGE_EVERY_MS = 30_000  # a busy channel: the idle sweep is never due while it talks
SWEEP_EVERY = 10  # messages between sweeps (rate(5 minutes) in template.yaml)

# Which of the channel's messages are the bot's answers (each to the message before it), and
# how many messages are run (moto is slow: the other scenarios run 200 and are scaled).
Pattern = Callable[[int], bool]
SCENARIOS: list[tuple[str, Pattern, int]] = [
    ("the bot answers 1 message in 20, spread out (typical)", lambda i: i % 20 == 19, MESSAGES),
    ("  the same answers as 5-turn talks, 1 per 100", lambda i: i % 100 in range(43, 52, 2), 200),
    ("a member talking with the bot (every other message)", lambda i: i % 2 == 1, 200),
]


def model_calls(lab: Lab, answers: Pattern, turns: int, messages: int = MESSAGES) -> int:
    """Model calls for `messages` messages in one channel, a stream trigger on each, a sweep
    every SWEEP_EVERY, and a last sweep once the channel falls quiet (its tail)."""
    world = lab.world(answered_turns_per_refresh=turns)
    clock = world.clock
    # Without the search index: it changes no model call, and would only slow the run.
    services = build_services(
        world.services.settings, dynamodb=lab.client, clock=clock, model=world.model
    )
    last = ""
    for i in range(messages):
        at = clock.now_ms() - 1000
        if answers(i):
            event = gw.message(gw.BOT, f"About that: {CHAT_LINES[i % 8]}", at, reply_to=last)
        else:
            event = gw.message(SPEAKERS[i % 3], CHAT_LINES[i % len(CHAT_LINES)], at)
        last = event["d"]["id"]
        services.recorder.record([event])
        services.consolidator.consolidate(gw.CHANNEL)
        if i % SWEEP_EVERY == SWEEP_EVERY - 1:
            services.consolidator.sweep()
        clock.advance(ms=MESSAGE_EVERY_MS)
        lab.meter.take()
    clock.advance(ms=(Settings().idle_flush_minutes + 1) * 60_000)
    services.consolidator.sweep()
    lab.meter.take()
    return world.model.calls


def bench_model_calls(lab: Lab) -> None:
    default = Settings().answered_turns_per_refresh
    rows: list[tuple[object, ...]] = []
    for label, answers, messages in SCENARIOS:
        scale = MESSAGES / messages
        off = model_calls(lab, answers, 0, messages) * scale
        on = model_calls(lab, answers, default, messages) * scale
        answered = sum(answers(i) for i in range(MESSAGES))
        label += "" if messages == MESSAGES else f" ({messages} run, x{scale:g})"
        rows.append((label, answered, int(off), int(on), int(on - off)))
    print_table(
        f"2d. Memory model calls per {MESSAGES:,} messages in a channel"
        f" (MEMORY_CONSOLIDATE_EVERY=20)",
        [
            "scenario",
            "bot answers",
            "calls, refresh off",
            f"calls, refresh after {default}",
            "added",
        ],
        rows,
        [
            f"{MESSAGES:,} messages observed in one channel, the bot's answers among them (each an",
            f"observation like any), one every {MESSAGE_EVERY_MS // 1000} s; a stream trigger on"
            " each, a sweep every 5 minutes, and a last sweep",
            "once the channel is quiet (its tail); the scenarios marked run fewer messages and are",
            "scaled (moto is slow). Target: at most 50 calls per 1,000 messages in",
            "a typical server, where the bot answers 1 message in 20. Counting 1,000 member",
            "messages and their answers besides, every figure grows by the answers' share (x1.05).",
            "The refresh adds calls only where answers come close together: a conversation with",
            f"the bot is consolidated every {default} answered turns instead of every 20 messages.",
        ],
    )
