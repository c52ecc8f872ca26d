"""The running Lambda invocation's time budget, for what is built once per sandbox.

AnswerFunction's Discord client lives across warm invocations (botmemory.runtime), while
each invocation has its own deadline: the handler calls `begin(context)` first, and the
client reads `time_left_ms` before it waits out a rate limit, so it never sleeps past the
end of the invocation. Outside a handler (a local run, a script) nothing bounds it: None.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class HasRemainingTime(Protocol):
    def get_remaining_time_in_millis(self) -> int: ...


_lock = threading.Lock()
_deadline: list[float] = []  # the monotonic deadline of the invocation under way, if any


def begin(context: HasRemainingTime) -> None:
    """The invocation under way ends `context.get_remaining_time_in_millis()` from now."""
    deadline = time.monotonic() + context.get_remaining_time_in_millis() / 1000
    with _lock:
        _deadline[:] = [deadline]


def time_left_ms() -> int | None:
    """Milliseconds left in the invocation under way (0 once past), None outside one."""
    with _lock:
        if not _deadline:
            return None
        deadline = _deadline[0]
    return max(int((deadline - time.monotonic()) * 1000), 0)
