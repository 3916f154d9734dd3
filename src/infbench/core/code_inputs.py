"""The package code a rule's numbers depend on, derived from its script's imports: every file of
the package the script imports, directly or through other package modules, less the modules
that never change a number. Declared as the rule's inputs, a change to any of them reruns it.

Never declared, because they never change a number: how artifacts are validated and written
(core/artifacts.py, and the schemas in infbench/schemas/), provenance and the machine probes it records
(core/provenance.py, core/hardware.py: the dtype the workflow resolves is a param), errors and
logging (core/errors.py, core/rule_logging.py), config checks (core/config.py), the stage runner
(core/stage.py) and this module. A change to those reruns nothing; rerun with --forcerun where
an old artifact must gain a new field. A package `__init__.py` that holds only its docstring is
never declared either.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
NEVER_CHANGE_A_NUMBER = frozenset(
    {
        "core/artifacts.py",
        "core/code_inputs.py",
        "core/config.py",
        "core/errors.py",
        "core/hardware.py",
        "core/provenance.py",
        "core/rule_logging.py",
        "core/stage.py",
    }
)


def module_file(module: str, package: Path = PACKAGE) -> Path | None:
    """infbench.a.b -> <package>/a/b.py, or a/b/__init__.py; None for a name that is no file
    (a function or class imported from a module)."""
    path = package.joinpath(*module.split(".")[1:])
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(path: Path) -> tuple[str, ...]:
    """The package's modules (and names that may be modules) one file imports, anywhere in it."""
    stat = path.stat()
    return _imports_in(path, stat.st_mtime_ns, stat.st_size)


@cache  # every rule's script reaches the same package files: each is parsed once while unchanged
def _imports_in(path: Path, mtime_ns: int, size: int) -> tuple[str, ...]:
    modules: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return tuple(module for module in modules if module.split(".")[0] == "infbench")


def package_imports(path: Path, package: Path = PACKAGE) -> set[Path]:
    """Every file of the package that `path` imports, directly or through other package modules
    (importing a.b runs a/__init__.py first)."""
    seen: set[Path] = set()
    pending = [path]
    while pending:
        for module in _imported_modules(pending.pop()):
            parts = module.split(".")
            for depth in range(2, len(parts) + 1):
                file = module_file(".".join(parts[:depth]), package)
                if file is not None and file not in seen:
                    seen.add(file)
                    pending.append(file)
    return seen


def _docstring_only(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)


def number_code(script: Path, package: Path = PACKAGE) -> list[Path]:
    """The package files `script`'s numbers depend on, sorted."""
    return sorted(
        file
        for file in package_imports(script, package)
        if file.relative_to(package).as_posix() not in NEVER_CHANGE_A_NUMBER
        and not (file.name == "__init__.py" and _docstring_only(file))
    )


@cache
def script_code(script: str, package: str) -> tuple[str, ...]:
    """number_code of one script against the package folder `package` (the project's own
    src/infbench, not wherever the package was installed from), as strings; cached: the
    workflow asks once per rule."""
    return tuple(str(path) for path in number_code(Path(script).resolve(), Path(package).resolve()))
