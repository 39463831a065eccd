"""The layout rules of course_lib/README.md: the core imports no chapter, every package is mapped."""
import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "course_lib"
CORE = {"model", "dist", "dist_rank", "dist_errors", "dist_progress", "dist_check", "_forkserver_guard", "hardware", "network", "corpus", "train", "plots",
        "report", "widgets", "_validate", "atomic"}
SHARED_CALCULATORS = {"memory", "comm"}


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
