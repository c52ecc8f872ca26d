"""Real relay processes and the peers they talk to over loopback: `python -m relay` with its
stderr read line by line, and the fake sharded gateway served from a thread of its own."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from tests.relay.fake_shards import FakeShardedGateway, serve_aiohttp

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def relay_environment(**settings: str) -> dict[str, str]:
    """This process's environment without the relay's own settings (a developer's shell
    may carry some), plus `settings`."""
    mine = ("RELAY_", "INGEST_", "SHARD_", "DISCORD_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(mine)}
    env.update(PYTHONUNBUFFERED="1", **settings)
    return env


class RelayProcess:
    """`python -m relay` (with `args`), as ECS runs it; every line it logs is kept in `log`."""

    def __init__(self, env: Mapping[str, str], *args: str, stdin: bool = False) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "relay", *args],
            cwd=ROOT / "relay",
            env=dict(env),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log: list[str] = []
        self._cursor = 0  # `wait_for` looks from here on
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.log.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text)
        self.process.stdin.flush()

    def wait_for(self, pattern: str, timeout: float = 10) -> re.Match[str]:
        """The first line after the previous match that matches `pattern` (a regular
        expression), waiting for the process to log it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for index in range(self._cursor, len(self.log)):
                    if found := re.search(pattern, self.log[index]):
                        self._cursor = index + 1
                        return found
                self._cursor = len(self.log)
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    raise AssertionError(
                        f"relay never logged {pattern!r}; it logged:\n{''.join(self.log)}"
                    )
                self._changed.wait(left)

    def terminate(self, timeout: float = 15) -> int:
        """SIGTERM, as ECS stops a task; the exit code once every line is read."""
        self.process.send_signal(signal.SIGTERM)
        return self.finish(timeout)

    def kill(self) -> int:
        """SIGKILL: the process ends at once, with nothing saved, flushed or closed."""
        self.process.send_signal(signal.SIGKILL)
        return self.finish(5)

    def finish(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(5)
        return code

    def stop(self) -> None:
        """Make sure the process is gone (a test that failed halfway)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(5)


class GatewayThread:
    """The fake sharded gateway behind a real websocket on 127.0.0.1, on an event loop of its
    own thread, so that relay processes (or this process's relay) can reach it; `call` runs
    a function on that loop (the fake is not thread-safe)."""

    def __init__(self, fake: FakeShardedGateway) -> None:
        self.fake = fake
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.runner, _ = self.loop.run_until_complete(serve_aiohttp(fake))
            started.set()
            self.loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        assert started.wait(5), "the fake gateway did not start"

    @property
    def api_base(self) -> str:
        """DISCORD_API_BASE: where GET /gateway/bot is answered."""
        return self.fake.url.replace("ws://", "http://") + "/api/v10"

    def call(self, function: Callable[[], T]) -> T:
        async def run() -> T:
            return function()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(5)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
