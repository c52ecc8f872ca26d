"""An OpenAI-compatible memory model on 127.0.0.1 for the end-to-end run: it answers each
consolidation with one piece of persona knowledge ("Homework is due on Fridays here") when
at least two observations of the batch mention Friday, citing them, and nothing else."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KNOWLEDGE = "Homework is due on Fridays here"
_OBSERVATION = re.compile(r"^#(\d+) \[\w+\] .*: (.*)$")


def answer_for(batch_text: str) -> dict[str, Any]:
    numbers = [
        int(match.group(1))
        for line in batch_text.splitlines()
        if (match := _OBSERVATION.match(line)) and "Friday" in match.group(2)
    ]
    facts = []
    if len(numbers) >= 2:
        facts.append(
            {
                "user_id": "persona",
                "text": KNOWLEDGE,
                "kind": "fact",
                "evidence": numbers[:2],
                "supersedes": [],
                "scope": "persona",
            }
        )
    return {"facts": facts, "episode": {"summary": "They talked.", "participants": []}}


class FakeModel:
    def __init__(self) -> None:
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                owner.requests += 1
                user = next(m["content"] for m in body["messages"] if m["role"] == "user")
                content = json.dumps(answer_for(user))
                data = json.dumps(
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
