"""The lines an answer carries about what is kept (botmemory.people.controls): a member told
once per server that the bot keeps memory there, pointing to `/memory privacy`; a paused
member told, each time, that nothing of the exchange is kept."""

from __future__ import annotations

import logging

from botocore.exceptions import BotoCoreError, ClientError

from botmemory.answering.question import Question
from botmemory.services import MemoryServices

log = logging.getLogger(__name__)

NOTICE = (
    "-# I keep memory of what is said in this server: `/memory privacy` says what, for how "
    "long, and how to see, export, pause or erase it."
)


def paused_line(until_ms: int) -> str:
    return (
        f"-# You paused my memory until <t:{until_ms // 1000}:f>: nothing of this exchange is kept."
    )


def memory_lines(services: MemoryServices, question: Question) -> list[str]:
    """What to add under an answer: the pause line, or the first answer's notice. A failed
    write of the notice's record is logged, and the answer goes without it."""
    if not services.settings.memory_enabled:
        return []
    until = services.recorder.gate.paused_until(question.author_id)
    if until is not None:
        return [paused_line(until)]
    if question.guild_id is None or not services.settings.privacy_notice:
        return []
    try:
        first = services.repository.first_notice(
            question.guild_id,
            services.opt_outs.hash_of(question.author_id),
            services.clock.now_ms(),
        )
    except (ClientError, BotoCoreError) as error:
        log.warning("memory notice not recorded", extra={"error": repr(error)[:300]})
        return []
    return [NOTICE] if first else []
