"""The tools layer and the project's layering: the tools sit apart from the CLI and share one
run-and-check; no module imports the CLI; the whole project has no import cycle; the families
sit below the passes and the tools, the IR below everything but itself.

The import graph is read from the source (every ``import`` and ``from ... import``, those
inside functions included), as a reader would follow it, not from what happens to be loaded.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from tilec.cli import main
from tilec.tools import checking
from tilec.tools.bisect import bisect
from tilec.kernel import load_file

ROOT = Path(__file__).resolve().parent.parent
# Package name -> its folder, as setuptools' package-dir installs them.
PACKAGES = {"tilec": ROOT / "tilec", "tilec.passes": ROOT / "passes",
            "tilec.backend": ROOT / "backend", "tilec.grammar": ROOT / "grammar"}
MATMUL = ROOT / "samples" / "matmul.py"
SMALL = {"M": 40, "N": 48, "K": 40}
CONSTS = {"BM": 32, "BN": 32, "BK": 16}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts
                     if p != "__init__"]
            found.setdefault(".".join([package] + parts), path)
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def owner(dotted: str) -> str:  # the module a dotted name lives in
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {owner(a.name) for a in node.names if a.name.startswith("tilec")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if base.startswith("tilec"):
                # `from tilec.tools import bisect` imports the module tilec.tools.bisect.
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else owner(base)
                          for a in node.names}
    return found - {name, ""}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports_inside_functions():
    edges = graph()
    # compile_command imports sass only when --dump-ir sass asks for it.
    assert "tilec.tools.sass" in edges["tilec.tools.compile_command"]
    assert "tilec.tools.arguments" in edges["tilec.tools.bisect"]
    # Relative imports, and imports under TYPE_CHECKING, count too.
    assert "tilec.families.product" in edges["tilec.families.mma_sync"]
    assert "tilec.backend.context" in edges["tilec.families.product"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_module_imports_the_cli():
    importers = sorted(name for name, deps in graph().items()
                       if "tilec.cli" in deps and name != "tilec.__main__")
    assert importers == []


def test_the_project_has_no_import_cycle():
    assert [sorted(c) for c in cycles(graph())] == []


def imports_from(prefix: str, layers: tuple[str, ...]) -> dict[str, list[str]]:
    """The modules under ``prefix`` that import from any of ``layers``, and what."""
    found = {}
    for name, deps in graph().items():
        if name == prefix or name.startswith(prefix + "."):
            bad = sorted(d for d in deps if d in layers or d.startswith(tuple(
                layer + "." for layer in layers)))
            if bad:
                found[name] = bad
    return found


def test_the_families_import_no_tool_pass_or_cli():
    assert imports_from("tilec.families", ("tilec.tools", "tilec.passes", "tilec.cli")) == {}


def test_the_ir_imports_nothing_above_it():
    above = ("tilec.cpu", "tilec.families", "tilec.passes", "tilec.backend", "tilec.tools")
    assert imports_from("tilec.ir", above) == {}


def test_the_layer_checks_can_fail():
    assert imports_from("tilec.tools", ("tilec.families",))  # explain reads the families
    assert "tilec.families.catalogue" in graph()["tilec.pipeline"]


def assigned_at_top_level(name: str) -> list[str]:
    """The modules that assign ``name`` at their top level."""
    found = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found.append(module)
    return found


@pytest.mark.parametrize("name", ["OPTION_NAMES", "TOLERANCE", "DEFAULT_SHAPE",
                                  "COMPILER_VERSION"])
def test_shared_tables_are_defined_once(name):
    assert len(assigned_at_top_level(name)) == 1, assigned_at_top_level(name)


# ---------------------------------------------------------------------- the error measure

def test_errors_is_the_relative_frobenius_error():
    ref = np.array([[3.0, 0.0], [0.0, 4.0]])  # ||ref|| = 5
    assert checking.errors(ref.copy(), ref) == (0.0, 0.0)
    max_abs, rel = checking.errors(np.array([[3.0, 1.0], [0.0, 4.0]]), ref)
    assert max_abs == 1.0 and rel == pytest.approx(0.2)
    assert checking.errors(np.array([0.0, 3.0]), np.zeros(2)) == (3.0, 3.0)  # absolute


def test_a_nan_in_the_outputs_or_the_reference_fails_every_tolerance():
    ref = np.array([[3.0, 0.0], [0.0, 4.0]])
    poisoned = np.array([[3.0, np.nan], [0.0, 4.0]])
    assert np.isnan(checking.errors(poisoned, ref)[1])
    assert np.isnan(checking.errors(ref, poisoned)[1])
    assert not checking.within_tolerance(checking.errors(poisoned, ref)[1], np.inf)
    # Over several tensors: the worst, and NaN wins over any number.
    outs = {"C": poisoned, "D": np.array([1.0])}
    assert np.isnan(checking.worst_errors(outs, {"C": ref, "D": np.array([2.0])})[1])
    outs = {"C": ref.copy(), "D": np.array([1.0])}
    assert checking.worst_errors(outs, {"C": ref, "D": np.array([2.0])}) == (1.0, 0.5)


@pytest.fixture
def measured(monkeypatch):
    """checking.errors replaced by one that calls every output 50% wrong, counting calls."""
    calls = []

    def fifty_percent(out, ref):
        calls.append(out.shape)
        return 1.0, 0.5
    monkeypatch.setattr(checking, "errors", fifty_percent)
    return calls


def test_tilec_run_measures_with_checking_errors(measured, capsys):
    shape = ",".join(f"{k}={v}" for k, v in SMALL.items())
    consts = ",".join(f"{k}={v}" for k, v in CONSTS.items())
    assert main(["run", str(MATMUL), "--cpu", "--shape", shape, "--const", consts]) == 1
    assert measured == [(40, 48)]
    assert "rel Frobenius err 0.5 (tolerance 0.002)" in capsys.readouterr().out


def test_bisect_measures_with_checking_errors(measured):
    report = bisect(load_file(MATMUL)["matmul"], CONSTS, shapes=SMALL)
    assert measured  # the frontend's run against float64, at least
    assert report.first_bad is not None and report.first_bad.stage == "tile"
    assert report.first_bad.rel_error == 0.5


def test_run_and_bisect_share_the_tolerance():
    kernel = load_file(MATMUL)["matmul"].lower(**CONSTS)
    report = bisect(load_file(MATMUL)["matmul"], CONSTS, shapes=SMALL)
    assert report.tolerance == checking.tolerance_for(kernel) == checking.TOLERANCE[
        kernel.params[0].type.dtype]


def test_run_on_cpu_follows_f32_math() -> None:
    """`tilec run --cpu --f32-math tf32` and bisect interpret with the numerics the GPU uses:
    the product's inputs rounded to tf32."""
    from tilec.cpu.interpreter import round_tf32
    kernel = load_file(ROOT / "samples" / "sgemm.py")["sgemm"].lower(BM=32, BN=32, BK=8)
    sizes = {"M": 32, "N": 32, "K": 24}
    arrays, scalars = checking.random_arguments(kernel, sizes, np.random.default_rng(3))
    exact = checking.run_on_cpu(kernel, arrays, scalars, ["C"])["C"]
    tf32 = checking.run_on_cpu(kernel, arrays, scalars, ["C"], "tf32")["C"]
    a, b = (round_tf32(arrays[n]).astype(np.float64) for n in ("A", "B"))
    assert np.allclose(tf32, a @ b, rtol=1e-5, atol=1e-5)
    assert not np.allclose(exact, tf32, rtol=1e-6, atol=0)
