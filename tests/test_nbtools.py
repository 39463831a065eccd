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
