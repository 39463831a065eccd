"""Chinese twins of the course's notebooks: same code cells, translated Markdown.

    python -m course_lib.nbtwin sync EN.ipynb ZH.ipynb   # create ZH, or copy EN's code cells into it
    python -m course_lib.nbtwin sync --all               # every twin under notebooks/, solutions/, exercises/
    python -m course_lib.nbtwin check [--root .]         # exit 1 listing every twin that drifted
    python -m course_lib.nbtwin stamp ZH.ipynb           # after translating: record the English each cell translates
    python -m course_lib.nbtwin latin [PATH ...]         # Latin-script prose left in Chinese Markdown

A twin lives at ``<dir>/zh/<name>.ipynb`` beside ``<dir>/<name>.ipynb``. Its code cells equal the
English ones byte for byte (source, outputs, execution counts, metadata, ids), so the twin is never
executed: its outputs are the English notebook's, checked by nbval there. Its Markdown cells, at the
same positions, hold the translation, each with metadata ``{"twin": {"en_sha1": sha1 of the English
cell's source}}``: a later change of the English cell shows as a stale translation; a cell without
it is untranslated. The twin's notebook metadata says ``"course": {"lang": "zh"}``.

Exercise twins (``exercises/zh``) are generated from the solution twins like the English ones
(``python -m course_lib.grading generate solutions/zh exercises/zh``); their ``en_sha1`` is that of
the master's (``solutions/``) cell.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
from pathlib import Path

from course_lib.grading._notebook import dumps, source_text
from course_lib.zh_prose import latin_words, load_allowlist, strip_nonprose  # noqa: F401 (nbtwin latin; tests)

TWIN_DIRS = ("notebooks", "solutions", "exercises")
LANG = "zh"


class TwinError(ValueError):
    """A twin whose cells do not line up with its English notebook (or a path that is no twin)."""


def en_path(zh: Path) -> Path:
    """The English notebook of twin ``zh`` (``<dir>/zh/<name>`` -> ``<dir>/<name>``)."""
    zh = Path(zh)
    if zh.parent.name != LANG:
        raise TwinError(f"{zh}: a twin lives in a '{LANG}' folder beside its English notebook")
    return zh.parent.parent / zh.name


def master_path(zh: Path) -> Path:
    """The English notebook whose Markdown the twin translates: an exercise twin's master in
    ``solutions/`` (the generator copies the master's Markdown), else :func:`en_path`."""
    en = en_path(zh)
    if en.parent.name == "exercises":
        master = en.parent.parent / "solutions" / en.name
        if master.is_file():
            return master
    return en


def sha1(cell: dict) -> str:  # of a cell's source
    return hashlib.sha1(source_text(cell.get("source")).encode("utf-8")).hexdigest()


def _same(a: dict, b: dict) -> bool:  # equal as stored (a source as a string or as its lines alike)
    return dumps({"cells": [copy.deepcopy(a)]}) == dumps({"cells": [copy.deepcopy(b)]})


def _load(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TwinError(f"{path}: no such notebook") from None
    except (OSError, ValueError) as e:      # unreadable, not UTF-8, not JSON: say so, naming the file
        raise TwinError(f"{path}: not a readable notebook ({type(e).__name__}: {e})") from None


def _write(path: Path, nb: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(dumps(nb))


def _kinds(en: dict, zh: dict, zh_name: str) -> list[str]:
    """Problems lining up the cells of ``zh`` with ``en``: the first cell index whose kind differs."""
    ec, zc = en.get("cells", []), zh.get("cells", [])
    for i, (a, b) in enumerate(zip(ec, zc)):
        if a.get("cell_type") != b.get("cell_type"):
            return [f"{zh_name}: cell {i}: the English cell is {a.get('cell_type')}, "
                    f"the twin's is {b.get('cell_type')} (cells out of step)"]
    if len(ec) != len(zc):
        return [f"{zh_name}: the English notebook has {len(ec)} cells, the twin {len(zc)} "
                f"(cells differ from index {min(len(ec), len(zc))})"]
    return []


def _twin_metadata(en_meta: dict, zh_meta: dict | None = None) -> dict:
    """The English notebook's metadata, with course.lang = zh and the twin's own figure captions."""
    meta = copy.deepcopy(en_meta)
    course = meta.get("course") if isinstance(meta.get("course"), dict) else {}
    meta["course"] = {**course, "lang": LANG}
    captions = ((zh_meta or {}).get("course") or {}).get("captions")
    if captions:
        meta["course"]["captions"] = copy.deepcopy(captions)
    return meta


# A lab's figure caption is in its code cell's metadata (mystnb.figure.caption), which the twin keeps
# byte for byte, so the twin's Chinese caption lives in its notebook metadata instead:
# course.captions = {"<code cell index>": {"zh": "...", "en_sha1": sha1 of the English caption}};
# the book (book/_ext/course_editions.py) puts it in the figure on the twin's page.
def english_captions(nb: dict) -> dict[str, str]:
    out = {}
    for i, c in enumerate(nb["cells"]):
        fig = ((c.get("metadata") or {}).get("mystnb") or {}).get("figure") or {}
        if c.get("cell_type") == "code" and isinstance(fig.get("caption"), str):
            out[str(i)] = fig["caption"]
    return out


def _text_sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def _caption_problems(en: dict, zh: dict, name: str) -> list[str]:
    have = ((zh.get("metadata") or {}).get("course") or {}).get("captions") or {}
    out = []
    for i, caption in english_captions(en).items():
        entry = have.get(i) if isinstance(have.get(i), dict) else {}
        if not str(entry.get("zh", "")).strip():
            out.append(f"{name}: the figure caption of code cell {i} is untranslated: add course.captions"
                       f'["{i}"] = {{"zh": "..."}} to the twin\'s notebook metadata, then stamp it')
        elif entry.get("en_sha1") != _text_sha1(caption):
            out.append(f"{name}: the figure caption of code cell {i} is stale: the English changed since; "
                       "translate it again, then stamp")
    return out


def _md_cell(en_cell: dict, zh_cell: dict | None) -> dict:
    """The twin's Markdown cell: English id and metadata, the twin's source and twin mark."""
    cell = copy.deepcopy(en_cell)
    cell.get("metadata", {}).pop("twin", None)
    if zh_cell is not None:
        cell["source"] = copy.deepcopy(zh_cell.get("source", ""))
        if zh_cell.get("attachments"):
            cell["attachments"] = copy.deepcopy(zh_cell["attachments"])
        twin = (zh_cell.get("metadata") or {}).get("twin")
        if twin:
            cell.setdefault("metadata", {})["twin"] = copy.deepcopy(twin)
    return cell


def sync(en_file: Path, zh_file: Path) -> str:
    """Create ``zh_file`` as an untranslated copy of ``en_file``, or copy every code cell of
    ``en_file`` into it by position, keeping its Markdown. Raises :class:`TwinError` (naming the
    cell index) when the sequences of cell kinds differ. Returns a one-line summary."""
    en_file, zh_file = Path(en_file), Path(zh_file)
    en = _load(en_file)
    if not zh_file.exists():
        nb = copy.deepcopy(en)
        nb["metadata"] = _twin_metadata(en.get("metadata", {}))
        nb["cells"] = [c if c.get("cell_type") == "code" else _md_cell(c, None) for c in nb["cells"]]
        _write(zh_file, nb)
        md = sum(c.get("cell_type") == "markdown" for c in nb["cells"])
        return f"{zh_file}: created from {en_file}; {md} Markdown cells to translate"
    zh = _load(zh_file)
    bad = _kinds(en, zh, str(zh_file))
    if bad:
        raise TwinError(bad[0] + f"; line the twin up with {en_file} by hand")
    out = copy.deepcopy(en)
    out["metadata"] = _twin_metadata(en.get("metadata", {}), zh.get("metadata"))
    copied = 0  # code cells that changed
    for i, (e, z) in enumerate(zip(en["cells"], zh["cells"])):
        if e.get("cell_type") == "code":
            copied += not _same(e, z)
        else:
            out["cells"][i] = _md_cell(e, z)
    if dumps(copy.deepcopy(out)) != zh_file.read_text(encoding="utf-8"):
        _write(zh_file, out)
    return f"{zh_file}: {copied} code cells updated from {en_file}"


def problems(zh_file: Path) -> list[str]:
    """Every way twin ``zh_file`` differs from its English notebook: cells out of step, a code cell
    not equal byte for byte, Markdown untranslated (no ``en_sha1``) or stale, no ``course.lang``."""
    zh_file, name = Path(zh_file), str(zh_file)
    try:
        en_file, master_file = en_path(zh_file), master_path(zh_file)
        en, zh, master = _load(en_file), _load(zh_file), _load(master_file)
    except TwinError as e:
        return [str(e)]
    bad = _kinds(en, zh, name)
    if master_file != en_file:
        bad += _kinds(master, zh, name + f" (against its master {master_file})")
    if bad:
        return bad
    out = []
    if (zh.get("metadata", {}).get("course") or {}).get("lang") != LANG:
        out.append(f"{name}: notebook metadata lacks \"course\": {{\"lang\": \"{LANG}\"}}")
    untranslated, stale = [], []
    for i, (e, m, z) in enumerate(zip(en["cells"], master["cells"], zh["cells"])):
        if e.get("cell_type") == "code":
            if not _same(e, z):
                what = [k for k in sorted(set(e) | set(z)) if e.get(k) != z.get(k)]
                out.append(f"{name}: code cell {i} differs from {en_file} ({', '.join(what)}); "
                           f"run python -m course_lib.nbtwin sync {en_file} {zh_file}")
            continue
        mark = ((z.get("metadata") or {}).get("twin") or {}).get("en_sha1")
        if not mark:
            untranslated.append(i)
        elif mark != sha1(m):
            stale.append(i)
    todo = (f"translate, then python -m course_lib.nbtwin stamp {zh_file}" if master_file == en_file else
            f"translate {zh_file.parent.parent.parent / 'solutions' / LANG / zh_file.name}, stamp it, "
            f"then regenerate with python -m course_lib.grading generate")
    if untranslated:
        out.append(f"{name}: Markdown cells {untranslated} untranslated (no twin.en_sha1): {todo}")
    if stale:
        out.append(f"{name}: Markdown cells {stale} stale: {master_file} changed them since they were "
                   f"translated; {todo}")
    return out + _caption_problems(en, zh, name) + _generated(zh_file, master_file != en_file)


def _generated(zh_file: Path, is_exercise: bool) -> list[str]:
    """An exercise twin must be what the generator makes of its solution twin, byte for byte."""
    zh_master = zh_file.parent.parent.parent / "solutions" / LANG / zh_file.name
    if not is_exercise or not zh_master.is_file():
        return []
    from course_lib.grading.generate import render

    if render(zh_master) != zh_file.read_text(encoding="utf-8"):
        return [f"{zh_file}: differs from what the generator makes of {zh_master}; run "
                f"python -m course_lib.grading generate {zh_master.parent} {zh_file.parent}"]
    return []


def stamp(zh_file: Path) -> list[int]:
    """Record in each Markdown cell of ``zh_file`` the sha1 of the English cell it translates.
    Cells whose text is still the English one are left unstamped; returns their indices."""
    zh_file = Path(zh_file)
    master_file = master_path(zh_file)
    master, zh = _load(master_file), _load(zh_file)
    bad = _kinds(master, zh, str(zh_file))
    if bad:
        raise TwinError(bad[0])
    same = []
    for i, (m, z) in enumerate(zip(master["cells"], zh["cells"])):
        if z.get("cell_type") != "markdown":
            continue
        meta = z.setdefault("metadata", {})
        if source_text(z.get("source")) == source_text(m.get("source")) and latin_words(
                source_text(z.get("source"))):
            meta.pop("twin", None)
            same.append(i)
        else:
            meta["twin"] = {"en_sha1": sha1(m)}
    captions = ((zh.get("metadata") or {}).get("course") or {}).get("captions") or {}
    for i, caption in english_captions(master).items():
        if isinstance(captions.get(i), dict) and str(captions[i].get("zh", "")).strip():
            captions[i]["en_sha1"] = _text_sha1(caption)
    _write(zh_file, zh)
    return same


def twins(root: Path = Path(".")) -> list[Path]:
    return [p for d in TWIN_DIRS for p in sorted((Path(root) / d / LANG).glob("*.ipynb"))]


def notebook_latin(path: Path, allow: list[str] = ()) -> dict[int, list[str]]:
    """Latin-script prose words of each Markdown cell of notebook ``path`` (cells with none left out)."""
    nb = _load(path)
    found = {i: latin_words(source_text(c.get("source")), allow) for i, c in enumerate(nb["cells"])
             if c.get("cell_type") == "markdown"}
    return {i: w for i, w in found.items() if w}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m course_lib.nbtwin", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sync", help="create a twin, or copy the English code cells into it")
    s.add_argument("paths", type=Path, nargs="*", help="EN.ipynb ZH.ipynb")
    s.add_argument("--all", action="store_true", help="every twin under notebooks/, solutions/, exercises/")
    s.add_argument("--root", type=Path, default=Path("."))
    c = sub.add_parser("check", help="exit 1 listing every twin that differs from its English notebook")
    c.add_argument("--root", type=Path, default=Path("."))
    t = sub.add_parser("stamp", help="mark the twin's Markdown cells as translations of the current English")
    t.add_argument("paths", type=Path, nargs="+")
    la = sub.add_parser("latin", help="count Latin-script prose words in twins' Markdown (or .md pages)")
    la.add_argument("paths", type=Path, nargs="*")
    la.add_argument("--allowlist", type=Path, default=Path("book/zh/latin_allowlist.txt"))
    a = p.parse_args(argv)
    try:
        if a.command == "sync":
            if a.all == (len(a.paths) == 2) or (a.paths and len(a.paths) != 2):
                p.error("sync takes two paths, EN.ipynb ZH.ipynb, or --all")
            pairs = [(en_path(z), z) for z in twins(a.root)] if a.all else [tuple(a.paths)]
            for en, zh in pairs:
                print(sync(en, zh))
            return 0
        if a.command == "stamp":
            for zh in a.paths:
                same = stamp(zh)
                print(f"{zh}: stamped" + (f"; cells {same} still English: left untranslated" if same else ""))
            return 0
    except TwinError as e:
        print(f"nbtwin: {e}", file=sys.stderr)
        return 2
    if a.command == "check":
        found = twins(a.root)
        bad = [line for z in found for line in problems(z)]
        print(*bad, sep="\n") if bad else None
        print(f"{len(found)} twins checked, {len(bad)} problems")
        return 1 if bad else 0
    allow = load_allowlist(a.allowlist)
    total = 0
    for path in a.paths or twins():
        if path.suffix == ".md":
            words = latin_words(path.read_text(encoding="utf-8"), allow)
            cells = {0: words} if words else {}
        else:
            cells = notebook_latin(path, allow)
        n = sum(len(w) for w in cells.values())
        total += n
        print(f"{n:5d}  {path}" + "".join(f"\n       cell {i}: {' '.join(w[:12])}" for i, w in cells.items()))
    print(f"{total:5d}  in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
