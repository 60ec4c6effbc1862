"""The package layout the README describes: families are packages, every name is imported from the
module that defines it, and package ``__init__`` files are only signposts.  Around it: no test
module imports another, no benchmark or rig imports a test module (what they share is in
``rigs/``), and no import circles among the rigs, the tests and the benchmarks."""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "service" / "poolwatch"
MODULES = sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    dotted = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return dotted.removesuffix(".__init__")


def _defined_names(tree: ast.Module) -> set[str]:
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
    return defined


def _exported(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            assert isinstance(node.value, (ast.List, ast.Tuple))
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    return []


def test_no_flat_module_families_remain() -> None:
    flat = [p.name for p in PACKAGE.glob("*.py")]
    prefixed = [n for n in flat if n.startswith(("codec_", "catalog_", "settings_", "discovery_"))]
    assert prefixed == []
    for family in ("codec", "catalog", "settings", "discovery"):
        assert (PACKAGE / family / "__init__.py").is_file()
        assert not (PACKAGE / f"{family}.py").exists()


@pytest.mark.parametrize("path", MODULES, ids=_module_name)
def test_a_module_exports_only_what_it_defines(path: Path) -> None:
    tree = ast.parse(path.read_text())
    defined = _defined_names(tree)
    reexported = [n for n in _exported(tree) if n not in defined and n != "__version__"]
    assert reexported == [], f"{_module_name(path)} re-exports {reexported} (import them where defined)"
    if path.name == "__init__.py" and path.parent != PACKAGE:
        ours = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("poolwatch")
        ]
        assert ours == [] or _exported(tree), "a package __init__ is a signpost, not a re-export"


@pytest.mark.parametrize(
    "path", [p for p in MODULES if p.name == "__init__.py" and p.parent != PACKAGE], ids=_module_name
)
def test_a_package_face_is_a_signpost_with_no_code(path: Path) -> None:
    # its docstring says what the package holds; what it does is in a module, imported from there
    tree = ast.parse(path.read_text())
    code = [
        type(node).__name__
        for node in tree.body
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    ]
    assert code == [], f"{_module_name(path)} holds {code}: move it into a module of the package"
    assert ast.get_docstring(tree), f"{_module_name(path)} says nothing of what its package holds"


LONG = 250  # lines: a module past it says why it is one module ("Kept whole: ...")


def test_a_module_over_250_lines_says_in_its_docstring_why_it_is_kept_whole() -> None:
    # the product, and the rigs and benchmarks others build on
    repo = PACKAGE.parents[1]
    unexplained = sorted(
        f"{path.relative_to(repo)} ({lines} lines)"
        for path in sorted(
            p for folder in ("service", "rigs", "benchmarks") for p in (repo / folder).rglob("*.py")
        )
        if (lines := len(path.read_text().splitlines())) > LONG
        and "Kept whole:" not in (ast.get_docstring(ast.parse(path.read_text())) or "")
    )
    assert unexplained == [], "split it on a real seam, or say in its docstring why not"


TESTS = Path(__file__).resolve().parent


def _imported_modules(tree: ast.Module) -> list[str]:
    """Every dotted module an import statement (or ``importorskip``/``import_module`` of a literal)
    names, ``from a import b`` counting as both ``a`` and ``a.b`` (``b`` may be a module)."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found += [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("importorskip", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(node.args[0].value)
    return found


def test_no_test_module_imports_another() -> None:
    # shared fakes and strategies live in helper modules (tests/helpers.py, tests/strategies.py,
    # tests/<area>/fakes.py ...): importing a test module runs its tests' setup twice and ties
    # two test files' fates together
    offenders = [
        f"{path.relative_to(TESTS.parent)} imports {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for name in _imported_modules(ast.parse(path.read_text()))
        if name.rpartition(".")[2].startswith("test_")
    ]
    assert offenders == []


def test_no_test_monkeypatches_the_product() -> None:
    # a constant or collaborator a test must change is a keyword parameter or an injected object
    # (ProbeServer(head_timeout_s=...), QuietServer(tick_s=...), serve.run(serve=...))
    offenders = sorted(
        f"{path.relative_to(TESTS.parent)}:{node.lineno}"
        for path in TESTS.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.arg) and node.arg == "monkeypatch")
        or (isinstance(node, ast.Attribute) and node.attr == "MonkeyPatch")
    )
    assert offenders == []


def test_every_module_a_test_imports_by_name_exists() -> None:
    # importorskip("poolwatch.x") of a module that moved would skip its tests in silence
    named = {
        name
        for path in TESTS.rglob("*.py")
        for name in _imported_modules(ast.parse(path.read_text()))
        if name.startswith("poolwatch") and "." in name
    }
    missing = sorted(n for n in named if not _resolves(n))
    assert missing == []


def _resolves(name: str) -> bool:
    """``name`` is a module, or a name its parent module defines (``from a import b``)."""
    import importlib
    import importlib.util

    try:
        if importlib.util.find_spec(name) is not None:
            return True
    except (ImportError, ValueError):
        pass
    parent, _, attr = name.rpartition(".")
    try:
        return hasattr(importlib.import_module(parent), attr)
    except ImportError:
        return False


REPO = PACKAGE.parents[1]
# a "module:attribute" literal (an engine entry's probe, a spec's scheduler): loading it imports it
LOADED_BY_NAME = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.\w+)*):\w+$")


def _local_modules() -> dict[str, Path]:
    """The modules of ``rigs/``, ``tests/`` and ``benchmarks/`` by dotted name (a benchmark by its
    stem too: the scripts import their neighbours with ``benchmarks/`` on ``sys.path``)."""
    found: dict[str, Path] = {}
    for folder in ("rigs", "tests", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            dotted = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            found[dotted] = path
            if folder == "benchmarks":
                found[path.stem] = path
    return found


def _absolute_imports(path: Path, tree: ast.Module) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in ``tree``, at any depth (a function's own imports
    too), relative ones resolved against ``path``'s package; ``from a import b`` counts as ``a``
    and ``a.b``, and a ``"module:attribute"`` literal as its module."""
    package = list(path.relative_to(REPO).with_suffix("").parts)
    if path.name != "__init__.py":
        package.pop()
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found += [(node.lineno, base), *((node.lineno, f"{base}.{a.name}") for a in node.names)]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and (named := LOADED_BY_NAME.match(node.value))
        ):
            found.append((node.lineno, named["module"]))
    return found


def test_no_benchmark_and_no_rig_imports_a_test_module() -> None:
    # what both need (fakes, drivers, the emulated deployment) lives in rigs/, which both import
    offenders = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for folder in ("benchmarks", "rigs")
        for path in sorted((REPO / folder).rglob("*.py"))
        for line, name in _absolute_imports(path, ast.parse(path.read_text()))
        if name == "tests" or name.startswith("tests.")
    ]
    assert offenders == [], "move what they share into rigs/ and import it from there in both"


def test_no_import_cycle_among_the_rigs_the_tests_and_the_benchmarks() -> None:
    # an import circle (a function's own imports included) means two modules are one concern
    modules = _local_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        own = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        if name != own:
            continue  # a benchmark's stem: the same file as its dotted name
        targets = {
            modules[n] for _, n in _absolute_imports(path, ast.parse(path.read_text())) if n in modules
        }
        graph[name] = {
            ".".join(t.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__") for t in targets
        } - {name}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as cycle:
        pytest.fail(f"import cycle: {' -> '.join(cycle.args[1])}")
