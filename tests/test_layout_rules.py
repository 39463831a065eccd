"""The layout rules of course_lib/README.md: the core imports no chapter, every package is mapped."""
import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "course_lib"
CORE = {"model", "dist", "dist_rank", "dist_errors", "dist_progress", "dist_check", "dist_reap", "_forkserver_guard", "hardware", "network", "corpus", "train", "plots",
        "report", "widgets", "_validate", "atomic", "i18n"}
SHARED_CALCULATORS = {"memory", "comm", "comm_alltoall"}


def _imported(path: Path) -> set[str]:
    """Top-level course_lib modules a file imports (absolute or relative, at any depth of the file)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and path.parent == LIB:          # from .x import / from . import x
                names = [node.module] if node.module else [a.name for a in node.names]
            elif node.level == 0 and (node.module or "").startswith("course_lib"):
                rest = node.module.split(".")[1:]
                names = rest[:1] if rest else [a.name for a in node.names]
            else:
                continue
            found |= {n.split(".")[0] for n in names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("course_lib.")}
    return found


def test_the_core_imports_no_chapter():
    for name in sorted(CORE):
        bad = _imported(LIB / f"{name}.py") - CORE
        assert not bad, f"core module {name} imports {sorted(bad)}: move that code into the chapter's package"


def test_shared_calculators_import_only_the_core():
    for name in sorted(SHARED_CALCULATORS):
        bad = _imported(LIB / f"{name}.py") - CORE - SHARED_CALCULATORS
        assert not bad, f"{name} imports {sorted(bad)}"


def test_readme_maps_every_package_and_core_module():
    readme = (LIB / "README.md").read_text(encoding="utf-8")
    packages = {p.name for p in LIB.iterdir() if (p / "__init__.py").is_file()}
    missing = {p for p in packages if f"`{p}/`" not in readme}
    assert not missing, f"course_lib/README.md does not map {sorted(missing)}"
    assert not {m for m in CORE | SHARED_CALCULATORS if not m.startswith("_") and f"`{m}`" not in readme}


# --- The house (issue #44): no circles, one sitting per module, library apart from lab drivers ---
MAX_LINES = 340
# A module a lab or a test runs on real ranks is named for that (``labs``/``runs``), never beside the
# components as ``*_demo(s)``/``*_checks``: reading a file's name tells library from lab driver.
DRIVER_NAME_WORDS = ("demo", "demos", "checks")


def _modules() -> dict[str, Path]:
    """Every course_lib module by dotted name (a package by its own name, not ``.__init__``)."""
    out = {}
    for path in LIB.rglob("*.py"):
        parts = path.relative_to(LIB.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _import_targets(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The course_lib modules ``name`` imports (at any depth of the file), packages' __init__ left out:
    importing a package's submodule runs its __init__, which is not an import of the package's code."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in mods:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != name and mods[t].name != "__init__.py":
                found.add(t)
    return found


def test_no_two_modules_import_each_other():
    mods = _modules()
    edges = {m: _import_targets(m, p, mods) for m, p in mods.items()}
    pairs = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, ())})
    assert not pairs, ("modules that import each other (move the shared piece to the module both "
                       f"need, or split the lab driver from the library): {pairs}")


def test_every_module_is_read_in_one_sitting():
    long = {str(p.relative_to(LIB.parent)): n for p in LIB.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split where a reader would): {long}"


def test_lab_drivers_are_named_as_such():
    named = sorted(str(p.relative_to(LIB.parent)) for p in LIB.rglob("*.py")
                   if set(p.stem.split("_")) & set(DRIVER_NAME_WORDS))
    assert not named, ("modules named like a lab driver beside the library (*_demo(s), *_checks); a "
                       f"package's drivers live in its labs/runs modules: {named}")
