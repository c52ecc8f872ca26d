"""Build the core layer into ARTIFACTS_DIR/python (layers/core/Makefile runs this for `sam build`).

pip installs requirements.txt (exact pins, every file's hash: `make lock`) with
--require-hashes, for the Lambda runtime (CPython 3.13 on arm64 Linux) whatever machine
builds, without bytecode. Then the files nothing of ours imports are removed: PRUNED names
them, and tests/stack/test_layer.py proves the handlers still import from what is left
and that no code of ours imports a pruned module. Last, the botmemory package is copied in.

    python layer_build.py ARTIFACTS_DIR
"""

from __future__ import annotations

import shutil
import subprocess  # nosec B404 # runs pip, with fixed arguments
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Lambda's python3.13 runs on Amazon Linux 2023 (glibc 2.34): manylinux wheels up to 2_28.
PLATFORM = (
    *("--platform", "manylinux2014_aarch64", "--platform", "manylinux_2_28_aarch64"),
    *("--implementation", "cp"),
)
PYTHON = ("--python-version", "3.13")
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


def pruned(site: Path) -> list[Path]:
    """The paths under site that PRUNED removes."""
    return sorted({path for pattern in PRUNED for path in site.glob(pattern)})


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


def build(artifacts: Path) -> None:
    site = artifacts / "python"
    subprocess.run(  # nosec B603 # this interpreter's pip, fixed arguments and our own file
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--require-hashes"]
        + ["--only-binary=:all:", *PLATFORM, *PYTHON, "--target", str(site)]
        + ["--requirement", str(HERE / "requirements.txt")],
        check=True,
    )
    prune(site)
    add_botmemory(site)


if __name__ == "__main__":
    build(Path(sys.argv[1]))
