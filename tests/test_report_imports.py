"""The report only reads and renders what the stages stored: no module of infbench/report
imports a measurement package, so no check or text is recomputed from raw measurements there."""

import ast
from pathlib import Path

import infbench.report

MEASUREMENT_PACKAGES = ("capacity", "kv", "serving", "offline", "engines", "workload", "utilisation")
REPORT = Path(infbench.report.__file__).parent


def measurement_imports(source: str) -> list[str]:
    """What a module's source imports from a measurement package, as dotted names (`from a.b
    import c` as a.b.c), at any depth: a function's lazy import too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [name for name in names if name.split(".")[:2] in (["infbench", p] for p in MEASUREMENT_PACKAGES)]
    return found


def test_no_report_module_imports_a_measurement_package():
    assert measurement_imports("from infbench.capacity.search import OUTCOMES") == ["infbench.capacity.search.OUTCOMES"]
    assert measurement_imports("def f():\n    import infbench.kv.allocator") == ["infbench.kv.allocator"]
    assert measurement_imports("from infbench import serving") == ["infbench.serving"]
    assert measurement_imports("from infbench.core.checks import check\nfrom infbench.stages import SECTIONS") == []
    modules = sorted(REPORT.glob("*.py"))
    assert len(modules) > 10
    imports = {path.name: measurement_imports(path.read_text()) for path in modules}
    assert {name: found for name, found in imports.items() if found} == {}
