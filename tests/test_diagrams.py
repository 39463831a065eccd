"""The concept diagrams (course_lib.diagrams) draw what the calculators compute: ownership from
memory's ZeRO stages, FSDP's bytes from comm, pipeline boxes from the simulator's events, the
mesh from layout's rank order, the all-to-all and the routing grids from the routers' choices,
the LSH bands from the pipeline's own signatures, PipelineRL's versions from the simulator's record,
the rollback from the cached guarded run, the goodput bar from faults. Cheap: no canvas is rendered
(a few seconds with the imports)."""
from __future__ import annotations

import math

import matplotlib
import numpy as np

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_lib import comm, diagrams, faults, flops, layout, memory, moe, numerics, pipeline  # noqa: E402
from course_lib.data import dedup  # noqa: E402
from course_lib.diagrams import sharding, tensor  # noqa: E402
from course_lib.flops import count as flop_count  # noqa: E402
from course_lib.tensor_context.context import chunk_ids  # noqa: E402

DRAWERS = ["zero_stages", "fsdp_unit", "pipeline_schedules", "tp_split", "cp_ring", "layout_mesh", "ep_all_to_all",
           "checkpoint_restart", "moe_routing", "lsh_banding",
           "pipeline_rl_inflight", "rollback_and_skip", "six_n", "float_formats"]


@pytest.fixture(scope="module")
def figures():
    figs = {name: getattr(diagrams, name)() for name in DRAWERS}
    yield figs
    for fig in figs.values():
        plt.close(fig)


@pytest.mark.parametrize("name", DRAWERS)
def test_each_diagram_reads_at_phone_width(figures, name):
    """6.4 in wide, not taller than wide by much, and no text under 8 pt."""
    fig = figures[name]
    w, h = fig.get_size_inches()
    assert w == pytest.approx(6.4) and h / w <= 1.1
    small = [t.get_text() for t in fig.findobj(matplotlib.text.Text)
             if t.get_text().strip() and t.get_fontsize() < 8]
    assert not small, f"{name}: text under 8 pt: {small[:5]}"


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_ownership_is_memory_s_breakdown(n, stage):
    own = sharding.zero_ownership(n, stage)
    per_rank = [sum(size / n * len(own[name][r]) for name, size in sharding.STATES) for r in range(n)]
    assert per_rank == pytest.approx([memory.zero_memory_per_gpu(1.0, n, stage)] * n)
    for name, _ in sharding.STATES:
        assert set().union(*map(set, own[name])) == set(range(n))      # every shard kept somewhere
    if stage == 3:    # ZeRO-3: rank r keeps exactly shard r, 1/n of every state
        assert all(own[name] == [[r] for r in range(n)] for name, _ in sharding.STATES)


def test_zero_diagram_fills_each_rank_s_bytes(figures):
    for stage, ax in enumerate(figures["zero_stages"].axes[:4]):
        filled: dict[float, float] = {}
        for patch in ax.patches:
            if patch.get_facecolor()[:3] != (1.0, 1.0, 1.0):
                filled[round(patch.get_y(), 6)] = filled.get(round(patch.get_y(), 6), 0.0) + patch.get_width()
        assert len(ax.patches) == 3 * 4 * 4 and len(filled) == 4
        assert list(filled.values()) == pytest.approx([memory.zero_memory_per_gpu(1.0, 4, stage)] * 4)


@pytest.mark.parametrize("units", [1, 3, 6])
def test_fsdp_events_send_what_comm_counts(units):
    ev = sharding.fsdp_events(units)
    n, psi = 4, 1.0
    kinds = [e.kind for e in ev]
    assert kinds.count("AG") == 2 * units and kinds.count("RS") == units
    sent = sum(comm.collective_bytes("all_gather" if e.kind == "AG" else "reduce_scatter", psi / units, n)
               for e in ev if e.stream == "comm")
    assert sent == pytest.approx(comm.fsdp_bytes_per_step(psi, n, bytes_per_value=1))
    for stream in ("comm", "compute"):        # one stream does one thing at a time
        spans = sorted((e.start, e.end) for e in ev if e.stream == stream)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(spans, spans[1:]))
    for e in ev:                              # a unit computes only after its own gather
        if e.kind in ("F", "B"):
            gathers = [g.end for g in ev if g.kind == "AG" and g.unit == e.unit and g.end <= e.start]
            assert len(gathers) == (1 if e.kind == "F" else 2)
    whole = sharding.whole_intervals(ev)
    ts = {t for _, a, _ in whole for t in (a,)}
    assert max(sum(a <= t < b for _, a, b in whole) for t in ts) <= 2    # at most two units whole


def test_pipeline_boxes_are_the_simulator_s_events(figures):
    axes = figures["pipeline_schedules"].axes
    sims = [pipeline.simulate("gpipe", 4, 8), pipeline.simulate("1f1b", 4, 8),
            pipeline.simulate("interleaved", 4, 8, v=2)]
    for ax, tl in zip(axes[:3], sims):
        drawn = sorted((round(float(v[:, 0].min()), 9), round(float(v[:, 0].max()), 9), round(float(v[:, 1].min() + v[:, 1].max()) / 2, 6))
                       for c in ax.collections for v in (p.vertices for p in c.get_paths()))
        want = sorted((round(e.start, 9), round(e.end, 9), float(tl.p - 1 - e.rank)) for e in tl.of(kinds=("F", "B")))
        assert drawn == want
    for tl in sims:
        assert max(diagrams.stash_curve(tl, 0)[1]) == pytest.approx(tl.peak_in_flight[0])


@pytest.mark.parametrize("p", [2, 4, 8])
def test_cp_work_is_the_split_s_causal_share(p):
    zig, con = tensor.cp_work(p, "zigzag"), tensor.cp_work(p, "contiguous")
    assert set(zig["work"].values()) == {2 * p + 1}                      # balanced (tensor_context.context)
    assert [con["work"][r] for r in range(p)] == [4 * (r + 1) for r in range(p)]
    for w, scheme in ((zig, "zigzag"), (con, "contiguous")):
        for r in range(p):
            ids = chunk_ids(r, p, scheme)
            rows = ids if scheme == "zigzag" else [2 * ids[0], 2 * ids[0] + 1]
            assert sorted(q for q, owner in w["owner"].items() if owner == r) == sorted(rows)
        needed = {(q, k) for q in range(2 * p) for k in range(q + 1)}
        assert needed <= set().union(*w["computed"].values())            # every causal block computed


def test_tp_split_shards_the_hidden_units():
    for t in (1, 2, 4, 8):
        plain, sp = tensor.tp_stages(t, False), tensor.tp_stages(t, True)
        assert [s[2] for s in plain].count("op") == 2 and plain[0][1] == "s × h"
        cols = {1: "4h", 2: "2h", 4: "h", 8: "h/2"}[t]
        assert plain[2][1].endswith(f"h × {cols}") and sp[4][1].startswith(f"B_{{r}}: {cols}")
        assert sp[0][1] == ("s × h" if t == 1 else f"s/{t} × h") and sp[0][2] == "seq"


@pytest.mark.parametrize("sizes", [(2, 2, 4, 2), (8, 1, 4, 2), (1, 2, 2, 8), (4, 4, 2, 2)])
@pytest.mark.parametrize("g", [4, 8])
def test_mesh_groups_follow_layout_s_rank_order(sizes, g):
    coords = diagrams.mesh_coords(*sizes)
    groups = diagrams.mesh_groups(*sizes)
    for d, name in enumerate(diagrams.DIMS):
        assert all(len(grp) == sizes[d] for grp in groups[name])
        assert sorted(r for grp in groups[name] for r in grp) == list(range(math.prod(sizes)))
        mine = next(grp for grp in groups[name] if 0 in grp)
        stride = math.prod(sizes[:d])
        assert mine == [i * stride for i in range(sizes[d])]             # TP fastest, then CP, PP, DP
        assert sum(r < g for r in mine) == layout._in_node(g, sizes, (d,))
    assert coords[1] == ((1, 0, 0, 0) if sizes[0] > 1 else coords[1])


def test_ep_counts_are_the_router_s_choices():
    ep, tokens, experts, k = 4, 64, 8, 2
    counts = diagrams.ep_send_counts(ep, tokens, experts, k, seed=0)
    assert all(sum(row) == tokens * k for row in counts)
    logits = torch.randn(ep, tokens, experts, generator=torch.Generator().manual_seed(0))
    top = logits.softmax(-1).topk(k, dim=-1).indices // (experts // ep)      # destination rank
    want = [[int((top[i] == j).sum()) for j in range(ep)] for i in range(ep)]
    assert counts == want
    balanced = comm.ep_bytes_per_layer(tokens, 1, k, ep, bytes_per_value=1) / 4
    assert balanced == pytest.approx(k * tokens * (ep - 1) / ep)


@pytest.mark.parametrize("save, restart, k", [(120.0, 600.0, 2), (10.0, 0.0, 0), (600.0, 60.0, 1)])
def test_checkpoint_timeline_is_the_goodput_model(save, restart, k):
    m = diagrams.llama3_job_mtbf()
    assert m == faults.cluster_mtbf(m * faults.LLAMA3["n_gpus"], faults.LLAMA3["n_gpus"])
    tau = faults.optimal_checkpoint_interval(save, m)
    segs = diagrams.checkpoint_timeline(tau, save, restart, m, failed_period=k)
    assert segs[0].start == 0 and segs[-1].end == pytest.approx(m)
    assert all(a.end == pytest.approx(b.start) for a, b in zip(segs, segs[1:]))      # no gap, no overlap
    lost = [s for s in segs if s.kind == "lost"]
    assert sum(s.end - s.start for s in lost) == pytest.approx(faults.expected_lost_seconds(tau, save))
    assert lost[0].start == pytest.approx(k * (tau + save))                          # since the last checkpoint
    (r,) = [s for s in segs if s.kind == "restart"]
    assert r.end - r.start == pytest.approx(restart) and r.kept_start == pytest.approx(k * tau)
    assert all(s.end - s.start <= (tau if s.kind == "train" else save) + 1e-9 for s in segs if s.kind in ("train", "save"))
    shares = diagrams.goodput_shares(tau, save, restart, m)
    assert shares["train"] == faults.goodput(tau, save, restart, m) and sum(shares.values()) == pytest.approx(1)
    assert shares["lost"] == pytest.approx(faults.expected_lost_seconds(tau, save) / m)


def test_checkpoint_bar_is_goodput_shares(figures):
    bar = figures["checkpoint_restart"].axes[2]
    m = diagrams.llama3_job_mtbf()
    shares = diagrams.goodput_shares(faults.optimal_checkpoint_interval(120.0, m), 120.0, 600.0, m)
    assert [p.get_width() for p in bar.patches] == pytest.approx(list(shares.values()))


@pytest.mark.parametrize("seed", [0, 2, 5])
def test_routing_example_is_the_routers_decisions(seed):
    ex = diagrams.routing_example(seed=seed)
    logits, after = torch.tensor([ex["logits"]]), torch.tensor([ex["logits_after"]])
    tc = moe.token_choice(logits, top_k=2, capacity_factor=1.0)
    assert ex["kept"] == tc.kept[0].tolist() and ex["assigned"] == tc.assigned[0].tolist()
    assert ex["capacity"] == moe.expert_capacity(8, 4, 1.0, 2)
    assert ex["dropped"] == moe.dropped_tokens(tc.assigned[0].sum(0).tolist(), ex["capacity"]) > 0
    assert ex["ec_before"] == moe.expert_choice(logits, 1.0, 2).kept[0].tolist()
    assert ex["ec_after"] == moe.expert_choice(after, 1.0, 2).kept[0].tolist()
    assert torch.equal(logits[0, :-1], after[0, :-1])                    # only the last token changed
    assert ex["changed"] and all(i < 7 for i in ex["changed"])         # ... and an earlier one moved
    assert ex["tc_after_kept"][:-1] == ex["kept"][:-1]                   # token choice, first come: causal


def test_banded_pairs_are_the_pipeline_s_lsh():
    from course_lib.data import crawl, parallel
    b, r, num_perm, k = diagrams.pipeline_banding()
    defaults = parallel.run_pipeline.__kwdefaults__                              # what stage 2 runs with
    assert (b, r, num_perm, k) == (defaults["bands"], defaults["rows"], defaults["num_perm"], defaults["k"])
    a, c = diagrams.banded_pairs()
    pairs = crawl.edited_pairs(24, max_rate=0.3, seed=0)
    for pair, target in ((a, 0.9), (c, 0.6)):
        doc, copy = pairs[pair["index"]]
        sa, sc = dedup.signature(doc, k, num_perm), dedup.signature(copy, k, num_perm)
        assert pair["agree"].shape == (b, r) and pair["agree"].mean() == pytest.approx(
            float((sa[:b * r] == sc[:b * r]).mean()))
        assert pair["candidate"] == dedup.band_collision(sa, sc, b, r) == bool(pair["hits"])
        assert pair["p_candidate"] == dedup.s_curve(pair["jaccard"], b, r)
        assert abs(pair["jaccard"] - target) < 0.05
    assert a["candidate"] and not c["candidate"] and a["jaccard"] > dedup.lsh_threshold(b, r) > c["jaccard"]


@pytest.mark.parametrize("batch, max_lag", [(8, 4), (16, None)])
def test_inflight_sequences_are_the_simulator_s_lags(batch, max_lag):
    from course_lib.rl import simulate as sim
    from course_lib.rl.task import LengthDist
    args = ("pipeline", LengthDist.lab(), 2, 4, batch, 12, 1.3e-3, 9e-3, 0.5e-3, 0.2e-3)
    tr = sim.simulate(*args, max_lag=max_lag, record=True)
    plain = sim.simulate(*args, max_lag=max_lag)                    # recording changes nothing
    assert np.array_equal(tr.lag_tokens, plain.lag_tokens) and np.array_equal(tr.seq_lag, plain.seq_lag)
    seqs = diagrams.inflight_sequences(tr)
    assert [len(s["spans"]) for s in seqs] == tr.seq_versions.tolist()
    lag_tokens = np.zeros_like(tr.lag_tokens)
    cs, cv = tr.stats["versions"]
    for s in seqs:
        assert s["spans"][0][1] == s["start"] and s["spans"][-1][2] == s["end"]
        assert all(a[2] == b[1] and b[1] in cs for a, b in zip(s["spans"], s["spans"][1:]))   # cut at a swap
        for version, a, b, lag in s["spans"]:
            assert lag == s["trained_by"] - version >= 0
            lag_tokens[lag] += b - a
    assert np.array_equal(lag_tokens, tr.lag_tokens)                  # every trained token, its lag
    by_slot: dict[int, list] = {}
    for s in seqs:
        by_slot.setdefault(s["slot"], []).append((s["start"], s["end"]))
    for spans in by_slot.values():                                    # a slot writes one sequence at a time
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_rollback_trace_is_what_the_guarded_run_did():
    from course_lib.stability import ablation, spikes
    tr = diagrams.rollback_trace()
    k, plan = tr["spike"], tr["plan"]
    assert tr["guard"] == spikes.GuardConfig()                                   # the chapter's settings
    assert (tr["steps"][k + 1], tr["positions"][k + 1]) == (plan.restore_step, plan.resume_position)
    first = tr["steps"].index(plan.restore_step)
    assert [i for i, a in enumerate(tr["abandoned"][:k + 1]) if a] == list(range(first, k + 1))
    assert plan.restore_position <= ablation.CORRUPT[0] and plan.resume_position >= ablation.CORRUPT[1]
    events = ablation.load()["guarded"]["events"]
    assert any(f"ROLLBACK to step {plan.restore_step}," in e and f"({plan.skipped_batches} batches)" in e for e in events)
    assert all(s % tr["guard"].ckpt_every == 0 for _, s, _ in tr["checkpoints"])


@pytest.mark.parametrize("t, a, b", [(4, 3, 5), (1, 7, 2), (16, 8, 32)])
def test_linear_gemms_are_6n_and_what_pytorch_counts(t, a, b):
    from torch.utils.flop_counter import FlopCounterMode
    g = diagrams.linear_gemms(t, a, b)
    for x in g:                                   # (m×k)·(k×n) = (m×n), 2·m·k·n FLOPs
        assert x.left[2] == x.right[1] and x.out[1:] == (x.left[1], x.right[2])
        assert x.flops == 2 * x.left[1] * x.left[2] * x.right[2] == 2 * t * a * b
    assert sum(x.flops for x in g) == flops.training_flops(a * b, t)
    assert g[0].flops == flop_count.theory_flops(a * b, 1, 1, 1, t).dense
    assert sum(x.flops for x in g) == flop_count.theory_flops(a * b, 1, 1, 1, t, backward=True).dense
    assert [x.out[1:] for x in g] == [(t, b), (t, a), (a, b)]   # Y, dX like X, dW like W
    layer = torch.nn.Linear(a, b, bias=False)
    x = torch.randn(t, a, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        layer(x).sum().backward()
    assert counter.get_total_flops() == sum(x.flops for x in g)     # PyTorch runs the same three


def test_token_flops_are_the_chapter_s_counts(figures):
    tf = diagrams.token_flops(32, 4096, 4096, 7e9)
    th = flop_count.theory_flops(7e9, 32, 4096, 4096, 1, backward=True, causal=True)
    assert tf["forward"] + tf["backward, input"] + tf["backward, weight"] == pytest.approx(th.dense)
    assert tf["attention forward"] + tf["attention backward"] == pytest.approx(th.attention)
    assert tf["attention forward"] / tf["forward"] == pytest.approx(flops.attention_fraction(32, 4096, 4096, 7e9))
    bars = figures["six_n"].axes[1].patches
    assert [p.get_width() * 1e9 for p in bars] == pytest.approx(list(tf.values()))


def test_format_layouts_are_torch_s_formats(figures):
    rows = diagrams.format_layouts()
    assert [r["name"] for r in rows] == list(numerics.FORMATS)
    for r in rows:
        fi = torch.finfo(numerics.resolve_dtype(r["name"]))
        assert r["sign"] + r["exponent"] + r["mantissa"] == r["bits"] == fi.bits
        assert (r["eps"], r["max"], r["smallest_normal"]) == (fi.eps, fi.max, fi.smallest_normal)
        assert r["eps"] == 2.0 ** -r["mantissa"] == numerics.ulp(1.0, r["name"])      # the spacing at 1
        bias = 2 ** (r["exponent"] - 1) - 1
        assert r["smallest_normal"] == 2.0 ** (1 - bias)                                # the exponent's floor
        assert r["smallest_subnormal"] == numerics.ulp(0.0, r["name"])
        assert 2.0 ** (r["binades"] - 1) * r["smallest_normal"] <= r["max"] < 2.0 ** r["binades"] * r["smallest_normal"]
    bits = figures["float_formats"].axes[0].patches
    assert len(bits) == sum(r["bits"] for r in rows)                                  # one box per bit


def test_the_book_s_text_alternatives_quote_the_diagrams_numbers():
    """The alt texts are typed in the page's cell metadata: the numbers they quote must be the drawn ones."""
    from pathlib import Path
    book = Path(__file__).resolve().parents[1] / "book"
    ch1 = (book / "01_flops.md").read_text(encoding="utf-8")
    g = diagrams.linear_gemms(4, 3, 5)
    tf = diagrams.token_flops(32, 4096, 4096, 7e9)
    for said in (f"each {g[0].flops} FLOP", f"{sum(x.flops for x in g)} in all",
                 f"{(tf['attention forward'] + tf['attention backward']) / 1e9:.1f} GFLOP",
                 f"{flops.training_flops(7e9, 1) / 1e9:.0f} GFLOP",
                 f"{flops.attention_fraction(32, 4096, 4096, 7e9):.1%}".replace("%", " percent")):
        assert said in ch1, said
    ch7 = (book / "07_fp16.md").read_text(encoding="utf-8")
    from course_lib.diagrams import formats
    for r in diagrams.format_layouts():
        label = formats._LABEL[r["name"]]
        for said in (f"{label}: 1 + {r['exponent']} + {r['mantissa']} bits, eps 2^-{r['mantissa']}",
                     f"{label} from 2^{round(math.log2(r['smallest_normal']))} to {formats._num(r['max'])}"):
            assert said in ch7, said
    ch14 = (book / "14_expert_parallel.md").read_text(encoding="utf-8")
    counts = diagrams.ep_send_counts(4, 64, 8, 2, seed=0)
    off = ", ".join(str(sum(row) - row[i]) for i, row in enumerate(counts))
    assert off.rsplit(", ", 1)[0] + " and " + off.rsplit(", ", 1)[1] in ch14
    ch5 = (book / "05_pipeline.md").read_text(encoding="utf-8")
    for name, v, peak in (("gpipe", 1, 8), ("1f1b", 1, 4), ("interleaved", 2, 5.5)):
        tl = pipeline.simulate(name, 4, 8, v=v)
        assert tl.peak_in_flight[0] == peak and f"bubble {tl.bubble_fraction():.0%}".replace("%", " percent") in ch5
    ch11 = (book / "11_tensor_context.md").read_text(encoding="utf-8")
    groups = diagrams.mesh_groups(2, 2, 4, 2)
    for name in diagrams.DIMS:
        mine = next(g for g in groups[name] if 0 in g)
        said = ", ".join(map(str, mine[:-1])) + " and " + str(mine[-1])     # "0, 4, 8 and 12"
        assert f"ranks {said}" in ch11, said
    ch8 = (book / "08_moe.md").read_text(encoding="utf-8")
    ex = diagrams.routing_example(seed=2)
    moved = [(i, x) for i in ex["changed"] for x in range(4) if ex["ec_before"][i][x] != ex["ec_after"][i][x]]
    dropped_at = sorted({i for i in range(8) for x in range(4) if ex["assigned"][i][x] and not ex["kept"][i][x]})
    assert moved == [(4, 2)] and dropped_at == [6, 7] and all(ex["ec_after"][7]) and not any(ex["kept"][7])
    for said in (f"capacity {ex['capacity']}", f"{ex['dropped']} pairs are dropped", "at tokens 6 and 7",
                 f"exactly {ex['ec_capacity']} tokens", "token 4 has lost its place in expert 2"):
        assert said in ch8, said
    ch3 = (book / "03_data.md").read_text(encoding="utf-8")
    b, r, _, _ = diagrams.pipeline_banding()
    a, c = diagrams.banded_pairs()
    hits = [str(h + 1) for h in a["hits"]]
    for said in (f"{b} bands by {r} rows", f"J = {a['jaccard']:.2f}", f"J = {c['jaccard']:.2f}",
                 f"bands {', '.join(hits[:-1])} and {hits[-1]} agree on all {r} rows",
                 f"J* ≈ {dedup.lsh_threshold(b, r):.2f}", f"pair B at {c['p_candidate']:.2f}"):
        assert said in ch3, said
    ch10 = (book / "10_pipeline_rl.md").read_text(encoding="utf-8")
    from course_lib.rl.task import LengthDist
    run = diagrams.inflight_run(2, 4, 8, 6, LengthDist.lab(), t_decode=1.3e-3, t_train=9e-3, t_publish=0.5e-3,
                                t_swap=0.2e-3)
    cs, cv = run["trace"].stats["versions"]
    shown = [v for c, v in zip(cs, cv) if 0 < c < run["x_max"]]
    top = max(lag for s in run["sequences"] for *_, lag in s["spans"])
    lo = run["longest"]
    versions = [v for v, *_ in lo["spans"]]
    for said in (f"over {run['x_max']} decode steps", f"versions {shown[0]} to {shown[-1]} arrive", f"(lag {top})",
                 f"Actor {lo['slot'] // 4}, slot {lo['slot'] % 4} writes one answer from step {lo['start']} to step "
                 f"{lo['end']} under {len(versions)} versions, {versions[0]} to {versions[-1]}",
                 f"on average {run['trace'].mean_lag():.2f} versions old"):
        assert said in ch10, said
    ch6 = (book / "06_stability.md").read_text(encoding="utf-8")
    tr = diagrams.rollback_trace()
    k, plan = tr["spike"], tr["plan"]
    for said in (f"from {k - 22} to {min(len(tr['steps']), k + 40) - 1}", f"jumps at step {tr['steps'][k]}",
                 f"the {sum(tr['abandoned'][:k + 1])} steps", f"every {tr['guard'].ckpt_every} steps",
                 f"falls back to {plan.restore_step}", f"rising with it to {tr['positions'][k]}, then jumping to "
                 f"{plan.resume_position}", f"skipped positions {plan.restore_position} to {plan.resume_position - 1}",
                 f"corrupted positions {tr['corrupt'][0]} to {tr['corrupt'][1] - 1}"):
        assert said in ch6, said
    ch12 = (book / "12_failures.md").read_text(encoding="utf-8")
    m = diagrams.llama3_job_mtbf()
    tau = faults.optimal_checkpoint_interval(120.0, m)
    for said in (f"{m / 3600:.1f} hours", f"{tau / 60:.0f} minutes", f"{faults.expected_lost_seconds(tau, 120.0) / 60:.0f} "
                 f"minutes of cross-hatched", f"goodput {faults.goodput(tau, 120.0, 600.0, m):.1%}".replace("%", " percent")):
        assert said in ch12, said
