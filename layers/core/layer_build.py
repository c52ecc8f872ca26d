"""Build the core layer into ARTIFACTS_DIR/python (layers/core/Makefile runs this for `sam build`).

pip installs requirements.txt (exact pins, every file's hash: `make lock`) with
--require-hashes, for the Lambda runtime (CPython 3.13 on Linux, arm64 unless told
otherwise) whatever machine builds, without bytecode. Then the files nothing of ours imports
are removed: PRUNED names them, and botocore's data keeps only the services the code creates
clients of (`services_needed`). The build fails when botocore has no data for one of them:
the code then needs a newer boto3 than the layer gets. Last, the botmemory package is copied
in. tests/stack/test_layer.py and tests/stack/test_built_artifact.py prove that the handlers
still import and run from what is left.

boto3 ships in the layer: AWS documents no boto3 version for the python3.13 runtime (its
Python page says it depends on the runtime version and the Region), and the code needs
clients only recent ones have (S3 Vectors). The layer's copy comes first on the path.

    python layer_build.py [--architecture arm64|x86_64] ARTIFACTS_DIR

`make build` builds the x86_64 twin into .aws-sam/layer-x86_64 after `sam build`.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess  # nosec B404 # runs pip, with fixed arguments
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Lambda's architecture names, and the machine names of their wheels.
MACHINES = {"arm64": "aarch64", "x86_64": "x86_64"}
DEPLOYED_ARCHITECTURE = "arm64"  # template.yaml's Globals and CoreLayer
# The layer's bound, installed, in bytes (tests/stack/test_layer.py, test_built_artifact.py,
# make bench). Built for arm64 it is 18.3 MiB, 4.9 of them boto3 and what it needs (botocore's
# data pruned to the services the code calls); x86_64's native modules are larger (21 MiB).
SIZE_LIMIT = 24 * 1024 * 1024
PYTHON = ("--python-version", "3.13")


def platform(architecture: str) -> tuple[str, ...]:
    """pip's platform options: Lambda's python3.13 runs on Amazon Linux 2023 (glibc 2.34),
    which takes manylinux wheels up to 2_28."""
    machine = MACHINES[architecture]
    return (
        *("--platform", f"manylinux2014_{machine}", "--platform", f"manylinux_2_28_{machine}"),
        *("--implementation", "cp"),
    )


# Globs under site-packages, each with why it can go.
PRUNED = {
    # Powertools' Swagger UI assets: served only by enable_swagger(), which we never call.
    "aws_lambda_powertools/event_handler/openapi/swagger_ui/*.js": "Swagger UI is never served",
    "aws_lambda_powertools/event_handler/openapi/swagger_ui/*.css": "Swagger UI is never served",
    # Powertools utilities no code of ours imports.
    "aws_lambda_powertools/utilities/data_masking": "never imported",
    "aws_lambda_powertools/utilities/feature_flags": "never imported",
    "aws_lambda_powertools/utilities/streaming": "never imported",
    "aws_lambda_powertools/utilities/kafka": "never imported",
    "aws_lambda_powertools/utilities/validation": "never imported",
    "aws_lambda_powertools/utilities/circuit_breaker": "never imported",
    "aws_lambda_powertools/utilities/auth_alpha": "never imported",
    # pydantic's v1 compatibility copy: our models are v2 and define no __get_validators__.
    "pydantic/v1": "v1 models are never used",
    "pydantic/experimental": "never imported",
    "pydantic/mypy.py": "the mypy plugin, a type-checking tool",
    # httpx's async side: httpcore imports anyio only if it is there, and no code of ours is
    # async (tests/stack/test_layer.py checks both). httpx's command line needs click and rich.
    "anyio": "async only",
    "httpx/_main.py": "the httpx command line",
    # PyNaCl's compiled _sodium needs only _cffi_backend at run time; cffi's Python package
    # and pycparser parse C declarations, which happens only when building.
    "cffi": "build-time only (nacl._sodium is compiled)",
    "pycparser": "build-time only",
    # snowballstemmer: botmemory.search.keywords imports english_stemmer alone. The package's
    # __init__ imports all 30 languages' stemmers (1.7 MB with bytecode, 20 ms at a cold
    # start); without it the folder is a namespace package holding English, its base class
    # and Among (tests/stack/test_layer.py imports it from the built layer).
    "snowballstemmer/__init__.py": "imports every language; only English is used",
    "snowballstemmer/[a-df-z]*_stemmer.py": "languages other than English",
    "snowballstemmer/es*_stemmer.py": "Esperanto and Estonian",
    # boto3's resource models: the code creates clients only (services_needed fails on a
    # boto3.resource call); botocore's examples are documentation.
    "boto3/data": "resource models; no resource is made",
    "boto3/examples": "documentation",
    "botocore/data/*/*/examples-1.json": "documentation",
    # Install bookkeeping and type stubs: nothing reads them at run time.
    "*.dist-info/RECORD": "pip's uninstall list",
    "*.dist-info/sboms": "bill of materials of the build",
    "**/*.pyi": "type stubs",
    "**/__pycache__": "bytecode of the build machine's Python",
    "bin": "console scripts (jp.py, httpx); nothing runs them in Lambda",
}
# Top-level modules of PRUNED, for the check that no code imports one.
PRUNED_MODULES = (
    "aws_lambda_powertools.utilities.data_masking",
    "aws_lambda_powertools.utilities.feature_flags",
    "aws_lambda_powertools.utilities.streaming",
    "aws_lambda_powertools.utilities.kafka",
    "aws_lambda_powertools.utilities.validation",
    "aws_lambda_powertools.utilities.circuit_breaker",
    "aws_lambda_powertools.utilities.auth_alpha",
    "pydantic.experimental",
    "pydantic.mypy",
    "anyio",
    "httpx._main",
    "pydantic.v1",
    "cffi",
    "pycparser",
)


# Powertools helpers that create a client of their own, and the service each one calls.
POWERTOOLS_CLIENTS = {
    "get_secret": "secretsmanager",  # nosec B105 # a service name, not a secret
    "get_secrets_by_name": "secretsmanager",
    "get_parameter": "ssm",
    "get_parameters": "ssm",
    "get_parameters_by_name": "ssm",
    "get_app_config": "appconfigdata",
}
# botocore's data files shared by every client (endpoints, partitions, retries, defaults).
BOTOCORE_SHARED = (
    "endpoints.json",
    "partitions.json",
    "_retry.json",
    "sdk-default-configuration.json",
)


class LayerBuildError(RuntimeError):
    """The layer cannot serve the code: the message says what and what to do."""


def services_needed(sources: Iterable[Path]) -> dict[str, list[str]]:
    """{service: where} of every AWS client these files create: `boto3.client("name", ...)`
    (or a session's `.client("name")`), and Powertools' parameter helpers. A client named by
    anything but a string literal, or a boto3 resource, is an error: the layer keeps the
    data of the services named here alone."""
    found: dict[str, list[str]] = {}
    for source in sources:
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            name, where = node.func.attr, f"{source.name}:{node.lineno}"
            if name in POWERTOOLS_CLIENTS:
                found.setdefault(POWERTOOLS_CLIENTS[name], []).append(where)
            if name not in {"client", "resource"} or not _is_boto3(node.func.value):
                continue
            first = node.args[0] if node.args else None
            if name == "resource" or not (
                isinstance(first, ast.Constant) and isinstance(first.value, str)
            ):
                raise LayerBuildError(
                    f"{where}: {ast.unparse(node)[:80]}: name the service of a boto3 client "
                    "with a string (the layer keeps botocore's data of those alone)"
                )
            found.setdefault(first.value, []).append(where)
    return found


def _is_boto3(value: ast.expr) -> bool:
    """`boto3`, `boto3.session.Session()`, `boto3.Session(...)` or a name holding a session."""
    text = ast.unparse(value)
    return text == "boto3" or text.startswith("boto3.") or "session" in text.lower()


def code_services() -> dict[str, list[str]]:
    """The services the botmemory package creates clients of."""
    return services_needed(sorted((HERE / "botmemory").rglob("*.py")))


def botocore_data_pruned(site: Path, services: Iterable[str]) -> list[Path]:
    """The folders of botocore/data no client of `services` reads."""
    data = site / "botocore" / "data"
    keep = set(services)
    return sorted(p for p in data.glob("*") if p.is_dir() and p.name not in keep)


def check_services(site: Path, services: dict[str, list[str]]) -> None:
    """Every service the code creates a client of has its data in the layer's botocore."""
    data = site / "botocore" / "data"
    missing = {s: w for s, w in services.items() if not any((data / s).glob("*/service-2.json*"))}
    if missing:
        version = next((p.name for p in site.glob("botocore-*.dist-info")), "botocore: none")
        raise LayerBuildError(
            f"{version.removesuffix('.dist-info')} in the layer has no data for "
            + ", ".join(f"{s} (created at {', '.join(w)})" for s, w in sorted(missing.items()))
            + ": the code needs a newer boto3 than the layer gets; raise it in pyproject.toml "
            "and run `make lock`"
        )
    for shared in BOTOCORE_SHARED:
        if not (data / shared).is_file():
            raise LayerBuildError(f"botocore/data/{shared} is missing from the layer")


def pruned(site: Path) -> list[Path]:
    """The paths under site that the prune removes: PRUNED, and botocore's data of every
    service the code makes no client of."""
    globbed = {path for pattern in PRUNED for path in site.glob(pattern)}
    return sorted(globbed | set(botocore_data_pruned(site, code_services())))


def prune(site: Path) -> None:
    for path in pruned(site):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def copy_installed(names: list[str], site: Path) -> None:
    """These installed distributions' files, laid out as `pip install --target` does and without
    bytecode: the layer measured from a virtualenv (tests/stack/test_layer.py, make bench) where
    no arm64 wheels can be fetched."""
    for name in names:
        distribution = metadata.distribution(name)
        base = Path(str(distribution.locate_file(""))).resolve()
        for file in distribution.files or []:
            source = Path(str(distribution.locate_file(file)))
            if "__pycache__" in source.parts or not source.is_file():
                continue
            try:
                relative = source.resolve().relative_to(base)
            except ValueError:
                continue  # a console script outside site-packages
            target = site / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def add_botmemory(site: Path) -> None:
    shutil.copytree(
        HERE / "botmemory", site / "botmemory", ignore=shutil.ignore_patterns("__pycache__")
    )


def build(artifacts: Path, architecture: str = DEPLOYED_ARCHITECTURE) -> None:
    site = artifacts / "python"
    subprocess.run(  # nosec B603 # this interpreter's pip, fixed arguments and our own file
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--require-hashes"]
        + ["--only-binary=:all:", *platform(architecture), *PYTHON, "--target", str(site)]
        + ["--requirement", str(HERE / "requirements.txt")],
        check=True,
    )
    prune(site)
    check_services(site, code_services())
    add_botmemory(site)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--architecture", choices=sorted(MACHINES), default=DEPLOYED_ARCHITECTURE)
    parser.add_argument("artifacts", type=Path, help="ARTIFACTS_DIR: the layer goes in python/")
    args = parser.parse_args(argv)
    try:
        build(args.artifacts, args.architecture)
    except LayerBuildError as error:
        raise SystemExit(f"layer_build: {error}") from None


if __name__ == "__main__":
    main()
