"""The core layer as `sam build` makes it (layers/core/layer_build.py): at most 20 MB
installed, and everything the handlers import is still in it after the prune.

Offline: the layer is rebuilt from this virtualenv's files of exactly the layer's
distributions (the same wheels, native ones differ a little by architecture), pruned by the
build's own rules; bytecode is left out, as the build installs with --no-compile."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from packaging.utils import canonicalize_name

from localrun.stack import TEST_PUBLIC_KEY
from tests.stack.test_supply_chain import DEPLOYED, LAYER, versions

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 20_000_000  # bytes
# What the Lambda Python runtime provides: boto3 and what it needs.
RUNTIME = ("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3")


def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "layer_build", ROOT / "layers" / "core" / "layer_build.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


layer_build = _build_module()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ARTIFACTS_DIR/python as the build leaves it, from this venv's wheels."""
    pinned = versions(LAYER, DEPLOYED)
    for name, version in pinned.items():
        assert metadata.version(name) == str(version), f"{name}: the venv is not the lock's"
    site = tmp_path_factory.mktemp("layer") / "python"
    layer_build.copy_installed(sorted(pinned), site)
    layer_build.prune(site)
    layer_build.add_botmemory(site)
    return site


def installed_size(site: Path) -> int:
    return sum(p.stat().st_size for p in site.rglob("*") if p.is_file())


def test_the_layer_is_at_most_20_mb_installed(built: Path) -> None:
    size = installed_size(built)
    print(f"core layer installed: {size / 1e6:.1f} MB (limit {LIMIT / 1e6:.0f} MB)")
    assert size <= LIMIT, f"the layer is {size / 1e6:.1f} MB installed, over 20 MB"


def test_the_layers_dependencies_with_bytecode_are_at_most_20_mb(
    built: Path, tmp_path: Path
) -> None:
    """The measure of `pip install --target` (which compiles bytecode): 24.9 MB unpruned."""
    import compileall

    site = tmp_path / "python"
    shutil.copytree(built, site, ignore=shutil.ignore_patterns("botmemory"))
    assert compileall.compile_dir(site, quiet=2, workers=1)
    size = installed_size(site)
    print(f"core layer's dependencies with bytecode: {size / 1e6:.1f} MB")
    assert size <= LIMIT, f"{size / 1e6:.1f} MB with bytecode, over 20 MB"


def test_the_prune_removes_what_it_names(built: Path) -> None:
    assert layer_build.pruned(built) == []
    assert not (built / "pydantic" / "v1").exists()
    assert not (built / "pycparser").exists()
    assert (built / "nacl").is_dir() and (built / "pydantic_core").is_dir()
    assert any(built.glob("_cffi_backend*")), "PyNaCl's compiled module needs _cffi_backend"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_code_of_the_layer_or_the_handlers_imports_a_pruned_module_or_is_async() -> None:
    sources = [*(ROOT / "layers" / "core" / "botmemory").rglob("*.py")]
    sources += [*(ROOT / "functions").glob("*/app.py")]
    for source in sources:
        tree = ast.parse(source.read_text(encoding="utf-8"))
        assert not any(isinstance(n, ast.AsyncFunctionDef) for n in ast.walk(tree)), (
            f"{source}: async code needs anyio, which the layer prunes"
        )
        for name in _imports(source):
            for pruned in layer_build.PRUNED_MODULES:
                assert name != pruned and not name.startswith(pruned + "."), (source, name)


IMPORT_HANDLERS = """
import importlib.util, sys
sys.path[:0] = sys.argv[1:3]
for path in sys.argv[3:]:
    spec = importlib.util.spec_from_file_location("handler", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.handler), path
    # What the handlers reach lazily, on their first event.
import botmemory.services, botmemory.runtime, nacl.signing, httpx, pydantic
from aws_lambda_powertools.utilities import parameters
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig
from aws_lambda_powertools.utilities.batch import BatchProcessor
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver
for name in ("aws_lambda_powertools", "pydantic", "nacl", "botmemory"):
    assert sys.modules[name].__file__.startswith(sys.argv[1]), name
# The keyword leg's Porter2, from the pruned snowballstemmer (English alone, no __init__).
from botmemory.search.keywords import tokens
assert tokens("painted mentored collaboration") == ["paint", "mentor", "collabor"]
assert sys.modules["snowballstemmer.english_stemmer"].__file__.startswith(sys.argv[1])
assert "snowballstemmer.arabic_stemmer" not in sys.modules
print("ok")
"""


def test_every_handler_imports_from_the_pruned_layer_and_the_runtimes_boto3(
    built: Path, tmp_path: Path
) -> None:
    runtime = tmp_path / "runtime"
    layer_build.copy_installed([n for n in RUNTIME if canonicalize_name(n) != "jmespath"], runtime)
    handlers = sorted(str(p) for p in (ROOT / "functions").glob("*/app.py"))
    assert handlers
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", IMPORT_HANDLERS, str(built), str(runtime), *handlers],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "AWS_DEFAULT_REGION": "us-east-1",
            "PATH": "/usr/bin:/bin",
            "TABLE_NAME": "memory",
            "DISCORD_PUBLIC_KEY": TEST_PUBLIC_KEY,
            "DISCORD_APPLICATION_ID": "1399999999999999999",
        },
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
