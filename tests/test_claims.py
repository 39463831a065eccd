"""The claim ledger stays complete, sourced and linked to sections and cells that exist."""
import re
from pathlib import Path

import pytest
import yaml

from course_lib import claims

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
