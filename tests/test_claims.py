"""The claim ledger stays complete, sourced and linked to sections and cells that exist."""
import os
import re
import string
from pathlib import Path

import pytest
import yaml

from course_lib import claims, claims_zh

ROOT = Path(__file__).resolve().parents[1]


def _toc_files():
    toc = yaml.safe_load((ROOT / "book/_toc.yml").read_text())
    files = {toc["root"]}
    for part in toc["parts"]:
        files |= {c["file"] for c in part["chapters"]}
    return files


def test_every_claim_of_the_source_notes_is_in_the_ledger_once():
    assert [c.number for c in claims.CLAIMS] == list(range(1, 21))
    assert all(c.verdict in claims.VERDICTS for c in claims.CLAIMS)


def test_evidence_points_at_existing_sections_and_cells_in_the_book():
    toc = _toc_files()
    for c in claims.CLAIMS:
        for pointer in c.evidence:
            assert claims.resolve_evidence(pointer, ROOT), f"claim {c.number}: {pointer} does not exist"
            doc = pointer.partition("#")[0].rsplit(".", 1)[0]
            assert doc in toc, f"claim {c.number}: {doc} is not in book/_toc.yml"


def test_a_dangling_pointer_is_detected(tmp_path):
    (tmp_path / "page.md").write_text("(sec-here)=\n# Title\n")
    assert claims.resolve_evidence("page.md#sec-here", tmp_path)
    assert not claims.resolve_evidence("page.md#sec-gone", tmp_path)
    assert not claims.resolve_evidence("missing.md#sec-here", tmp_path)


def test_references_are_bibliography_keys_or_named_documents():
    bib = (ROOT / "book/references.bib").read_text()
    for c in claims.CLAIMS:
        if re.fullmatch(r"[a-z0-9_]+", c.reference):
            assert f"{{{c.reference}," in bib, f"claim {c.number}: {c.reference} not in references.bib"


def test_corrected_statements_carry_the_measured_numbers():
    by_n = {c.number: claims.render(c) for c in claims.CLAIMS}
    assert "ends at 2048, 4.88× off" in by_n[7] and "BF16 ends at 256 (39×)" in by_n[7]
    assert "7.7% (causal) or 15.3% (full)" in by_n[13]
    assert "41.4 days" in by_n[14]
    assert "+20.8%" in by_n[15] and "+25.9%" in by_n[15]
    assert all("{" not in s for s in by_n.values())


GLUED_VERDICT = re.compile(r'glue\("claim(\d+)_verdict", Markdown\(f"\*\*\{claims\.verdict_of\((\d+)\)\}\*\*"\)')


def test_chapter_verdicts_are_rendered_from_the_ledger():
    """A chapter that gives a ledger claim's verdict glues it from claims.verdict_of: one source of truth."""
    pages = {p: p.read_text(encoding="utf-8") for p in sorted((ROOT / "book").glob("*.md"))}
    used = {(p.name, int(n)) for p, t in pages.items() for n in re.findall(r"\{glue:md\}`claim(\d+)_verdict`", t)}
    glued = {(p.name, int(a)) for p, t in pages.items() for a, b in GLUED_VERDICT.findall(t) if a == b}
    assert ("05_pipeline.md", 5) in used, "chapter 5's summary must render claim 5's verdict from the ledger"
    assert used <= glued, f"verdicts shown but not glued from claims.verdict_of (same number): {used - glued}"
    assert "half right" not in pages[ROOT / "book/05_pipeline.md"]


def test_verdict_of_names_a_missing_claim():
    assert claims.verdict_of(5) == "PARTLY FALSE" and claims.verdict_of(5, "zh") == "部分错误"
    assert set(claims.VERDICTS_ZH) == set(claims.VERDICTS)       # every verdict has its Chinese wording
    with pytest.raises(ValueError, match="lang"):
        claims.verdict_of(5, "fr")
    with pytest.raises(ValueError, match="number"):
        claims.verdict_of(99)


def test_built_chapter_shows_the_ledger_verdict(html_dir):
    """After the build, chapter 5's summary row carries exactly the ledger's verdict for claim 5."""
    html = (html_dir / "book/05_pipeline.html").read_text(encoding="utf-8")
    row = next(r for r in re.findall(r"<tr.*?</tr>", html, re.S) if "idles at the start of a batch" in r)
    assert f"<strong>{claims.verdict_of(5)}</strong>" in row


# --- the Chinese edition: the notes in their own words (issue #49 item 3) -------------------------

# The source notes live beside the repository (COURSE_DESIGN.md: ../shared/seeds/), not in it.
SEEDS = Path(os.environ.get("COURSE_SEEDS", ROOT.parent / "shared" / "seeds"))


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@pytest.mark.skipif(not all((SEEDS / f).is_file() for f in claims_zh.SEED_FILES.values()),
                    reason=f"the source notes are not at {SEEDS} (set COURSE_SEEDS)")
def test_chinese_quotes_are_the_notes_own_words():
    """Each quote is a passage of the note that makes the claim, verbatim up to whitespace runs."""
    notes = {n: claims_zh.normalise((SEEDS / f).read_text(encoding="utf-8"))
             for n, f in claims_zh.SEED_FILES.items()}
    for c in claims.CLAIMS:
        for passage in claims_zh.QUOTES[c.number]:
            assert claims_zh.normalise(passage) in notes[c.note], (
                f"claim {c.number}: {passage!r} is not in note {c.note} ({claims_zh.SEED_FILES[c.note]})")


def test_every_claim_has_its_quote_and_its_chinese_statement_with_the_same_numbers():
    numbers = [c.number for c in claims.CLAIMS]
    assert sorted(claims_zh.QUOTES) == numbers and sorted(claims_zh.TRUE_ZH) == numbers
    cjk = re.compile(r"[\u4e00-\u9fff]")
    for c in claims.CLAIMS:
        assert all(p.strip() for p in claims_zh.QUOTES[c.number]), c.number
        assert _fields(claims_zh.TRUE_ZH[c.number]) == _fields(c.corrected), (
            f"claim {c.number}: the Chinese statement must print the figures the English one prints")
        text = claims_zh.render_zh(c.number)
        assert cjk.search(text) and "{" not in text
    by_n = {n: claims_zh.render_zh(n) for n in numbers}
    assert "最终是 2048，差了 4.88 倍" in by_n[7] and "BF16 停在 256（差 39 倍）" in by_n[7]
    assert "7.7%（因果）" in by_n[13] and "15.3%（完整）" in by_n[13]


def test_chinese_verdicts_are_the_editions_scale():
    assert sorted(claims.VERDICTS_ZH.values()) == sorted(["正确", "正确但有保留", "不精确", "部分错误", "错误", "无出处"])
    assert claims.verdict_of(17, "zh") == "无出处" and claims.verdict_of(3, "zh") == "正确但有保留"


def test_quotes_keep_dollars_and_math_apart():
    """Lecture notes (note 1): "$" is a dollar, escaped; tutorial (note 2): "$" delimits TeX."""
    assert "\\$25/MTok → \\$25M" in claims_zh.quote_md(6)
    q8 = claims_zh.quote_md(8)
    assert "$$" not in q8 and q8.count("$") == 2 and "\\$" not in q8
    assert claims_zh.quote_md(1).count("……") == 2


def test_chinese_ledger_points_at_the_chinese_twins():
    """Every section pointer has its zh- twin; a lab pointer moves to the Chinese notebook once it exists."""
    for c in claims.CLAIMS:
        for pointer in c.evidence:
            twin = claims_zh.twin_pointer(pointer, ROOT)
            path = Path(pointer.partition("#")[0])
            if path.suffix == ".md":
                assert twin == f"book/zh/{path.name}#zh-{pointer.partition('#')[2]}", (c.number, pointer)
            elif (ROOT / path.parent / "zh" / path.name).is_file() and claims_zh.in_toc(path.parent / "zh" / path.name, ROOT):
                assert twin is not None and claims.resolve_evidence(twin, ROOT), (c.number, pointer)
            else:                             # not built: the Chinese ledger links the English lab
                assert twin is None, (c.number, pointer)
    for c in claims.CLAIMS:
        if not re.fullmatch(r"[a-z0-9_]+", c.reference):
            assert c.reference in claims_zh.REFERENCES_ZH, f"claim {c.number}: {c.reference} has no Chinese name"


def test_a_missing_twin_falls_back_to_the_english_pointer(tmp_path):
    (tmp_path / "book/zh").mkdir(parents=True)
    (tmp_path / "book/01.md").write_text("(sec-a)=\n# A\n")
    assert claims_zh.twin_pointer("book/01.md#sec-a", tmp_path) is None
    (tmp_path / "book/zh/01.md").write_text("(zh-sec-a)=\n# 甲\n")
    assert claims_zh.twin_pointer("book/01.md#sec-a", tmp_path) == "book/zh/01.md#zh-sec-a"
    nb = {"cells": [{"cell_type": "code", "id": "c01", "source": ["x = 1"]}]}
    (tmp_path / "notebooks/zh").mkdir(parents=True)
    (tmp_path / "notebooks/lab.ipynb").write_text(claims.json.dumps(nb))
    assert claims_zh.twin_pointer("notebooks/lab.ipynb#c01", tmp_path) is None
    nb_zh = {"cells": [{"cell_type": "markdown", "id": "m", "source": ["文"]},
                       {"cell_type": "code", "id": "z01", "source": ["x = 1"]}]}
    (tmp_path / "notebooks/zh/lab.ipynb").write_text(claims.json.dumps(nb_zh))
    (tmp_path / "book/_toc.yml").write_text("root: book/index\nparts:\n  - chapters:\n      - file: notebooks/lab\n")
    assert claims_zh.twin_pointer("notebooks/lab.ipynb#c01", tmp_path) is None     # the book does not build it
    (tmp_path / "book/_toc.yml").write_text("root: book/index\nparts:\n  - chapters:\n      - file: notebooks/zh/lab\n")
    assert claims_zh.twin_pointer("notebooks/lab.ipynb#c01", tmp_path) == "notebooks/zh/lab.ipynb#z01"


def test_the_chinese_pages_paste_the_chinese_tables():
    """The cell is shared byte for byte (tests/test_editions.py); each edition pastes its own glue."""
    for page, key in (("claims", "claims_table"), ("notes", "notes_table")):
        en, zh = ((ROOT / d / f"{page}.md").read_text(encoding="utf-8") for d in ("book", "book/zh"))
        assert f"```{{glue:md}} {key}\n" in en and f"```{{glue:md}} {key}_zh\n" in zh
        assert "display(Markdown" not in en


def test_built_chinese_ledger_quotes_the_notes(html_dir):
    html = (html_dir / "book/zh/claims.html").read_text(encoding="utf-8")
    row = next(r for r in re.findall(r"<tr.*?</tr>", html, re.S) if "计算值比真实值 10x off" in r)
    assert f"<strong>{claims.verdict_of(7, 'zh')}</strong>" in row and "差了 4.88 倍" in row
    assert 'href="../../book/zh/07_fp16.html#' in row or 'href="07_fp16.html#' in row
    notes = (html_dir / "book/zh/notes.html").read_text(encoding="utf-8")
    assert "HBM 有限（B300 288GB）" in notes and "the notes say" not in notes
