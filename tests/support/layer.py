"""layers/core/layer_build.py, the script `sam build` runs for the layer, as a module for the
tests (it is not a package: SAM runs it by path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "layer_build", ROOT / "layers" / "core" / "layer_build.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


layer_build = _load()


def services_created() -> set[str]:
    """The AWS services the core creates clients of (layer_build's scan)."""
    return set(layer_build.code_services())
