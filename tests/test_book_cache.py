"""book/_ext/course_cache.py: a chapter page's cached outputs are reused only while course_lib and
data/ are the files they were computed from (a stale cache showed old numbers and English words
after a library change, found while converting the Chinese tables)."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("course_cache", ROOT / "book" / "_ext" / "course_cache.py")
cache = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cache)

PAGE = "---\njupytext:\n  text_representation: {}\n---\n# A page\n\n```{code-cell} ipython3\nx = 1\n```\n"


def _tree(root: Path) -> Path:
    (root / "course_lib" / "__pycache__").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "course_lib" / "model.py").write_text("A = 1\n")
    (root / "course_lib" / "i18n.json").write_text('{"ok": "符合"}', encoding="utf-8")
    (root / "data" / "sweep.json").write_text("[1, 2]")
    return root


def test_the_digest_follows_the_library_and_the_data_and_nothing_else(tmp_path) -> None:
    root = _tree(tmp_path / "tree")
    first = cache.digest(root)
    assert first == cache.digest(root)
    (root / "course_lib" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    (root / "course_lib" / "notes.txt").write_text("not read by a page")
    (root / "data" / ".hidden").write_text("x")
    assert cache.digest(root) == first, "a cache, a hidden file or a file no page reads changed the key"
    (root / "course_lib" / "i18n.json").write_text('{"ok": "正常"}', encoding="utf-8")
    second = cache.digest(root)
    assert second != first, "a new Chinese entry left the pages' cached outputs in place"
    (root / "data" / "sweep.json").write_text("[1, 3]")
    assert cache.digest(root) not in (first, second), "a re-run sweep left the pages' cached outputs in place"


def test_in_a_checkout_only_tracked_files_count(tmp_path) -> None:
    """An author's untracked file is not in the students' handout, which copies what git tracks:
    it must not change the key either, or the handout's build would execute every page again."""
    if shutil.which("git") is None:
        return
    root = _tree(tmp_path / "repo")
    run = lambda *a: subprocess.run(["git", *a], cwd=root, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    run("add", "course_lib/model.py", "course_lib/i18n.json", "data/sweep.json")
    tracked = cache.digest(root)
    (root / "course_lib" / "scratch.py").write_text("B = 2\n")
    assert cache.digest(root) == tracked
    copy = tmp_path / "copy"           # what a handout holds: the tracked files, no .git
    for rel in ("course_lib/model.py", "course_lib/i18n.json", "data/sweep.json"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, copy / rel)
    assert cache.digest(copy) == tracked


def test_a_page_gets_one_hidden_cell_holding_the_key_and_other_text_is_left_alone() -> None:
    out = cache.with_digest(PAGE, "abc123")
    assert out.startswith(PAGE.rstrip("\n")) and out.count("```{code-cell}") == 2
    assert ":tags: [remove-cell]\n# computed from course_lib and data/ with digest abc123" in out
    assert cache.with_digest("# Notes\n\nNo code here.\n", "abc123") == "# Notes\n\nNo code here.\n"


def test_the_repository_s_key_counts_its_library_and_data() -> None:
    files = {p.relative_to(ROOT).as_posix() for p in cache._files(ROOT)}
    assert "course_lib/i18n.py" in files and "course_lib/i18n_zh/ch01_flops.json" in files
    assert any(f.startswith("data/") for f in files)
    assert not [f for f in files if "__pycache__" in f]
