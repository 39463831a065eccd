"""Chapter 13's live planner (book/_static/calculators_plan.js) without a browser or a book build.

What the page takes from course_lib.site_data must be what course_lib uses, including the
layout search's interleave choices and bound on n_layers, checked here by asking course_lib.layout's
search itself. Where Node.js is installed, the port also runs outside a browser against
``course_lib.plan.plan`` on a grid, the bad inputs and the extremes of tests/test_site_calculators.py
(Chromium drives all of them on the built page there; this is a quick sample while editing).
"""
from __future__ import annotations

import inspect
import itertools
import json
import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from test_site_calculators import BAD, EXTREME, EXTREME_OK, GRIDS, PLAN_SCRIPT, SCRIPT, _python

from course_lib import hardware, network
from course_lib.layout import job as layout_job
from course_lib.layout import search as layout_search
from course_lib.layout import stepmodel
from course_lib.plan import planner
from course_lib.site_data import calculator_data, calculator_data_js

DATA = calculator_data()["plan"]

# Loads the two scripts in a bare context (no DOM: the form is never built) and runs the plan
# calculator on each case of a JSON list, the way the page's form does.
DRIVER = """
const fs = require('fs'), vm = require('vm');
const [data, calc, plan, casesFile] = process.argv.slice(2);
const ctx = {document: {readyState: 'complete', querySelectorAll: () => []}};
ctx.window = ctx;
vm.createContext(ctx);
for (const f of [data, calc, plan]) vm.runInContext(fs.readFileSync(f, 'utf8'), ctx, {filename: f});
const C = ctx.COURSE_CALC, spec = C.calculators.plan;
const defaults = Object.fromEntries(spec.fields().map(f => [f.name, f.value]));
const results = JSON.parse(fs.readFileSync(casesFile, 'utf8')).map(c => {
  const texts = Object.assign({}, defaults, c), v = {};
  for (const f of spec.fields()) v[f.name] = f.options ? texts[f.name] : C.lib.parseField(texts[f.name]);
  try {
    return {values: texts, out: Object.fromEntries(spec.run(v).map(r => [r[0], String(r[2])])), error: ''};
  } catch (e) {
    if (!(e instanceof C.lib.CalcError)) throw e;
    return {values: texts, out: {}, error: e.message};
  }
});
process.stdout.write(JSON.stringify(results));
"""


def test_site_data_is_the_planners() -> None:
    assert DATA["writer_bandwidth"] == planner._WRITER_BW and DATA["head_dim"] == planner._HEAD_DIM
    for name, acc in hardware.ACCELERATORS.items():    # chapter 12's inputs follow the generation
        hw = DATA["hardware"][name]
        assert (hw["storage_bytes_per_s"], hw["restart_seconds"]) == (acc.storage_bytes_per_s, acc.restart_seconds)
    assert DATA["checkpoint_bytes_per_param"] == planner._CKPT_BYTES_PER_PARAM
    assert DATA["hardware"]["H200"] == {"hbm_bytes": 141e9, "link_bandwidth": 450e9, "nic_bits_per_s": 400e9,
                                        "dtype": "bf16", "hbm_bandwidth": 4.8e12,
                                        "storage_bytes_per_s": 2e12, "restart_seconds": 600.0,
                                        "matmul_ceiling": stepmodel.MATMUL_CEILING["H200"][0],
                                        "attention_ceiling": stepmodel._attention_ceiling("H200"),
                                        "processors": [132, 256, 128]}
    assert DATA["stepmodel"]["sustained"] == stepmodel.SUSTAINED
    # the NIC follows the generation (HDR for A100), V100 trains in FP16
    assert DATA["hardware"]["A100"]["nic_bits_per_s"] == 200e9 and DATA["hardware"]["V100"]["dtype"] == "fp16"
    assert set(DATA["hardware"]) == set(hardware.ACCELERATORS)
    assert DATA["pow2"] == list(layout_job._POW2)
    defaults = inspect.signature(planner.plan).parameters
    for name, text in DATA["plan_defaults"].items():    # the repr keeps an int an int
        assert repr(defaults[name].default) == text, name
    assert float(DATA["plan_defaults"]["gpu_mtbf_seconds"]) == planner.LLAMA3_GPU_MTBF_S
    assert DATA["plan_defaults"]["price_per_gpu_hour"] == repr(planner.DEFAULT_PRICE_PER_GPU_HOUR)
    assert DATA["network_latency"]["inter_latency"] == network.DGX_H100_NDR.inter_latency
    assert DATA["bytes_per_token"] == 4    # Llama 3's 128,256-entry vocabulary needs uint32 ids


def _job(**kw):
    args = dict(n_params=1e9, n_layers=64, d_model=2048, n_heads=16, seq_len=1024, global_batch_tokens=2 ** 20,
                n_gpus=64, gpu="H100", network=network.DGX_H100_NDR, compute_mfu=None, usable_fraction=0.9,
                flash_attention=True, kv_heads=None, micro_batch=1, max_cp=128, max_zero=3)
    return layout_job._job(**dict(args, **kw))


def test_inline_layout_figures_match_layout_py() -> None:
    """The interleave choices and the n_layers bound the page gets are the ones the search uses."""
    seen = {c[4] for c in layout_search._candidates(_job(), ("none",))}   # L = 64 and m = 64: every v allowed
    assert sorted(seen) == DATA["interleave"]
    _job(n_layers=DATA["max_layers"])
    with pytest.raises(ValueError, match=f"n_layers must be <= {DATA['max_layers']}"):
        _job(n_layers=DATA["max_layers"] + 1)


NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="Node.js not installed (the Chromium site test covers the port)")
def test_port_agrees_with_plan_outside_a_browser(tmp_path: Path) -> None:
    grid = GRIDS["plan"]
    cases = random.Random(1).sample([dict(zip(grid, v)) for v in itertools.product(*grid.values())], 12)
    # a sample: the site test types every bad input into every field
    cases += [{f: bad} for f in ("n_gpus", "mfu") for bad in BAD] + EXTREME["plan"] + EXTREME_OK["plan"]
    (tmp_path / "data.js").write_text(calculator_data_js(), encoding="utf-8")
    (tmp_path / "driver.js").write_text(DRIVER, encoding="utf-8")
    (tmp_path / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    run = subprocess.run([NODE, str(tmp_path / "driver.js"), str(tmp_path / "data.js"), str(SCRIPT), str(PLAN_SCRIPT),
                          str(tmp_path / "cases.json")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    messages = []
    for got in json.loads(run.stdout):
        want, message = _python("plan", got["values"])
        where = f"plan with {got['values']}"
        if want is None:
            messages.append(message)
            assert got["error"] == message, f"{where}: JS {got['error']!r}, Python {message!r}"
            continue
        assert not got["error"], f"{where}: JS says {got['error']!r}"
        for key, value in want.items():
            js = got["out"][key]
            assert js == value if isinstance(value, str) else math.isclose(float(js), value, rel_tol=1e-9), \
                f"{where}: {key} {js!r} != {value!r}"
    assert 0 < len(messages) < len(cases)
    assert any("has no FP8 tensor cores" in m for m in messages)      # the FP8 refusal, word for word (#45)
    for impossible in ("the plan does not fit", "batch below the floor", "no training progresses"):
        assert any(impossible in m for m in messages), impossible
