"""The core layer as `sam build` makes it (layers/core/layer_build.py): within its size
bound installed, everything the handlers import is still in it after the prune, and its
botocore has the data of every client the code creates.

Offline: the layer is rebuilt from this virtualenv's files of exactly the layer's
distributions (the same wheels, native ones differ a little by architecture), pruned by the
build's own rules; bytecode is left out, as the build installs with --no-compile. The layer
`make build` really built is tested in tests/stack/test_built_artifact.py."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from localrun.stack import TEST_PUBLIC_KEY
from tests.stack.test_supply_chain import DEPLOYED, LAYER, versions
from tests.support.layer import layer_build

ROOT = Path(__file__).resolve().parents[2]
MB = 1024 * 1024
# `pip install --target` compiles bytecode (the build does not): a fifth more.
WITH_BYTECODE_LIMIT = 30 * MB


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


def test_the_layer_is_within_its_bound_installed(built: Path) -> None:
    size, limit = installed_size(built), layer_build.SIZE_LIMIT
    print(f"core layer installed: {size / MB:.1f} MB (limit {limit / MB:.0f} MB)")
    assert size <= limit, f"the layer is {size / MB:.1f} MB installed, over {limit / MB:.0f} MB"


def test_the_layers_dependencies_with_bytecode_are_within_the_bound(
    built: Path, tmp_path: Path
) -> None:
    """The measure of `pip install --target` (which compiles bytecode)."""
    import compileall

    site = tmp_path / "python"
    shutil.copytree(built, site, ignore=shutil.ignore_patterns("botmemory"))
    assert compileall.compile_dir(site, quiet=2, workers=1)
    size, limit = installed_size(site), WITH_BYTECODE_LIMIT
    print(f"core layer's dependencies with bytecode: {size / MB:.1f} MB")
    assert size <= limit, f"{size / MB:.1f} MB with bytecode, over {limit / MB:.0f} MB"


def test_the_prune_removes_what_it_names(built: Path) -> None:
    assert layer_build.pruned(built) == []
    assert not (built / "pydantic" / "v1").exists()
    assert not (built / "pycparser").exists()
    assert (built / "nacl").is_dir() and (built / "pydantic_core").is_dir()
    assert any(built.glob("_cffi_backend*")), "PyNaCl's compiled module needs _cffi_backend"
    # botocore keeps the data of the services the code calls, and nothing else.
    kept = {p.name for p in (built / "botocore" / "data").iterdir() if p.is_dir()}
    assert kept == set(layer_build.code_services())


# --- the layer's boto3 is enough --------------------------------------------------------


def test_the_code_creates_the_clients_the_layer_keeps() -> None:
    """What the scan finds: the table, deferred answers, the models, the queue, the vector
    index, the keyword database (the Data API), the old keyword shards' deletion
    (ops.reindex_keywords), secrets and parameters (Powertools). The handlers create none
    of their own."""
    assert sorted(layer_build.code_services()) == [
        "bedrock-runtime",
        "dynamodb",
        "lambda",
        "rds-data",
        "s3",
        "s3vectors",
        "secretsmanager",
        "sqs",
        "ssm",
    ]
    assert layer_build.services_needed(sorted(ROOT.glob("functions/*/app.py"))) == {}


def test_every_client_the_code_creates_has_its_data_in_the_layers_botocore(built: Path) -> None:
    layer_build.check_services(built, layer_build.code_services())


def test_a_client_the_layers_botocore_lacks_fails_the_build(built: Path, tmp_path: Path) -> None:
    """As with a boto3 older than S3 Vectors (botocore before 1.39.5 has no s3vectors)."""
    site = tmp_path / "python"
    shutil.copytree(built / "botocore" / "data", site / "botocore" / "data")
    shutil.copytree(next(built.glob("botocore-*.dist-info")), site / "botocore-1.39.4.dist-info")
    shutil.rmtree(site / "botocore" / "data" / "s3vectors")

    with pytest.raises(layer_build.LayerBuildError) as failed:
        layer_build.check_services(site, layer_build.code_services())

    message = str(failed.value)
    assert "botocore-1.39.4 in the layer has no data for s3vectors" in message
    assert "s3vectors_index.py:" in message and "needs a newer boto3" in message


@pytest.mark.parametrize(
    "source",
    [
        "boto3.client(service_name)",
        "boto3.resource('dynamodb')",
        "boto3.session.Session().client(name, region_name='us-east-1')",
    ],
)
def test_a_client_the_scan_cannot_name_fails_the_build(source: str, tmp_path: Path) -> None:
    code = tmp_path / "module.py"
    code.write_text(f"import boto3\n{source}\n")

    with pytest.raises(layer_build.LayerBuildError, match=r"module\.py:2"):
        layer_build.services_needed([code])


def test_the_scan_names_each_client_where_it_is_made(tmp_path: Path) -> None:
    code = tmp_path / "module.py"
    code.write_text(
        "import boto3\n"
        "from aws_lambda_powertools.utilities import parameters\n"
        "boto3.client('sqs', region_name='eu-west-1')\n"
        "boto3.session.Session().client('s3vectors')\n"
        "parameters.get_secret('name')\n"
        "other.client('not a boto3 client')\n"
    )

    assert layer_build.services_needed([code]) == {
        "sqs": ["module.py:3"],
        "s3vectors": ["module.py:4"],
        "secretsmanager": ["module.py:5"],
    }


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
sys.path[:0] = sys.argv[1:2]
for path in sys.argv[2:]:
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
import boto3
for name in ("aws_lambda_powertools", "pydantic", "nacl", "botmemory", "boto3", "botocore"):
    assert sys.modules[name].__file__.startswith(sys.argv[1]), name
for service in ("dynamodb", "s3vectors", "s3", "sqs", "lambda", "bedrock-runtime"):
    boto3.client(service, region_name="us-east-1")
# The keyword leg's Porter2, from the pruned snowballstemmer (English alone, no __init__).
from botmemory.search.keywords import tokens
assert tokens("painted mentored collaboration") == ["paint", "mentor", "collabor"]
assert sys.modules["snowballstemmer.english_stemmer"].__file__.startswith(sys.argv[1])
assert "snowballstemmer.arabic_stemmer" not in sys.modules
print("ok")
"""


def test_every_handler_imports_from_the_pruned_layer_alone(built: Path) -> None:
    """Nothing but the standard library beside the layer: its boto3 is the one used."""
    handlers = sorted(str(p) for p in (ROOT / "functions").glob("*/app.py"))
    assert handlers
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", IMPORT_HANDLERS, str(built), *handlers],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "PATH": "/usr/bin:/bin",
            "TABLE_NAME": "memory",
            "DISCORD_PUBLIC_KEY": TEST_PUBLIC_KEY,
            "DISCORD_APPLICATION_ID": "1399999999999999999",
        },
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
