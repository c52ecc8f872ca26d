"""Text embeddings for the vector leg of search: Amazon Titan Text Embeddings V2 on Bedrock, or
any OpenAI-compatible /embeddings endpoint.

Nothing heavy is imported at module level: boto3 and httpx load only when a provider is built
and used, so a cold start that never embeds does not pay for them.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from botmemory.providers.aws_clients import bedrock_failures, bedrock_runtime_client
from botmemory.search import rules
from botmemory.search.keywords import QUESTION_FRAME, stem, tokens
from botmemory.settings.config import ConfigError

if TYPE_CHECKING:
    import httpx

    from botmemory.providers.openai_http import OpenAIEndpoint

# Titan V2 takes up to 8,192 tokens / 50,000 characters; passages are far shorter, so a cut
# here only stops a pathological text from failing the whole batch.
MAX_INPUT_CHARS = 20_000
TITAN_DIMENSIONS = frozenset({256, 512, 1024})
OPENAI_BATCH = 64  # inputs per /embeddings request


class EmbeddingError(RuntimeError):
    """An embedding could not be produced (provider error, timeout or a malformed answer)."""


class EmbeddingDimensionsError(EmbeddingError):
    """The model's vectors are not EMBEDDING_DIMENSIONS long: a setting to fix, not a fault
    that passes (every call fails alike). Counted as EmbeddingDimensionsWrong and alarmed."""

    def __init__(self, name: str, returned: int, configured: int) -> None:
        super().__init__(
            f"{name} returned {returned} dimensions where {configured} were configured: "
            f"EMBEDDING_DIMENSIONS={configured} does not match the model; set "
            f"EMBEDDING_DIMENSIONS={returned} (or use a model that gives {configured})"
        )
        self.returned = returned
        self.configured = configured


class Embedder(Protocol):
    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; raises EmbeddingError on any failure."""
        ...


def _cut(text: str) -> str:
    # A lone surrogate cannot be sent as UTF-8 JSON: it becomes "?" rather than an error.
    return text[:MAX_INPUT_CHARS].encode("utf-8", "replace").decode("utf-8")


def _vector(raw: Any, dimensions: int, name: str) -> list[float]:
    """A provider's vector, checked: a list of finite numbers of the configured length."""
    if not isinstance(raw, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in raw
    ):
        raise EmbeddingError(f"{name} returned an embedding that is not a list of numbers")
    if len(raw) != dimensions:
        raise EmbeddingDimensionsError(name, len(raw), dimensions)
    vector = [float(x) for x in raw]
    if not all(math.isfinite(x) for x in vector):
        raise EmbeddingError(f"{name} returned an embedding with non-finite values")
    return vector


class BedrockTitanEmbedder:
    """Titan Text Embeddings V2: one InvokeModel call per text, several texts in parallel."""

    def __init__(
        self,
        model_id: str,
        *,
        dimensions: int = 512,
        client: Any | None = None,
        region_name: str | None = None,
        timeout_seconds: float = 10.0,
        max_attempts: int = 3,
        max_workers: int = 8,
    ) -> None:
        if dimensions not in TITAN_DIMENSIONS:
            raise ValueError(f"Titan V2 dimensions must be one of {sorted(TITAN_DIMENSIONS)}")
        if max_attempts < 1 or max_workers < 1:
            raise ValueError("max_attempts and max_workers must be at least 1")
        self.name = f"bedrock:{model_id}"
        self.dimensions = dimensions
        self._model_id = model_id
        self._client = client
        self._region_name = region_name
        self._timeout_seconds = timeout_seconds
        self._max_attempts = max_attempts
        self._max_workers = max_workers

    def _bedrock(self) -> Any:
        # Built on first use: importing boto3 and creating a client are slow on a cold start.
        if self._client is None:
            self._client = bedrock_runtime_client(
                region_name=self._region_name,
                read_timeout_seconds=self._timeout_seconds,
                max_attempts=self._max_attempts,
                max_pool_connections=self._max_workers,
            )
        return self._client

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        client = self._bedrock()  # once, before any thread could race to build it
        if len(texts) == 1:
            return [self._embed_one(client, texts[0])]
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=min(self._max_workers, len(texts)))
        try:
            # map yields in input order whatever order the calls finish in.
            return list(pool.map(lambda text: self._embed_one(client, text), texts))
        finally:
            # After a failure the answer is lost anyway: do not start the calls still queued.
            pool.shutdown(wait=True, cancel_futures=True)

    def _embed_one(self, client: Any, text: str) -> list[float]:
        body = {"inputText": _cut(text), "dimensions": self.dimensions, "normalize": True}
        with bedrock_failures(self.name, EmbeddingError):
            response = client.invoke_model(
                modelId=self._model_id,
                body=json.dumps(body),
                contentType="application/json",
                accept="application/json",
            )
            raw = response["body"].read()
        try:
            payload = json.loads(raw)
        except ValueError as exc:
            raise EmbeddingError(f"{self.name} returned a body that is not JSON") from exc
        embedding = payload.get("embedding") if isinstance(payload, dict) else None
        return _vector(embedding, self.dimensions, self.name)


class OpenAIEmbedder:
    """POST {base_url}/embeddings in batches, with bounded retries on transient failures."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None,
        dimensions: int = 512,
        timeout_seconds: float = 10.0,
        max_attempts: int = 3,
        http: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # Checked here, not only by the endpoint: that is built on first use, too late for
        # build_embedder to report a bad setting as a ConfigError.
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if dimensions < 1:
            raise ValueError("dimensions must be at least 1")
        self.name = f"openai:{model}"
        self.dimensions = dimensions
        self._model = model
        self._url = f"{base_url.rstrip('/')}/embeddings"
        self._api_key = api_key
        self._timeout_seconds = timeout_seconds
        self._max_attempts = max_attempts
        self._http = http
        self._sleep = sleep
        self._endpoint: OpenAIEndpoint | None = None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), OPENAI_BATCH):
            batch = [_cut(t) for t in texts[start : start + OPENAI_BATCH]]
            vectors += self._embed_batch(batch)
        return vectors

    # -- request -------------------------------------------------------------------------------

    def _openai(self) -> OpenAIEndpoint:
        # Imported and built on first use, for the cold start (see the module docstring).
        if self._endpoint is None:
            from botmemory.providers.openai_http import OpenAIEndpoint, RetryPolicy

            self._endpoint = OpenAIEndpoint(
                self.name,
                self._url,
                api_key=self._api_key,
                timeout_seconds=self._timeout_seconds,
                max_attempts=self._max_attempts,
                # Waits are bounded: an embedding sits on the indexing and recall paths.
                retry=RetryPolicy(
                    backoff_base_seconds=0.25,
                    backoff_cap_seconds=4.0,
                    jitter_seconds=0.1,
                    max_retry_after_seconds=10.0,
                ),
                client=self._http,
                sleep=self._sleep,
            )
        return self._endpoint

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        from botmemory.providers.openai_http import EndpointError

        body = {"model": self._model, "input": batch, "dimensions": self.dimensions}
        try:
            response = self._openai().post(body)
        except EndpointError as exc:
            raise EmbeddingError(str(exc)) from exc
        return self._parse(response, len(batch))

    # -- response ------------------------------------------------------------------------------

    def _parse(self, response: httpx.Response, expected: int) -> list[list[float]]:
        try:
            payload = response.json()
        except ValueError as exc:
            raise EmbeddingError(f"{self.name} returned a body that is not JSON") from exc
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or len(data) != expected:
            count = len(data) if isinstance(data, list) else "no"
            raise EmbeddingError(f"{self.name} returned {count} embeddings for {expected} inputs")
        if not all(isinstance(d, dict) and isinstance(d.get("index"), int) for d in data):
            raise EmbeddingError(f"{self.name} returned embeddings without an index")
        # The spec does not promise answer order; `index` says which input each belongs to.
        ordered = sorted(data, key=lambda d: int(d["index"]))
        if [d["index"] for d in ordered] != list(range(expected)):
            raise EmbeddingError(f"{self.name} returned embedding indexes that do not match")
        return [_vector(d.get("embedding"), self.dimensions, self.name) for d in ordered]


class PrefixedEmbedder:
    """An embedder whose model expects its texts marked by role: e5 ("query: ", "passage: "),
    nomic ("search_query: ", "search_document: ") and others are trained that way and find
    less without it. Passages get `passage_prefix` (embed), questions `query_prefix`
    (embed_query). The name records the prefixes, so vectors made under others are
    recognised as another model's (the embedded index embeds them again)."""

    def __init__(self, inner: Embedder, *, query_prefix: str, passage_prefix: str) -> None:
        self._inner = inner
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.name = f"{inner.name} [{query_prefix!r}/{passage_prefix!r}]"
        self.dimensions = inner.dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._inner.embed([self.passage_prefix + text for text in texts])

    def embed_query(self, text: str) -> list[float]:
        return self._inner.embed([self.query_prefix + text])[0]


# A question's vector is made of what it asks, not of whom it names. "What is Melanie's
# reason for getting into running?" embedded whole lands near every passage said by Melanie
# (labelled "Melanie: ...") or addressed to her, and the answer is crowded out. The keyword
# leg keeps a name as an exact word and recall's said-by rule moves up what the named
# person said, so the vector leg embeds the question without its names: mentions, and
# capitalized words inside a sentence (with their "'s"). A word opening a sentence or a
# quotation may be any word and is kept, and so are all-capital words (LGBTQ, NASA).
# `make eval` (docs/eval.md), embedded hybrid, strict, all ten conversations: 1,289 / 1,374
# / 1,412 of 1,536 questions held at 2,000 / 4,000 / 8,000 characters without the names,
# 1,235 / 1,344 / 1,401 with them.
_MENTION = re.compile(r"<@[!&]?\d{1,20}>")
_PUNCTUATION = "\"'()[]{}.,!?;:\u2026\u00ab\u00bb\u201c\u201d\u2018\u2019\u00bf\u00a1"
_OPENS_SENTENCE_AFTER = (".", "!", "?", ":", "\u2026", "\u3002", "\uff01", "\uff1f")
_OPENS_QUOTE = ('"', "'", "(", "[", "\u201c", "\u2018", "\u00ab", "\u00bf", "\u00a1")
# German capitalizes every noun, so there a capital does not mark a name: a question holding
# one of these words is embedded whole.
_NOUNS_CAPITALIZED = frozenset(
    {"der", "das", "und", "ist", "nicht", "eine", "einen", "einem", "einer", "welche"}
    | {"welcher", "welches", "wann", "wie", "sich", "auch", "f\u00fcr", "wurde", "nach"}
)

# Words that ask without saying about what: "Tell me about Melanie" or "What did Caroline
# say?" asks about the person, and is embedded whole.
_ASKS_ONLY = QUESTION_FRAME | {stem(w) for w in ("tell", "know", "say", "ask", "talk", "remember")}


def question_for_vectors(text: str) -> str:
    """What the vector leg embeds of a search question: the text without the names in it
    (see above); the whole text when it would be left asking about nothing, or is German."""
    switches = rules.current()
    if not switches.names_out_of_vectors:
        return text
    words = _MENTION.sub(" ", text).split()
    bare = [_bare(word) for word in words]
    german = _NOUNS_CAPITALIZED.intersection(word.casefold() for word in bare)
    if german and switches.german_exception:
        return text
    kept: list[str] = []
    for n, (word, core) in enumerate(zip(words, bare, strict=True)):
        opens = n == 0 or words[n - 1].endswith(_OPENS_SENTENCE_AFTER)
        if not _is_name(core) or opens or word.startswith(_OPENS_QUOTE):
            kept.append(word)
        elif kept:  # the name goes, what ends its clause stays: "by Vivaldi?" is "by?"
            kept[-1] += word[len(word.rstrip(_PUNCTUATION)) :]
    without = " ".join(kept)
    return without if set(tokens(without)) - _ASKS_ONLY else text


def _bare(word: str) -> str:
    core = word.strip(_PUNCTUATION)
    for possessive in ("'s", "\u2019s"):
        if core.endswith(possessive):
            return core[: -len(possessive)]
    return core


def _is_name(word: str) -> bool:
    """Capitalized, then lower-case letters only: "Melanie", not "LGBTQ", "iPhone" or "I"."""
    rest = word[1:]
    return word[:1].isupper() and rest.isalpha() and rest.islower()


def embed_query(embedder: Embedder, text: str) -> list[float]:
    """A search question's vector, of the question without its names
    (`question_for_vectors`): marked as a query when the embedder knows roles
    (PrefixedEmbedder), else embedded as any text."""
    text = question_for_vectors(text)
    as_query = getattr(embedder, "embed_query", None)
    if callable(as_query):
        return list(as_query(text))
    return embedder.embed([text])[0]


def build_embedder(
    spec: str | None,
    *,
    base_url: str,
    api_key: str | Callable[[], str | None] | None,
    dimensions: int,
    timeout_seconds: float,
    max_attempts: int,
    query_prefix: str = "",
    passage_prefix: str = "",
) -> Embedder | None:
    """The embedder EMBEDDING_MODEL names, or None when it is unset (keyword search only);
    with EMBEDDING_QUERY_PREFIX or EMBEDDING_PASSAGE_PREFIX, marking texts by role.

    `api_key` is the key, or a function that reads it, called only for a provider that sends
    one (reading it may mean a Secrets Manager call).
    """
    embedder = _provider_embedder(
        spec,
        base_url=base_url,
        api_key=api_key,
        dimensions=dimensions,
        timeout_seconds=timeout_seconds,
        max_attempts=max_attempts,
    )
    if embedder is None or not (query_prefix or passage_prefix):
        return embedder
    return PrefixedEmbedder(embedder, query_prefix=query_prefix, passage_prefix=passage_prefix)


def _provider_embedder(
    spec: str | None,
    *,
    base_url: str,
    api_key: str | Callable[[], str | None] | None,
    dimensions: int,
    timeout_seconds: float,
    max_attempts: int,
) -> Embedder | None:
    spec = (spec or "").strip()
    if not spec:
        return None
    provider, _, model = spec.partition(":")
    model = model.strip()
    key: str | None = None
    if provider == "openai" and model:
        # Read before the try below: a key that cannot be read is its own ConfigError, not
        # one about the dimensions.
        key = api_key() if callable(api_key) else api_key
    try:
        if provider == "bedrock" and model:
            return BedrockTitanEmbedder(
                model,
                dimensions=dimensions,
                timeout_seconds=timeout_seconds,
                max_attempts=max_attempts,
            )
        if provider == "openai" and model:
            return OpenAIEmbedder(
                model,
                base_url=base_url,
                api_key=key,
                dimensions=dimensions,
                timeout_seconds=timeout_seconds,
                max_attempts=max_attempts,
            )
    except ValueError as exc:
        raise ConfigError(f"EMBEDDING_MODEL={spec!r} with EMBEDDING_DIMENSIONS: {exc}") from exc
    raise ConfigError(
        f"EMBEDDING_MODEL={spec!r} is not one of 'bedrock:<model id>' (Titan Text Embeddings "
        "V2), 'openai:<model>' or unset"
    )
