import subprocess
import sys

import pytest

DOMAIN = [
    "spatial_release.policy",
    "spatial_release.period",
    "spatial_release.traces.ingest",
    "spatial_release.traces.synthetic",
    "spatial_release.geometry",
    "spatial_release.counting",
    "spatial_release.suppression",
    "spatial_release.guarantees",
    "spatial_release.release",
    "spatial_release.stages",
    "spatial_release.risk",
    "spatial_release.ledger",
    "spatial_release.alerts",
    "spatial_release.suppression.release_system",
    "spatial_release.suppression.rules",
    "spatial_release.levels",
    "spatial_release.suppression.verdicts",
    "spatial_release.report",
    "spatial_release.dp",
]


@pytest.mark.slow
def test_domain_packages_do_not_import_dagster():
    code = "import sys\n" + "".join(f"import {m}\n" for m in DOMAIN) + "print('dagster' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# ---- the import graph: no cycle between files, none between packages ------------------------------------

import ast  # noqa: E402
from pathlib import Path  # noqa: E402

PACKAGE = Path(__file__).resolve().parents[1] / "spatial_release"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """Every module of the package that `path` imports, at any depth of the file (a lazy import inside a
    function is an arrow too: it only hides a cycle from the interpreter)."""

    def known(target: str) -> str:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {known(a.name) for a in node.names if a.name.startswith("spatial_release")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            if base.startswith("spatial_release"):
                found |= {known(f"{base}.{a.name}") if f"{base}.{a.name}" in modules else known(base) for a in node.names}
    return found - {name, ""}


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imports(path, name, set(files)) for name, path in files.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])  # spatial_release.stages.risk -> spatial_release.stages


@pytest.mark.slow
def test_no_file_imports_another_that_imports_it_back():
    assert _cycles(_graph()) == []


@pytest.mark.slow
def test_packages_form_layers_no_arrow_runs_back_up():
    """A cycle between packages is an arrow from a lower layer up (`policy` reading through `geometry`, which
    reads `policy`); without one, the packages sort into layers."""
    packages: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        packages.setdefault(_package_of(module), set()).update(
            _package_of(t) for t in targets if _package_of(t) != _package_of(module)
        )
    assert _cycles(packages) == []


def test_the_cycle_finder_finds_a_cycle():
    """Negative control: a graph with a two-file circle and a three-package circle."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": set()}) == [["x", "y", "z"]]


def _imported_by(module: str) -> set[str]:
    code = f"import sys\nimport {module}\nprint(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


@pytest.mark.slow
def test_the_release_format_is_below_the_report_and_the_pipeline():
    """The arrows run one way: stages -> report -> release. The release format (files, record, publication)
    imports neither the report nor the stages; the report reads the release format, never the stages."""
    below = _imported_by("spatial_release.release")
    assert not {m for m in below if m.startswith(("spatial_release.stages", "spatial_release.report"))}
    assert not {m for m in _imported_by("spatial_release.report") if m.startswith("spatial_release.stages")}


# ---- the declared layers -------------------------------------------------------------------------------
#
# Rooms of the package, from the bottom up:
#   domain       every module not named below (policy, traces, geometry, counting, suppression, risk, ledger,
#                release, history, report, ...): never imports the pipeline, the wiring, the command line or
#                dagster
#   pipeline     spatial_release.stages: imports the domain and earlier stages only (STAGE_ORDER)
#   command line spatial_release.cli and the RunOutcome it returns: may import anything but dagster
#   wiring       spatial_release.defs and its entry point spatial_release.definitions: the only importers of
#                dagster
# and inside the domain, release/ (the release folder's format) imports only the contract types it writes.

ROOT = "spatial_release"
PIPELINE = "spatial_release.stages"
WIRING = ("spatial_release.defs", "spatial_release.definitions")
COMMAND_LINE = ("spatial_release.cli", "spatial_release.run_outcome")
DAGSTER = ("dagster", "dagster_")  # dagster itself and its integrations (dagster_slack, ...)

# The pipeline's modules in the order they may import one another: each imports only modules before it. The
# first five are what every stage stands on (typed results, reuse, the context, the lock, carried work files);
# then the steps, with the helpers of protection (attacks, key sets, advantage, coarsening, DP) before it.
STAGE_ORDER = [
    "results",
    "reuse",
    "context",
    "lock",
    "carried",
    "ingest",
    "count",
    "attack",
    "keys",
    "advantage",
    "coarsen",
    "dp",
    "protect",
    "checks",
    "risk",
    "publish",
    "publication_check",
    "review",
]

# What release/ may import: itself, the package's version, the contract types it records (policy,
# period, the ledger's entries and errors) and atomic file writes.
RELEASE_CONTRACTS = (
    "spatial_release.release",
    "spatial_release.policy",
    "spatial_release.period",
    "spatial_release.ledger",
    "spatial_release.fileio",
)


def _in(module: str, rooms: str | tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in ((rooms,) if isinstance(rooms, str) else rooms))


def _absolute_imports(source: str, name: str, is_package: bool) -> set[str]:
    """Every module name `source` imports, absolute, at any depth (a lazy import in a function and one under
    `if TYPE_CHECKING:` count: both are arrows); `from a import b` gives `a.b` as well as `a`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def _room_problems(module: str, imported: set[str], ours: set[str]) -> list[str]:
    """Dagster outside the wiring; the domain importing the pipeline or above; the pipeline importing above."""
    problems = [
        f"{module} imports {target}: only the wiring ({', '.join(WIRING)}) imports dagster"
        for target in sorted(imported)
        if target.startswith(DAGSTER) and not _in(module, WIRING)
    ]
    if not _in(module, (PIPELINE, *WIRING, *COMMAND_LINE)):
        problems += [
            f"{module} imports {target}: a domain module never imports the pipeline or above"
            for target in sorted(t for t in ours if _in(t, (PIPELINE, *WIRING, *COMMAND_LINE)))
        ]
    if _in(module, PIPELINE):
        problems += [
            f"{module} imports {target}: the pipeline never imports the wiring or the command line"
            for target in sorted(t for t in ours if _in(t, (*WIRING, *COMMAND_LINE)))
        ]
    return problems


def _stage_order_problems(module: str, ours: set[str]) -> list[str]:
    """A stage importing a later stage, or the facade (`spatial_release.stages`, which re-exports every stage);
    a stage not placed in STAGE_ORDER."""
    if not _in(module, PIPELINE) or module == PIPELINE:
        return []
    stage = module.split(".")[2]
    if stage not in STAGE_ORDER:
        return [f"{module}: not placed in STAGE_ORDER"]
    problems = []
    for target in sorted(t for t in ours if _in(t, PIPELINE) and t != PIPELINE):
        other = target.split(".")[2]
        if other not in STAGE_ORDER:  # a name of the facade, which imports every stage
            problems.append(f"{module} imports {target}: a stage imports stage modules, not the facade")
        elif STAGE_ORDER.index(other) > STAGE_ORDER.index(stage):
            problems.append(f"{module} imports {target}: a stage imports only earlier stages")
    return problems


def _release_problems(module: str, ours: set[str]) -> list[str]:
    """release/ importing anything but contract types."""
    if not _in(module, "spatial_release.release"):
        return []
    return [
        f"{module} imports {target}: release/ imports only contract types"
        for target in sorted(ours)
        if not (target in (ROOT, f"{ROOT}.__version__") or _in(target, RELEASE_CONTRACTS))
    ]


def layer_violations(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """The imports of a module tree (module name -> its source and whether it is a package's __init__) that
    run against the declared layers, one line each."""
    problems = []
    for module, (source, is_package) in sorted(sources.items()):
        imported = _absolute_imports(source, module, is_package)
        ours = {i for i in imported if _in(i, ROOT)}
        problems += _room_problems(module, imported, ours)
        problems += _stage_order_problems(module, ours)
        problems += _release_problems(module, ours)
    return problems


def _package_sources() -> dict[str, tuple[str, bool]]:
    return {_module_name(p): (p.read_text(), p.name == "__init__.py") for p in PACKAGE.rglob("*.py")}


def test_imports_follow_the_declared_layers():
    assert layer_violations(_package_sources()) == []


def test_test_files_import_helpers_from_support_never_from_another_test_file():
    """A helper two test files need lives in tests/support: a test file that imports another runs that file's
    module code, collects the fixtures it imports as its own, and breaks when the other file's tests change."""
    tests = Path(__file__).parent
    found = [
        f"{path.relative_to(tests)} imports {name}"
        for path in sorted(tests.rglob("*.py"))
        for name in sorted(_absolute_imports(path.read_text(), path.stem, False))
        if name.split(".")[0].startswith("test_")
    ]
    assert found == []


def test_every_stage_is_placed_in_the_pipeline_order():
    stages = {p.stem for p in (PACKAGE / "stages").glob("*.py") if p.stem != "__init__"}
    assert stages == set(STAGE_ORDER)


def test_the_layer_check_reports_imports_against_the_layers():
    """Negative control: a synthetic tree with one import against each rule, lazy, relative and type-only
    imports among them, is reported line by line; the same tree without them is clean."""
    lazy_stage = "def f():\n    from spatial_release.stages.risk import run_risk\n    return run_risk\n"
    type_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from spatial_release.defs import x\n"
    tree = {
        "spatial_release.history": (lazy_stage, False),
        "spatial_release.ledger": (type_only, True),
        "spatial_release.geometry.grid": ("import dagster as dg\n", False),
        "spatial_release.stages": ("from spatial_release.stages.review import a\n", True),
        "spatial_release.stages.protect": ("from .risk import assess_risk\nfrom . import count\n", False),
        "spatial_release.stages.count": ("from spatial_release.stages.context import ReleaseContext\n", False),
        "spatial_release.stages.risk": ("from spatial_release.defs.check_results import x\n", False),
        "spatial_release.stages.extra": ("", False),
        "spatial_release.release.files": ("from spatial_release.geometry.grid import CELL_ID\n", False),
        "spatial_release.release.record": ("from spatial_release.policy import Policy\n", False),
        "spatial_release.defs.assets": ("import dagster as dg\nfrom spatial_release.stages import run_risk\n", False),
        "spatial_release.cli": ("def main():\n    import dagster_slack\n", False),
    }
    found = layer_violations(tree)
    expected = [
        "spatial_release.cli imports dagster_slack",
        "spatial_release.geometry.grid imports dagster",
        "spatial_release.history imports spatial_release.stages.risk",
        "spatial_release.ledger imports spatial_release.defs",
        "spatial_release.release.files imports spatial_release.geometry.grid",
        "spatial_release.stages.extra: not placed",
        "spatial_release.stages.protect imports spatial_release.stages.risk",
        "spatial_release.stages.risk imports spatial_release.defs.check_results",
    ]
    for start in expected:
        assert any(line.startswith(start) for line in found), (start, found)
    assert not any(
        line.startswith(("spatial_release.stages.count", "spatial_release.defs", "spatial_release.release.record"))
        for line in found
    ), found
    assert not any("spatial_release.stages.protect imports spatial_release.stages.count" in line for line in found)
    clean = {m: ("", p) for m, (_, p) in tree.items() if m != "spatial_release.stages.extra"}
    assert layer_violations(clean) == []
