"""make bench: a notebook that fails is reported, and the notebooks after it are still timed."""
from __future__ import annotations

import nbformat

from course_lib import bench


def _notebook(path, source: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, path)


def test_a_failing_notebook_is_reported_and_the_rest_still_run(tmp_path, capsys):
    bad, good = tmp_path / "a_bad.ipynb", tmp_path / "b_good.ipynb"
    _notebook(bad, "raise ZeroDivisionError('on purpose')")
    _notebook(good, "x = 1 + 1")
    times, failed = bench.time_notebooks([bad, good])
    assert failed == ["a_bad.ipynb"]
    assert times["a_bad.ipynb"] == {"failed": "ZeroDivisionError: on purpose"}
    assert isinstance(times["b_good.ipynb"], float)
    out = capsys.readouterr().out
    assert "a_bad.ipynb" in out and "FAILED" in out and "b_good.ipynb" in out


def test_grading_a_class_is_timed(monkeypatch):
    """make bench's grading part, on a class of two (the 30-submission run is make bench's own)."""
    import shutil
    from pathlib import Path

    import pytest

    from course_lib.grading.runner import Options
    if shutil.which("bwrap") is None:
        pytest.skip("the grader needs bubblewrap")
    fix = Path(__file__).parent / "fixtures" / "grading"
    monkeypatch.syspath_prepend(str(fix))
    got = bench.time_grading(2, master=fix / "solutions" / "fx_grading.ipynb",
                             exercise=fix / "exercises" / "fx_grading.ipynb", filename="fx_grading.ipynb",
                             opts=Options(seed=1, chapter="fx_grading", bank="grading_fixture_bank", jobs=2))
    assert (got["submissions"], got["jobs"], got["full_marks"], got["zero"], got["exit"]) == (2, 2, 1, 1, 1)
    assert got["seconds"] > 0 and 0 < got["seconds_per_submission"] <= got["seconds"]


def test_lab_times_are_kept_for_the_course_map(tmp_path):
    """make bench keeps the labs' times (not the solutions', not a failed lab's) for the landing
    page, merged into the earlier ones, with the machine and the date."""
    import json
    path = tmp_path / "lab_times.json"
    path.write_text(json.dumps({"seconds": {"01_flops_lab": 30.0, "02_scaling_lab": 50.0}}))
    data = bench.write_lab_times({"notebooks/01_flops_lab.ipynb": 41.2, "solutions/01_flops.ipynb": 9.0,
                                  "notebooks/03_data_lab.ipynb": {"failed": "boom"}}, path)
    assert data == json.loads(path.read_text())
    assert data["seconds"] == {"01_flops_lab": 41.2, "02_scaling_lab": 50.0}
    assert "CPU cores" in data["machine"] and data["date"][:2] == "20" and "make bench" in data["produced_by"]
    assert bench.write_lab_times({"solutions/01_flops.ipynb": 9.0}, tmp_path / "none.json") is None


def test_the_committed_lab_times_cover_every_lab():
    """data/lab_times.json (which the course map reads) has a measured time for every lab."""
    import json
    data = json.loads(bench.LAB_TIMES.read_text(encoding="utf-8"))
    labs = sorted(p.stem for p in (bench.ROOT / "notebooks").glob("*_lab.ipynb"))
    assert sorted(data["seconds"]) == labs
    assert all(0 < s < 600 for s in data["seconds"].values()), data["seconds"]
