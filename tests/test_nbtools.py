"""nbtools second-path: the kernel path make test re-runs the notebooks under differs from the machine's."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from course_lib.nbtools import second_kernel_path


@pytest.mark.parametrize("native, second", [("AVX512", "avx2"), ("AVX512_BF16", "avx2"), ("AVX2", "default"),
                                            ("ZVECTOR", "default"), ("SVE256", "default"), ("DEFAULT", None)])
def test_second_path_is_another_kernel_family(native, second):
    assert second_kernel_path(native) == second


def test_the_second_path_really_switches_torch_kernels():
    second = second_kernel_path()
    if second is None:
        pytest.skip("torch runs its default kernels on this CPU: there is no other path")
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = dict(os.environ, ATEN_CPU_CAPABILITY=second)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    native = subprocess.run([sys.executable, "-c", code], env={k: v for k, v in os.environ.items()
                                                               if k != "ATEN_CPU_CAPABILITY"},
                            capture_output=True, text=True, check=True)
    assert out.stdout.strip().lower() == second
    assert out.stdout.strip() != native.stdout.strip()


def test_notebooks_the_second_kernel_path_skips_check_no_float():
    """A notebook leaves the second pass only if no checked output holds a float a kernel could move:
    every decimal number in its compared outputs is a small fraction of counts (2.5, 1.667, 1.000)."""
    import json
    import re
    from fractions import Fraction
    from pathlib import Path

    from course_lib.nbtools import KERNEL_PATH_INDEPENDENT, second_pass_ignores
    root = Path(__file__).resolve().parents[1]
    assert second_pass_ignores() == [f"--ignore={p}" for p in KERNEL_PATH_INDEPENDENT]
    for path, reason in KERNEL_PATH_INDEPENDENT.items():
        assert (root / path).is_file() and len(reason) > 60, path
        for cell in json.loads((root / path).read_text())["cells"]:
            tags = cell.get("metadata", {}).get("tags", [])
            if cell["cell_type"] != "code" or {"nbval-ignore-output", "nbval-skip"} & set(tags):
                continue
            text = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                           for o in cell.get("outputs", []))
            for number in re.findall(r"(?<![\w.])\d+\.\d+(?:e[-+]?\d+)?", text):
                x = float(number)
                near = Fraction(x).limit_denominator(12)
                assert abs(float(near) - x) <= 5e-4 * max(1.0, x), (path, number)


def test_make_tests_plugin_gives_only_the_notebooks_kernels_the_second_path(tmp_path):
    """course_lib.nbtools_pytest, as `make test` loads it in one xdist session with the unit tests:
    a notebook's kernel computes on COURSE_NOTEBOOK_KERNEL_PATH (its stored output is that path's
    capability, so nbval passes only if the kernel really ran there), a unit test after it sees this
    machine's kernels, and without the variable the plugin changes nothing."""
    from pathlib import Path

    import nbformat

    from course_lib.nbtools_pytest import kernel_path_for
    root = Path(__file__).resolve().parents[1]
    assert kernel_path_for(root / "notebooks/05_pipeline_lab.ipynb", root, "avx2") == "avx2"
    assert kernel_path_for(root / "notebooks/12_failures_lab.ipynb", root, "avx2") is None   # independent
    assert kernel_path_for(root / "tests/test_layout.py", root, "avx2") is None
    assert kernel_path_for(root / "notebooks/05_pipeline_lab.ipynb", root, "") is None
    second = second_kernel_path()
    if second is None:
        pytest.skip("torch runs its default kernels on this CPU: there is no other path")
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    want = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, ATEN_CPU_CAPABILITY=second),
                          capture_output=True, text=True, check=True).stdout
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(code, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=want)]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "probe.ipynb")
    (tmp_path / "test_after.py").write_text(
        "import os, subprocess, sys\n"
        "def test_native():\n"
        "    assert 'ATEN_CPU_CAPABILITY' not in os.environ\n")
    # make test itself runs under the plugin: neither its variable nor the path may leak in here
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "COURSE_NOTEBOOK_KERNEL_PATH")}
    # the plugins as make test loads them (quick_imports from pyproject's addopts, which a run in
    # tmp_path does not read: without it nbval's jsonschema compiles an unused grammar, 1.4 s a run)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "course_lib.quick_imports",
            "-p", "course_lib.nbtools_pytest", "--nbval", "--nbval-current-env", "probe.ipynb", "test_after.py"]
    run = subprocess.run(args, cwd=tmp_path, env=dict(env, COURSE_NOTEBOOK_KERNEL_PATH=second),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:]
    off = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert off.returncode != 0 and "probe.ipynb" in off.stdout    # native kernels: the stored output differs
