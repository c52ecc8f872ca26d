"""An in-memory stand-in for the S3 Vectors client, so `make eval` runs the deployed adapter.

moto has no S3 Vectors QueryVectors, so the eval hands `S3VectorsSearchIndex` this client
instead: the adapter's own code runs unchanged (its metadata, its filter, its top-K, its
keyword re-rank of the candidates and the fusion), and only the service is played here.
QueryVectors is answered as the service answers it, by the candidate rule the deployment
depends on: the `topK` nearest vectors by cosine distance among those the metadata filter
admits. The service's search is approximate; this one is exact, so the figures are, if
anything, slightly kind to the deployed path.

Only what the adapter calls is implemented: PutVectors, DeleteVectors, ListVectors and
QueryVectors, with the filter operators it writes ($and, $eq, $in, $gte).
"""

from __future__ import annotations

import math
import operator
import threading
from array import array
from collections.abc import Sequence
from typing import Any


def _unit(values: Sequence[float]) -> array[float]:
    norm = math.sqrt(math.fsum(v * v for v in values))
    return array("f", (v / norm for v in values) if norm > 0.0 else values)


def matches(condition: Any, metadata: dict[str, Any]) -> bool:
    """Whether a vector's metadata passes an S3 Vectors filter (the operators used here)."""
    if not isinstance(condition, dict):
        raise ValueError(f"a filter is an object, not {condition!r}")
    for key, test in condition.items():
        if key == "$and":
            if not all(matches(part, metadata) for part in test):
                return False
            continue
        if not isinstance(test, dict) or len(test) != 1:
            raise ValueError(f"unsupported condition on {key!r}: {test!r}")
        ((op, wanted),) = test.items()
        value = metadata.get(key)
        if op == "$eq":
            ok = value == wanted
        elif op == "$in":
            ok = value in wanted
        elif op == "$gte":
            ok = isinstance(value, int | float) and value >= wanted
        else:
            raise ValueError(f"unsupported operator {op!r}")
        if not ok:
            return False
    return True


class InMemoryS3Vectors:
    """The calls `S3VectorsSearchIndex` makes, on one index held in memory (thread-safe)."""

    def __init__(self) -> None:
        self._vectors: dict[str, tuple[array[float], dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.queries = 0

    def put_vectors(self, *, vectors: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        with self._lock:
            for vector in vectors:
                data = _unit(vector["data"]["float32"])
                self._vectors[str(vector["key"])] = (data, dict(vector.get("metadata") or {}))
        return {}

    def delete_vectors(self, *, keys: list[str], **_: Any) -> dict[str, Any]:
        with self._lock:
            for key in keys:
                self._vectors.pop(key, None)
        return {}

    def get_vectors(self, *, keys: list[str], **_: Any) -> dict[str, Any]:
        with self._lock:
            held = [(k, self._vectors[k][1]) for k in keys if k in self._vectors]
        return {"vectors": [{"key": k, "metadata": metadata} for k, metadata in held]}

    def list_vectors(
        self, *, maxResults: int = 1000, nextToken: str | None = None, **_: Any
    ) -> dict[str, Any]:
        with self._lock:
            keys = sorted(self._vectors)
        start = int(nextToken or 0)
        page = keys[start : start + maxResults]
        answer: dict[str, Any] = {
            "vectors": [{"key": k, "metadata": self._vectors[k][1]} for k in page]
        }
        if start + maxResults < len(keys):
            answer["nextToken"] = str(start + maxResults)
        return answer

    def query_vectors(
        self,
        *,
        topK: int,
        queryVector: dict[str, Any],
        filter: dict[str, Any] | None = None,  # the service's parameter name
        **_: Any,
    ) -> dict[str, Any]:
        target = _unit(queryVector["float32"])
        with self._lock:
            self.queries += 1
            stored = list(self._vectors.items())
        scored: list[tuple[float, str, dict[str, Any]]] = []
        for key, (data, metadata) in stored:
            if len(data) != len(target) or (filter is not None and not matches(filter, metadata)):
                continue
            distance = 1.0 - sum(map(operator.mul, target, data))
            scored.append((distance, key, metadata))
        scored.sort(key=lambda entry: (entry[0], entry[1]))
        return {
            "vectors": [
                {"key": key, "metadata": metadata, "distance": distance}
                for distance, key, metadata in scored[:topK]
            ],
            "distanceMetric": "cosine",
        }
