"""The report only reads and renders what the stages stored: no module of infbench/report
imports a measurement package, directly or through another infbench module it imports, so no
check or text is recomputed from raw measurements there."""

import ast
from pathlib import Path

import infbench

MEASUREMENT_PACKAGES = ("capacity", "kv", "serving", "offline", "engines", "workload", "utilisation")
PACKAGE = Path(infbench.__file__).parent


def infbench_imports(source: str, module: str) -> list[str]:
    """The infbench modules a module's source imports, as dotted names, at any depth (a
    function's lazy import too); `from a.b import c` as a.b.c, relative imports resolved
    against `module`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: -node.level]
                base = ".".join(parent + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [name for name in names if name.split(".")[0] == "infbench"]
    return found


def module_file(name: str) -> Path | None:
    """The file of an imported name: the module itself, else the module it is taken from."""
    parts = name.split(".")[1:]
    for length in (len(parts), len(parts) - 1):
        path = PACKAGE.joinpath(*parts[:length])
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def measurement_imports(module: str, seen: set[str] | None = None) -> list[str]:
    """The measurement modules `module` imports, directly or through other infbench modules."""
    seen = set() if seen is None else seen
    path = module_file(module)
    if path is None or str(path) in seen:
        return []
    seen.add(str(path))
    found = []
    for name in infbench_imports(path.read_text(), module):
        if name.split(".")[1] in MEASUREMENT_PACKAGES:
            found.append(f"{module} -> {name}")
        else:
            found += measurement_imports(name, seen)
    return found


def test_the_import_walk_finds_direct_lazy_relative_and_indirect_imports(tmp_path, monkeypatch):
    assert infbench_imports("from infbench.capacity.search import OUTCOMES", "infbench.report.x") == [
        "infbench.capacity.search.OUTCOMES"
    ]
    assert infbench_imports("def f():\n    import infbench.kv.allocator", "infbench.report.x") == [
        "infbench.kv.allocator"
    ]
    assert infbench_imports("from ..serving import window", "infbench.report.x") == ["infbench.serving.window"]
    # Indirect: report/a imports core/b, which imports a measurement module.
    (tmp_path / "report").mkdir()
    (tmp_path / "core").mkdir()
    (tmp_path / "report" / "a.py").write_text("from infbench.core.b import f\n")
    (tmp_path / "core" / "b.py").write_text("from infbench.kv.simulator import replay\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path)
    assert measurement_imports("infbench.report.a") == ["infbench.core.b.f -> infbench.kv.simulator.replay"]


def test_no_report_module_imports_a_measurement_package():
    modules = sorted((PACKAGE / "report").glob("*.py"))
    assert len(modules) > 10
    found = {path.stem: measurement_imports(f"infbench.report.{path.stem}") for path in modules}
    assert {name: chain for name, chain in found.items() if chain} == {}
