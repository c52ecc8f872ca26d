"""The embedders: Titan V2 on a real bedrock-runtime client (Stubber, or a before-send hook
that answers per request), and the OpenAI-compatible one against a real HTTP server on
127.0.0.1. Nothing here reaches the internet."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import Stubber

from botmemory.providers.aws_clients import CONNECT_TIMEOUT_SECONDS
from botmemory.search.embeddings import (
    MAX_INPUT_CHARS,
    OPENAI_BATCH,
    BedrockTitanEmbedder,
    EmbeddingError,
    OpenAIEmbedder,
    build_embedder,
)
from botmemory.settings.config import ConfigError

TITAN = "amazon.titan-embed-text-v2:0"
API_KEY = "sk-embed-secret-42"


def unit(seed: float, dimensions: int) -> list[float]:
    """A recognisable vector: the seed first, zeros after."""
    return [float(seed)] + [0.0] * (dimensions - 1)


# --- Bedrock ---------------------------------------------------------------------------


def bedrock_client(**config: Any) -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(**config) if config else None,
    )


def titan_answer(payload: Any) -> dict[str, Any]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return {"body": StreamingBody(io.BytesIO(data), len(data)), "contentType": "application/json"}


class JsonBody:
    """Matches an InvokeModel body (a JSON string) by its decoded value."""

    def __init__(self, expected: dict[str, Any]) -> None:
        self.expected = expected

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str | bytes) and json.loads(other) == self.expected

    def __repr__(self) -> str:
        return f"JsonBody({self.expected!r})"


@pytest.fixture
def stubbed() -> Iterator[tuple[Any, Stubber]]:
    client = bedrock_client()
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def test_titan_request_body_and_answer(stubbed: tuple[Any, Stubber]) -> None:
    client, stub = stubbed
    stub.add_response(
        "invoke_model",
        titan_answer({"embedding": unit(0.5, 256), "inputTextTokenCount": 4}),
        {
            "modelId": TITAN,
            "body": JsonBody(
                {"inputText": "Ada likes kayaks", "dimensions": 256, "normalize": True}
            ),
            "contentType": "application/json",
            "accept": "application/json",
        },
    )
    embedder = BedrockTitanEmbedder(TITAN, dimensions=256, client=client)

    vectors = embedder.embed(["Ada likes kayaks"])

    assert vectors == [unit(0.5, 256)]
    assert embedder.name == f"bedrock:{TITAN}" and embedder.dimensions == 256


def test_titan_input_is_cut_to_a_safe_length(stubbed: tuple[Any, Stubber]) -> None:
    client, stub = stubbed
    long_text = "word " * 10_000
    stub.add_response(
        "invoke_model",
        titan_answer({"embedding": unit(1, 512)}),
        {
            "modelId": TITAN,
            "body": JsonBody(
                {"inputText": long_text[:MAX_INPUT_CHARS], "dimensions": 512, "normalize": True}
            ),
            "contentType": "application/json",
            "accept": "application/json",
        },
    )
    assert BedrockTitanEmbedder(TITAN, client=client).embed([long_text]) == [unit(1, 512)]


class RawBody(io.BytesIO):
    """What botocore reads a response body from (urllib3 offers stream())."""

    def stream(self, amt: int = 1024, decode_content: bool = False) -> Iterator[bytes]:
        while chunk := self.read(amt):
            yield chunk


class TitanOnTheWire:
    """Answers each InvokeModel request from its own body, the way the service would, and
    records how many calls were in flight at once. The first texts answer slowest, so the
    calls finish out of order."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self.inputs: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        body = json.loads(request.body)
        number = int(body["inputText"].split()[-1])
        with self._lock:
            self.inputs.append(body["inputText"])
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.05 / (number + 1))
        with self._lock:
            self.in_flight -= 1
        data = json.dumps({"embedding": unit(number, body["dimensions"])}).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(data))}
        return AWSResponse(request.url, 200, headers, RawBody(data))


def test_titan_embeds_texts_in_parallel_and_keeps_their_order() -> None:
    client = bedrock_client()
    wire = TitanOnTheWire(1024)
    client.meta.events.register("before-send.bedrock-runtime.InvokeModel", wire)
    embedder = BedrockTitanEmbedder(TITAN, dimensions=1024, client=client, max_workers=4)
    texts = [f"text number {n}" for n in range(12)]

    vectors = embedder.embed(texts)

    assert [v[0] for v in vectors] == [float(n) for n in range(12)]
    assert all(len(v) == 1024 for v in vectors)
    assert sorted(wire.inputs) == sorted(texts)
    assert 1 < wire.most_in_flight <= 4


def test_titan_embeds_nothing_for_no_texts() -> None:
    assert BedrockTitanEmbedder(TITAN, client=object()).embed([]) == []


@pytest.mark.parametrize(
    "code", ["ThrottlingException", "AccessDeniedException", "ValidationException"]
)
def test_titan_service_errors_become_embedding_errors(
    stubbed: tuple[Any, Stubber], code: str
) -> None:
    client, stub = stubbed
    stub.add_client_error("invoke_model", service_error_code=code, service_message="nope")
    with pytest.raises(EmbeddingError, match=code):
        BedrockTitanEmbedder(TITAN, client=client).embed(["hello"])


@pytest.mark.parametrize(
    "body",
    [
        b"<html>not json</html>",
        {"message": "no embedding here"},
        {"embedding": "0.1,0.2"},
        {"embedding": unit(1, 256)},  # 256 where 512 were asked for
        {"embedding": [True] * 512},
        [unit(1, 512)],
    ],
    ids=["not-json", "no-embedding", "not-a-list", "wrong-length", "booleans", "not-an-object"],
)
def test_titan_bad_answers_become_embedding_errors(stubbed: tuple[Any, Stubber], body: Any) -> None:
    client, stub = stubbed
    stub.add_response("invoke_model", titan_answer(body))
    with pytest.raises(EmbeddingError):
        BedrockTitanEmbedder(TITAN, client=client).embed(["hello"])


def test_titan_timeouts_become_embedding_errors() -> None:
    client = bedrock_client(retries={"total_max_attempts": 1})

    def time_out(request: Any, **_: Any) -> None:
        raise ReadTimeoutError(endpoint_url=request.url)

    client.meta.events.register("before-send.bedrock-runtime.InvokeModel", time_out)
    with pytest.raises(EmbeddingError, match="timeout"):
        BedrockTitanEmbedder(TITAN, client=client).embed(["one", "two"])


def test_titan_one_failure_fails_the_whole_call() -> None:
    wire = TitanOnTheWire(512)

    def sometimes(request: Any, **kwargs: Any) -> AWSResponse:
        if json.loads(request.body)["inputText"].endswith(" 3"):
            data = b'{"message": "Too many requests"}'
            headers = {"x-amzn-ErrorType": "ThrottlingException"}
            return AWSResponse(request.url, 400, headers, RawBody(data))
        return wire(request, **kwargs)

    client = bedrock_client(retries={"total_max_attempts": 1})
    client.meta.events.register("before-send.bedrock-runtime.InvokeModel", sometimes)
    with pytest.raises(EmbeddingError, match="ThrottlingException"):
        BedrockTitanEmbedder(TITAN, client=client).embed([f"t {n}" for n in range(6)])


def test_titan_client_is_built_lazily_with_timeouts_and_retries() -> None:
    embedder = BedrockTitanEmbedder(
        TITAN, region_name="eu-west-1", timeout_seconds=4.5, max_attempts=2, max_workers=16
    )
    assert embedder._client is None  # nothing built until the first call

    client = embedder._bedrock()

    assert client.meta.service_model.service_name == "bedrock-runtime"
    assert client.meta.region_name == "eu-west-1"
    # The connect timeout is short whatever the read timeout (botmemory.providers.aws_clients).
    assert client.meta.config.connect_timeout == CONNECT_TIMEOUT_SECONDS < 4.5
    assert client.meta.config.read_timeout == 4.5
    assert client.meta.config.retries == {"total_max_attempts": 2, "mode": "standard"}
    assert client.meta.config.max_pool_connections >= 16
    assert embedder._bedrock() is client


@pytest.mark.parametrize("dimensions", [0, 128, 768, 2048])
def test_titan_refuses_dimensions_it_does_not_offer(dimensions: int) -> None:
    with pytest.raises(ValueError, match="256, 512, 1024"):
        BedrockTitanEmbedder(TITAN, dimensions=dimensions)


# --- OpenAI-compatible -----------------------------------------------------------------

Reply = tuple[int, dict[str, str], Any]


def embeddings_reply(inputs: list[str], dimensions: int, *, reverse: bool = False) -> Reply:
    """A well-formed answer: input n gets unit(n); optionally listed in reverse order."""
    data = [
        {"object": "embedding", "index": n, "embedding": unit(n, dimensions)}
        for n in range(len(inputs))
    ]
    return 200, {}, {"object": "list", "data": data[::-1] if reverse else data}


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class EmbeddingsServer:
    """A local /embeddings endpoint: each request is answered by the next scripted reply
    (a callable of the request body, or a fixed reply), then by well-formed answers."""

    httpd: ThreadingHTTPServer
    script: list[Callable[[dict[str, Any]], Reply] | Reply] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1/"

    def reply_to(self, body: dict[str, Any]) -> Reply:
        step = self.script.pop(0) if self.script else None
        if step is None:
            return embeddings_reply(body["input"], body["dimensions"])
        return step(body) if callable(step) else step


def make_handler(server: EmbeddingsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            server.seen.append(
                Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            status, headers, payload = server.reply_to(body)
            raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet

    return Handler


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = EmbeddingsServer(httpd)
    httpd.RequestHandlerClass = make_handler(state)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def openai(server: EmbeddingsServer, **kwargs: Any) -> OpenAIEmbedder:
    settings: dict[str, Any] = {"api_key": API_KEY, "dimensions": 256, "sleep": Sleeps()}
    settings.update(kwargs)
    return OpenAIEmbedder("text-embedding-3-small", base_url=server.base_url, **settings)


def test_openai_batches_at_most_64_inputs_per_request(server: EmbeddingsServer) -> None:
    texts = [f"message {n}" for n in range(2 * OPENAI_BATCH + 2)]

    vectors = openai(server).embed(texts)

    assert [len(s.body["input"]) for s in server.seen] == [64, 64, 2]
    assert [i for s in server.seen for i in s.body["input"]] == texts
    for seen in server.seen:
        assert seen.path == "/v1/embeddings"
        assert seen.body["model"] == "text-embedding-3-small"
        assert seen.body["dimensions"] == 256
        assert seen.headers["authorization"] == f"Bearer {API_KEY}"
    # Each batch's answer is unit(position in the batch): the batches were joined in order.
    assert [v[0] for v in vectors] == [float(n % 64) for n in range(len(texts))]


def test_openai_sorts_the_answer_by_index(server: EmbeddingsServer) -> None:
    server.script.append(lambda body: embeddings_reply(body["input"], 256, reverse=True))
    vectors = openai(server).embed(["a", "b", "c"])
    assert [v[0] for v in vectors] == [0.0, 1.0, 2.0]


def test_openai_cuts_long_inputs_and_sends_no_key_when_there_is_none(
    server: EmbeddingsServer,
) -> None:
    openai(server, api_key=None).embed(["x" * (MAX_INPUT_CHARS + 500)])
    assert server.seen[0].body["input"] == ["x" * MAX_INPUT_CHARS]
    assert "authorization" not in server.seen[0].headers


def test_openai_sends_a_lone_surrogate_as_a_replacement(server: EmbeddingsServer) -> None:
    openai(server).embed(["half \ud83d a pair"])
    assert server.seen[0].body["input"] == ["half ? a pair"]


def test_openai_waits_as_retry_after_asks_then_succeeds(server: EmbeddingsServer) -> None:
    server.script.append((429, {"Retry-After": "2"}, {"error": {"message": "slow down"}}))
    sleeps = Sleeps()

    vectors = openai(server, sleep=sleeps).embed(["hello"])

    assert vectors == [unit(0, 256)]
    assert sleeps == [2.0]
    assert len(server.seen) == 2


def test_openai_caps_a_long_retry_after(server: EmbeddingsServer) -> None:
    server.script.append((503, {"Retry-After": "3600"}, {}))
    sleeps = Sleeps()
    openai(server, sleep=sleeps).embed(["hello"])
    assert sleeps == [10.0]


def test_openai_gives_up_after_its_attempts(server: EmbeddingsServer) -> None:
    server.script += [(500, {}, {"error": "boom"})] * 3
    sleeps = Sleeps()

    with pytest.raises(EmbeddingError, match=r"after 3 attempts: HTTP 500"):
        openai(server, sleep=sleeps, max_attempts=3).embed(["hello"])

    assert len(server.seen) == 3
    assert len(sleeps) == 2 and all(0 < s <= 1.0 for s in sleeps)


def test_openai_does_not_repeat_a_rejected_request(server: EmbeddingsServer) -> None:
    server.script.append((401, {}, {"error": f"bad key {API_KEY}"}))

    with pytest.raises(EmbeddingError, match="rejected") as raised:
        openai(server).embed(["hello"])

    assert len(server.seen) == 1
    assert API_KEY not in str(raised.value)  # the echoed key is redacted


def test_openai_wrong_dimension_is_an_error(server: EmbeddingsServer) -> None:
    server.script.append(lambda body: embeddings_reply(body["input"], 1536))
    with pytest.raises(EmbeddingError, match="1536 dimensions where 256"):
        openai(server).embed(["hello"])


@pytest.mark.parametrize(
    "reply",
    [
        (200, {}, b"not json"),
        (200, {}, {"data": []}),
        (200, {}, {"data": [{"embedding": unit(0, 256)}, {"embedding": unit(1, 256)}]}),
        (
            200,
            {},
            {"data": [{"index": 0, "embedding": unit(0, 256)}, {"index": 0, "embedding": []}]},
        ),
    ],
    ids=["not-json", "too-few", "no-index", "duplicate-index"],
)
def test_openai_malformed_answers_are_errors(server: EmbeddingsServer, reply: Reply) -> None:
    server.script.append(reply)
    with pytest.raises(EmbeddingError):
        openai(server).embed(["a", "b"])


def test_openai_transport_errors_are_retried_then_reported() -> None:
    # A port nobody listens on: bind one, then close it.
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    host, port = probe.server_address[:2]
    probe.server_close()
    sleeps = Sleeps()
    embedder = OpenAIEmbedder(
        "m", base_url=f"http://{host}:{port}/v1", api_key=None, sleep=sleeps, max_attempts=2
    )
    with pytest.raises(EmbeddingError, match="transport error"):
        embedder.embed(["hello"])
    assert len(sleeps) == 1


# --- build_embedder and the cold start -------------------------------------------------


def build(spec: str | None, dimensions: int = 512) -> Any:
    return build_embedder(
        spec,
        base_url="https://api.openai.com/v1",
        api_key="k",
        dimensions=dimensions,
        timeout_seconds=5.0,
        max_attempts=2,
    )


@pytest.mark.parametrize("spec", [None, "", "   "])
def test_no_embedding_model_means_no_embedder(spec: str | None) -> None:
    assert build(spec) is None


def test_bedrock_spec_builds_titan_without_a_client() -> None:
    embedder = build(f"bedrock:{TITAN}", dimensions=1024)
    assert isinstance(embedder, BedrockTitanEmbedder)
    assert embedder.name == f"bedrock:{TITAN}" and embedder.dimensions == 1024
    assert embedder._client is None


def test_openai_spec_builds_the_openai_embedder_without_a_client() -> None:
    embedder = build("openai:text-embedding-3-small", dimensions=256)
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.name == "openai:text-embedding-3-small" and embedder.dimensions == 256
    assert embedder._endpoint is None


@pytest.mark.parametrize("spec", ["rules", "cohere:embed-v4", "bedrock:", "openai", "titan"])
def test_other_specs_are_config_errors(spec: str) -> None:
    with pytest.raises(
        ConfigError, match=r"EMBEDDING_MODEL=.*'bedrock:<model id>'.*'openai:<model>'"
    ):
        build(spec)


def test_titan_dimensions_are_checked_when_building() -> None:
    with pytest.raises(ConfigError, match="EMBEDDING_DIMENSIONS"):
        build(f"bedrock:{TITAN}", dimensions=1536)


def test_importing_the_module_loads_neither_boto3_nor_httpx() -> None:
    code = (
        "import sys, botmemory.search.embeddings\n"
        "print(sorted(m for m in ('boto3', 'botocore', 'httpx') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
