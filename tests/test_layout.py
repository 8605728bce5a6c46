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
