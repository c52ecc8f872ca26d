"""Frames the relay's gateway handler takes per CPU second, on one core (not part of the image).

    python relay/bench_frames.py [seconds]

Feeds `RelayClient.on_socket_raw_receive` the decompressed text of gateway frames, as
discord.py hands them over, with the forwarder behind it (trimming, encoding, batching)
and a sink that accepts everything; no network. Three streams: message dispatches only
(MESSAGE_CREATE of about 1 KB), a server's usual mix (messages, reactions, typing, heartbeat
ACKs), and guild events (channel, role and thread updates).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # discord.py's audioop import
    from relay.batch import BatchLimits
    from relay.forwarder import Forwarder
    from relay.gateway import RelayClient
    from relay.identify import IdentifyLedger
    from relay.sinks import Outcome, SendResult
    from relay.spool import Spool

GUILD = "100000000000000001"
CHANNEL = "200000000000000001"


class NullSink:
    description = "null"

    def send(self, body: bytes) -> SendResult:
        return SendResult(Outcome.DELIVERED)

    def close(self) -> None:
        pass


def frame(sequence: int, name: str, data: dict[str, Any]) -> str:
    return json.dumps({"op": 0, "s": sequence, "t": name, "d": data})


def message(sequence: int) -> str:
    author = {"id": "300000000000000001", "username": "alice", "global_name": "Alice"}
    return frame(
        sequence,
        "MESSAGE_CREATE",
        {
            "id": str(1456074443980800001 + sequence),
            "channel_id": CHANNEL,
            "guild_id": GUILD,
            "author": {**author, "discriminator": "0", "avatar": None, "bot": False},
            "member": {"nick": None, "roles": ["500000000000000001"], "flags": 0},
            "content": "I think the login bug is in the token refresh; rewriting auth.py " * 8,
            "timestamp": "2026-01-01T00:00:00+00:00",
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        },
    )


def streams() -> dict[str, list[str]]:
    messages = [message(i) for i in range(1_000)]
    reaction = frame(
        1,
        "MESSAGE_REACTION_ADD",
        {"user_id": "300000000000000002", "channel_id": CHANNEL, "message_id": "1" * 19,
         "guild_id": GUILD, "emoji": {"id": None, "name": "👍"}, "type": 0, "burst": False},
    )  # fmt: skip
    typing = frame(2, "TYPING_START", {"channel_id": CHANNEL, "user_id": "3" * 18, "timestamp": 1})
    ack = json.dumps({"op": 11, "d": None, "s": None, "t": None})
    mix = [f for m in messages for f in (m, reaction, typing)] + [ack] * 100
    overwrite = {"id": GUILD, "type": 0, "allow": "0", "deny": "1024"}
    guild_events = [
        frame(3, "CHANNEL_UPDATE", {"id": CHANNEL, "type": 0, "guild_id": GUILD, "name": "dev",
              "topic": "MESSAGE_CREATE lives here", "permission_overwrites": [overwrite] * 5}),
        frame(4, "GUILD_ROLE_UPDATE", {"guild_id": GUILD, "role": {"id": "5" * 18,
              "name": "mods", "permissions": "32", "position": 1, "color": 0}}),
        frame(5, "THREAD_CREATE", {"id": "6" * 18, "type": 11, "guild_id": GUILD,
              "parent_id": CHANNEL, "name": "a thread", "owner_id": "3" * 18}),
    ] * 300  # fmt: skip
    return {"messages": messages, "mix": mix, "guild events": guild_events}


async def rate(
    client: RelayClient, forwarder: Forwarder, frames: list[str], seconds: float
) -> float:
    handle = client.on_socket_raw_receive
    # CPU time of this process: the machine may be busy with others.
    done, started = 0, time.process_time()
    while time.process_time() - started < seconds:
        for text in frames:
            await handle(text)
        done += len(frames)
        forwarder.pump()  # send what sealed, as the worker thread would
    return done / (time.process_time() - started)


async def main(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as state:
        limits = BatchLimits(max_events=100, max_bytes=200_000, max_seconds=2.0)
        forwarder = Forwarder(NullSink(), Spool(Path(state) / "spool", 10_000_000), limits)
        client = RelayClient(forwarder, IdentifyLedger(Path(state) / "identify.json", 100))
        for name, frames in streams().items():
            print(f"{name:>13}: {await rate(client, forwarder, frames, seconds):10,.0f} frames/s")
        print(f"forwarder: {forwarder.stats.line()}")
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 3.0))
