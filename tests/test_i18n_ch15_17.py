"""Chapters 15-17 write their generated words in the page's language (issue #49 items 4 and 6):
the library functions that write English for a page take ``lang``, write Chinese with it and the same
English without it (the labs' stored outputs print the English)."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CJK = re.compile(r"[\u4e00-\u9fff]")


def _stored() -> dict:
    return json.loads((ROOT / "data" / "triage_dumps.json").read_text())


def _variants() -> dict[str, tuple[dict, list[int]]]:
    """The stored run's dumps (rank 1 skipped an all-reduce), edited into each kind of verdict."""
    base = _stored()["dumps"]
    out = {"skipped": (base, [])}
    d = copy.deepcopy(base)
    d["1"]["current"]["name"], d["1"]["entries"][-1]["name"] = "step 3 grads", "step 3 grads"
    out["different collective"] = (d, [])
    d = copy.deepcopy(base)
    for e in (d["1"]["current"], d["1"]["entries"][-1]):
        e.update(op="all_reduce", name="step 3 grads", sizes=[[32]])
    out["mismatched size"] = (d, [])
    d = copy.deepcopy(base)
    d["1"]["entries"] = d["1"]["entries"][:-1]
    d["1"]["next_seq"] = 6
    d["1"]["current"] = dict(d["1"]["entries"][-1], state="started", t_started=d["1"]["dumped_at"] - 3.0)
    out["stuck in compute"] = (d, [])
    d = copy.deepcopy(base)
    del d["1"]
    out["no dump"] = (d, [1])
    d = copy.deepcopy(base)
    for r in ("0", "2", "3"):
        d[r]["current"] = None
    out["none"] = ({r: d[r] for r in ("0", "2", "3")}, [])
    return out


@pytest.mark.parametrize("kind", ["skipped", "different collective", "mismatched size", "stuck in compute",
                                  "no dump", "none"])
def test_a_hang_verdict_is_written_in_chinese_and_the_english_is_unchanged(kind: str) -> None:
    from course_lib.triage import analyze_dumps
    dumps, missing = _variants()[kind]
    en, zh = analyze_dumps(dumps, missing), analyze_dumps(dumps, missing, "zh")
    assert en.kind == zh.kind == kind and (en.rank, en.seq, en.collective) == (zh.rank, zh.seq, zh.collective)
    assert CJK.search(zh.message) and not CJK.search(en.message)
    assert not re.search(r"\b(?:never|skipped|called|waiting|left no dump|with sizes)\b", zh.message), zh.message
    assert analyze_dumps(dumps, missing, "en").message == en.message


def test_the_stored_verdict_reads_as_before_in_english() -> None:
    from course_lib.triage import analyze_dumps
    s = _stored()
    assert analyze_dumps(s["dumps"], s["missing"]).message == (
        "rank 1 skipped all_reduce 'step 3 grads' (seq 6), which 3 rank(s) wait in: it went on and is in "
        "all_gather 'step 3 loss' with sizes [[1]] torch.float32 (its seq 6)")
    with pytest.raises(ValueError, match="lang must be one of"):
        analyze_dumps(s["dumps"], s["missing"], "fr")
