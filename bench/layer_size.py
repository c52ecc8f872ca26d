"""Size of the core layer, and what tracing would add to it and to a cold start.

The layer is what `sam build` installs from layers/core/requirements.txt: those
distributions and everything they require, boto3 included (AWS documents no boto3 version
for the python3.13 runtime, and the code needs S3 Vectors' client). The figures are the
installed sizes of those distributions in this virtualenv, the same wheels a build
unpacks (native ones differ a little by architecture); the shipped line prunes them as
layer_build.py does (botocore keeps the data of the services the code calls). After
`make build` the built layer is measured too.

The comparison column is Powertools with its `tracer` extra, which brings the X-Ray SDK.
"""

from __future__ import annotations

import importlib.util
import re
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "layers" / "core" / "requirements.txt"
BUILT_LAYER = ROOT / ".aws-sam" / "build" / "CoreLayer"
MB = 1024 * 1024
RUNS = 5


def _name(requirement: str) -> tuple[str, set[str]]:
    """A requirement's distribution name and extras ("pkg[a,b]>=1; marker")."""
    match = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    extras = {e.strip() for e in (match.group(2) or "").split(",") if e.strip()}
    return match.group(1).lower().replace("_", "-"), extras


def _applies(requirement: str, extras: set[str]) -> bool:
    """Whether a dependency line applies here, given the extras asked of its parent."""
    if ";" not in requirement:
        return True
    marker = requirement.split(";", 1)[1]
    wanted = set(re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker))
    if wanted:
        return bool(wanted & extras)
    from packaging.markers import Marker  # pip's own marker logic; installed with it

    return Marker(marker).evaluate()


def closure(roots: list[str]) -> dict[str, int]:
    """Installed bytes of each distribution the roots require, transitively."""
    sizes: dict[str, int] = {}
    todo = [_name(root) for root in roots]
    while todo:
        name, extras = todo.pop()
        if name in sizes:
            continue
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            sizes[name] = -1  # not installed here: shown as unknown
            continue
        sizes[name] = sum(
            (Path(str(distribution.locate_file(f))).stat().st_size)
            for f in distribution.files or []
            if Path(str(distribution.locate_file(f))).is_file()
        )
        for requirement in distribution.requires or []:
            if _applies(requirement, extras):
                todo.append(_name(requirement))
    return sizes


def layer_requirements() -> list[str]:
    """The pins of the hashed file (`make lock`): `name==version \\` lines, --hash lines skipped."""
    lines = REQUIREMENTS.read_text().splitlines()
    pins = [line.split("#", 1)[0].strip().rstrip("\\").strip() for line in lines]
    return [pin for pin in pins if pin and not pin.startswith("--")]


def _built_size() -> int | None:
    if not BUILT_LAYER.is_dir():
        return None
    return sum(p.stat().st_size for p in BUILT_LAYER.rglob("*") if p.is_file())


def _layer_build() -> ModuleType:
    """layers/core/layer_build.py, the script `sam build` runs for the layer."""
    spec = importlib.util.spec_from_file_location(
        "layer_build", ROOT / "layers/core/layer_build.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shipped_size(names: list[str]) -> int:
    """The layer as layer_build.py leaves it (no bytecode, PRUNED removed, botmemory added),
    laid out from this virtualenv's copies of the same distributions."""
    build = _layer_build()
    with tempfile.TemporaryDirectory() as folder:
        site = Path(folder) / "python"
        build.copy_installed(names, site)
        build.prune(site)
        build.add_botmemory(site)
        return sum(p.stat().st_size for p in site.rglob("*") if p.is_file())


def _import_ms(code: str) -> float:
    samples = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def _mb(size: int) -> str:
    return "?" if size < 0 else f"{size / MB:.1f}"


def bench_layer() -> None:
    roots = layer_requirements()
    layer = closure(roots)
    traced = closure(
        [re.sub(r"^aws-lambda-powertools", "aws-lambda-powertools[tracer]", r) for r in roots]
    )
    title = "6. The core layer (installed size of layers/core/requirements.txt, MB)"
    print(title)
    print("=" * len(title))
    width = max(len(name) for name in traced)
    print(f"{'distribution':<{width}}  {'now':>6}  {'[tracer]':>8}")
    print(f"{'-' * width}  {'-' * 6}  {'-' * 8}")
    for name in sorted(traced, key=lambda n: -traced[n]):
        now = _mb(layer[name]) if name in layer else "-"
        print(f"{name:<{width}}  {now:>6}  {_mb(traced[name]):>8}")
    total = sum(size for size in layer.values() if size > 0)
    total_traced = sum(size for size in traced.values() if size > 0)
    print(f"{'total':<{width}}  {total / MB:>6.1f}  {total_traced / MB:>8.1f}")
    shipped = shipped_size(sorted(name for name, size in layer.items() if size > 0))
    print(
        f"  As `sam build` ships it (layers/core/layer_build.py: no bytecode, what nothing"
        f" imports pruned, botmemory added): {shipped / MB:.1f} MB"
        f" (target: at most {_layer_build().SIZE_LIMIT / MB:.0f})."
    )
    built = _built_size()
    if built is not None:
        print(f"  Built layer (.aws-sam/build/CoreLayer, from `make build`): {built / MB:.1f} MB.")
    print(f"  botocore in the layer: {'yes' if 'botocore' in layer else 'no'}.")
    if traced.get("aws-xray-sdk", -1) >= 0:
        bare = _import_ms("import aws_lambda_powertools; aws_lambda_powertools.Logger()")
        tracer = _import_ms(
            "import aws_lambda_powertools as p; p.Logger(); p.Tracer(service='bench')"
        )
        print(
            f"  Cold import, median of {RUNS}: Powertools Logger {bare:.0f} ms, with a Tracer "
            f"{tracer:.0f} ms ({tracer / bare:.2f}x). Tracing is Lambda's own (Tracing: Active)."
        )
    print()


if __name__ == "__main__":
    bench_layer()
