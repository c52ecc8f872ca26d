"""Run one built function as Lambda's python3.13 runtime would: its folder, then the layer, on
the path of an interpreter started with `-I -S` (no site-packages, no .pth file, so nothing
of the project's virtualenv or its editable install), the handler imported by name, then
called once per event with a context object.

    python3.13 -I -S -B lambda_host.py PLAN.json

The plan (written by tests/stack/test_built_artifact.py) gives the function's folder, the
layer, its handler, environment, timeout and events; the answers go to the plan's `output`
file as JSON, with the files of every module the run imported from outside the standard
library. Only the standard library is used here.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import sysconfig
import time
import traceback
import uuid
from pathlib import Path
from typing import Any


class Context:
    """The parts of Lambda's context object the handlers and Powertools read."""

    def __init__(self, function_name: str, timeout_ms: int) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = 512
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        )
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def outside_stdlib() -> list[str]:
    """Files of the modules imported so far that are not the standard library's (this
    script aside: __main__, and __mp_main__ once multiprocessing is imported)."""
    stdlib = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib")}
    files = []
    for name, module in list(sys.modules.items()):
        own = name in {"__main__", "__mp_main__"}
        file = None if own else getattr(module, "__file__", None)
        if file and not any(file.startswith(folder) for folder in stdlib):
            files.append(file)
    return sorted(set(files))


def main(plan_path: str) -> None:
    plan: dict[str, Any] = json.loads(Path(plan_path).read_text(encoding="utf-8"))
    # Lambda's order: the function's code (/var/task), then the layer (/opt/python).
    sys.path[:0] = [plan["function_dir"], plan["layer_dir"]]
    os.environ.clear()
    os.environ.update(plan["environment"])
    module_name, _, function_name = plan["handler"].rpartition(".")
    answers: list[dict[str, Any]] = []
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
        for event in plan["events"]:
            context = Context(plan["function_name"], plan["timeout_ms"])
            try:
                answers.append({"result": handler(event, context)})
            except Exception:  # Lambda reports the error; the test reads it
                answers.append({"error": traceback.format_exc()})
    except Exception:  # the import failed: the function cannot start
        answers.append({"error": traceback.format_exc()})
    report = {"answers": answers, "imported": outside_stdlib()}
    Path(plan["output"]).write_text(json.dumps(report, default=str), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
