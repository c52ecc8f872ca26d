"""Search passages as consolidation writes them, for the index tests."""

from __future__ import annotations

from botmemory.search.port import Passage, PassageKind


def message_passage(message_id: str, text: str, channel: str, scope: str) -> Passage:
    """A message's passage: its id names the channel and the message (storage.keys), and its
    time is the id's number, so ids in order are times in order."""
    return Passage(
        id=f"M#{channel}#{message_id}",
        kind=PassageKind.MESSAGE,
        scope=scope,
        channel_id=channel,
        text=text,
        time_ms=int(message_id),
    )
