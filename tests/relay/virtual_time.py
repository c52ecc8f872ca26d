"""An asyncio event loop whose clock jumps instead of waiting: when nothing is ready to
run, time moves straight to the next timer. A 5-second IDENTIFY window costs nothing.

Only for code that waits on timers and in-memory queues (no sockets: a socket's wait
would be skipped over as well)."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if not ready and timeout is not None and timeout > 0:
            # A little past the timer: at epoch-sized times a float may not move by `timeout`.
            self._loop.now += timeout + 1e-6
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


async def _finish(tasks: set[asyncio.Task[Any]]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


def run_virtual(
    main: Coroutine[Any, Any, T], start: float = 1_767_225_600.0
) -> tuple[T, VirtualTimeLoop]:
    loop = VirtualTimeLoop(start)
    try:
        return loop.run_until_complete(main), loop
    finally:
        # As asyncio.run does: what is left (the fake's connections) ends before the loop.
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        loop.run_until_complete(_finish(left))
        loop.close()
