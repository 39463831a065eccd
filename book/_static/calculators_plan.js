/* The capstone planner, live on chapter 13's page: course_lib.plan.plan ported line for line.
 *
 * planner.py's stages (size, layout, MFU, days and cost, checkpoints and goodput, loader) and
 * layout.py's search (every TP·CP·PP·DP, interleave, ZeRO stage and recomputation the batch allows,
 * its memory fit, its step-time model, the stable sort by step time) run here in the same order,
 * so the same inputs give the same numbers and the same ValueError text, impossible plans included.
 * Each course_lib function decorated with @calculator keeps its own overflow check here, under its
 * own argument names. Constants come from window.COURSE_CALC_DATA.plan (course_lib/site_data.py);
 * the input checks and the form from calculators.js (window.COURSE_CALC).
 */
(function () {
  "use strict";
  var C = window.COURSE_CALC, D = window.COURSE_CALC_DATA;
  if (!C || !D) return;
  var L = C.lib, P = D.plan, fail = L.fail;

  // ------------------------------------------------------------ Python's numbers and formats
  function F(x) { return {isNum: true, isInt: false, num: x, repr: L.pyFloatRepr(x)}; }   // a float
  function I(x) { return {isNum: true, isInt: true, num: x, repr: L.intRepr(x)}; }        // an int
  function defaults(table) {    // {name: repr} from site_data -> {name: field}
    var out = {};
    Object.keys(table).forEach(function (k) { out[k] = L.parseField(table[k]); });
    return out;
  }
  var PLAN = defaults(P.plan_defaults), LAYOUT = defaults(P.layout_defaults);

  function toFloat(x) {    // float(an int): Python raises where a double cannot hold it
    if (!isFinite(x)) throw new L.Overflow("int too large to convert to float");
    return x;
  }
  function toInt(x) {    // int(a float)
    if (!isFinite(x)) throw new L.Overflow("cannot convert float infinity to integer");
    return Math.trunc(x);
  }
  function pyRound(x) {    // round(x): half to even; round(inf) raises as int(inf) does
    toInt(x);
    var f = Math.floor(x), d = x - f;
    return d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
  }
  function floorDiv(vx, wx) {    // float // float, as CPython computes it (floatobject.c)
    var mod = vx % wx, q = (vx - mod) / wx;
    if (mod && ((wx < 0) !== (mod < 0))) q -= 1.0;
    if (!q) return 0;
    var f = Math.floor(q);
    return q - f > 0.5 ? f + 1.0 : f;
  }
  function ties(s, at) { return s[at] === "5" && /^0*$/.test(s.slice(at + 1)); }
  function pyFixed(x, f) {    // f"{x:.{f}f}" for x >= 0: ties to even on the exact binary value
    if (x >= D.max_int) return L.intRepr(x) + (f ? "." + "0".repeat(f) : "");
    var long = x.toFixed(f + 25), cut = long.length - 25;
    if (!ties(long, cut)) return x.toFixed(f);
    var kept = long.slice(0, cut), last = kept.replace(".", "").slice(-1);
    kept = kept.replace(/\.$/, "");
    return Number(last) % 2 === 0 ? kept : x.toFixed(f);
  }
  function pyG(x) {    // f"{x:g}" for x > 0: 6 significant digits, ties to even
    var m = /^(\d)\.(\d+)e([+-]\d+)$/.exec(x.toExponential(30)), digits, e;
    if (ties(m[1] + m[2], 6) && Number(m[2][4]) % 2 === 0) {
      digits = m[1] + m[2].slice(0, 5);
      e = Number(m[3]);
    } else {
      var r = /^(\d)\.(\d+)e([+-]\d+)$/.exec(x.toExponential(5));
      digits = r[1] + r[2];
      e = Number(r[3]);
    }
    if (e >= -4 && e < 6) {
      var s = e >= 0 ? digits.slice(0, e + 1) + "." + digits.slice(e + 1) : "0." + "0".repeat(-e - 1) + digits;
      return s.indexOf(".") < 0 ? s : s.replace(/0+$/, "").replace(/\.$/, "");
    }
    var mant = (digits[0] + "." + digits.slice(1)).replace(/0+$/, "").replace(/\.$/, "");
    return mant + "e" + (e < 0 ? "-" : "+") + (Math.abs(e) < 10 ? "0" : "") + Math.abs(e);
  }

  /* A course_lib @calculator: run ``body``; its numbers must be finite, else the message names
   * the most extreme of ``args`` (calculators.js's calculator does the naming). */
  function checked(args, body) {
    var result;
    L.calculator(args, function () {
      result = body();
      return result.numbers;
    });
    return result;
  }

  // ------------------------------------------------------------ layout.py
  function ring(kind, size, n) { return (kind === "all_reduce" ? 2.0 : 1.0) * (n - 1) / n * size; }   // comm._ring

  function inNode(g, sizes, dims) {
    var k = 1, stride = 1;
    sizes.forEach(function (size, i) {
      if (dims.indexOf(i) >= 0) k *= Math.min(size, Math.max(1, Math.floor(g / stride)));
      stride *= size;
    });
    return k;
  }

  function bandwidth(job, sizes, dims, p2p) {
    var k = inNode(job.g, sizes, dims), all = 1;
    dims.forEach(function (i) { all *= sizes[i]; });
    if (k === all) return [job.link, k];
    return [Math.min(job.link, (p2p ? 1 : k) * job.ringBw / job.g), k];
  }

  function latency(job, kind, n, k) {
    if (n === 1) return 0.0;
    var nodes = (n - n % k) / k + (n % k ? 1 : 0), net = P.network_latency, total, inter;
    if (kind === "all_reduce") { total = 2 * (n - 1); inter = nodes > 1 ? 2 * nodes : 0; }
    else { total = n - 1; inter = nodes - 1; }
    return net.base_latency + (total - inter) * net.intra_latency + inter * net.inter_latency;
  }

  function inFlight(p, m, v) { return v > 1 ? Math.min(p * (1 + (p - 1) / (p * v)), m) : Math.min(p, m); }

  function activation(s, b, h, a, t, sp, mode) {    // memory._activation_bytes
    var sbh = s * b * h, tSp = sp ? t : 1;
    if (mode === "full") return 2.0 * sbh / tSp;
    var linear = sbh * (10.0 / tSp + 24.0 / t);
    return mode === "selective" ? linear : linear + 5.0 * a * s * s * b / t;
  }

  function states(psi, n, zero) {    // memory._breakdown(psi, n, zero, 2, 2, 12).total
    return 2.0 * psi / (zero >= 3 ? n : 1) + 2.0 * psi / (zero >= 2 ? n : 1) + 12.0 * psi / (zero >= 1 ? n : 1);
  }

  // ------------------------------------------------------------ stepmodel.py
  var SM = P.stepmodel;
  function gemmSeconds(m, n, k, hw, peak, bpv, outBytes) {    // bpv: bytes a value (2); outBytes: an FP8 GEMM's BF16 output
    if (bpv === undefined) bpv = 2.0;
    if (Math.min(m, n, k) <= 0) return 0.0;
    var units = hw.processors[0];
    var tm = Math.min(hw.processors[1], Math.max(64.0, Math.pow(2.0, Math.ceil(Math.log2(m)))));
    var tn = Math.min(hw.processors[2], Math.max(64.0, Math.pow(2.0, Math.ceil(Math.log2(n)))));
    var tiles = Math.ceil(m / tm) * Math.ceil(n / tn);
    var split = Math.max(1, Math.min(Math.floor(units / tiles), Math.trunc(Math.floor(k / 512))));
    var useful = (m * n) / (tm * tn) * split, busy = Math.ceil(tiles * split / units) * units;
    var compute = 2.0 * m * n * k / (peak * SM.sustained * hw.matmul_ceiling * (useful / busy));
    var memory = outBytes === undefined ? bpv * (m * k + k * n + m * n) / hw.hbm_bandwidth
      : (bpv * (m * k + k * n) + outBytes * m * n) / hw.hbm_bandwidth;
    return Math.max(compute, memory);
  }

  /* stepmodel.linear_seconds: [GEMM seconds, cast seconds]; in FP8 (p8 > 0) 1-byte inputs, a BF16
   * output at the FP8 peak, after casting both inputs (QUANTIZE_BYTES_PER_ELEMENT over HBM). */
  function linearSeconds(m, n, k, hw, peak, p8) {
    if (!p8) return [gemmSeconds(m, n, k, hw, peak), 0.0];
    if (Math.min(m, n, k) <= 0) return [0.0, 0.0];
    return [gemmSeconds(m, n, k, hw, p8, 1.0, 2.0), SM.quantize_bytes * (m * k + k * n) / hw.hbm_bandwidth];
  }

  function attentionEfficiency(hw, block, backward) {
    var e = SM.sustained * hw.attention_ceiling * block / (block + SM.fa_l0);
    return backward ? e * SM.fa_bwd : e;
  }

  /* stepmodel.layer_time on layout._parts's shape (causal); under precision="fp8" (job.p8 > 0) the
   * block's GEMMs in FP8 with their casts (quantize) and the layer's share of the embedding and
   * output head, 2·V·h/L, timed apart in BF16 (layout._fp8_args). */
  function parts(job, tp, cp, t, sp) {
    var h = job.h, hw = job.hw, peak = job.peak, p8 = job.p8;
    var attnParams = 2.0 * h * h + 2.0 * h * job.kv;
    var mlp = Math.max(job.psi / job.L - attnParams, h * h);
    var bf = p8 ? Math.min(2.0 * job.vocab * h / job.L, Math.max(mlp - h * h, 0.0)) : 0.0;
    var ffn = (mlp - bf) / (3.0 * h);
    var shapes = [[t, (h + 2 * job.kv) / tp, h], [t, h, h / tp], [t, 2 * ffn / tp, h], [t, h, ffn / tp]];
    var fwd = 0.0, bwd = 0.0, qFwd = 0.0, qBwd = 0.0;
    shapes.forEach(function (x) {
      var a = linearSeconds(x[0], x[1], x[2], hw, peak, p8), b = linearSeconds(x[0], x[2], x[1], hw, peak, p8),
          c = linearSeconds(x[2], x[1], x[0], hw, peak, p8);
      fwd += a[0]; bwd += b[0] + c[0]; qFwd += a[1]; qBwd += b[1] + c[1];
    });
    if (bf > 0) {
      var hm = t, hn = bf / h / tp, hk = h;
      fwd += gemmSeconds(hm, hn, hk, hw, peak);
      bwd += gemmSeconds(hm, hk, hn, hw, peak) + gemmSeconds(hk, hn, hm, hw, peak);
    }
    var flops = 4.0 * t * job.s * h / tp * 0.5, block = job.s / cp;
    var aFwd = flops / (peak * attentionEfficiency(hw, block, false));
    var aBwd = 2.5 * flops / (peak * attentionEfficiency(hw, block, true));
    var full = mlp / (3.0 * h);
    var elems = (2 * 2 * h + 2 * 3 * h) / (sp ? tp : 1) + 2 * (h + job.kv) / tp + 3 * full / tp;
    var memFwd = 2.0 * t * elems / hw.hbm_bandwidth;
    var out = {gemm: fwd + bwd, attention: aFwd + aBwd, memory: 3.0 * memFwd, forward: fwd + aFwd + memFwd,
               attention_forward: aFwd, quantize: 0.0};
    if (p8) { out.quantize = qFwd + qBwd; out.forward += qFwd; }
    return out;
  }

  function evaluate(job, tp, cp, pp, dp, v, zero, mode) {
    var sizes = [tp, cp, pp, dp], sCp = job.s / cp, net = P.network_latency;
    var m = toInt(floorDiv(job.tokens / job.s, dp * job.b)), sp = tp > 1;
    var psiGpu = job.psi / (tp * pp), perStage = Math.ceil(job.L / pp);
    var st = states(psiGpu, dp * cp, zero);
    if (zero === 3) st += 2 * 2.0 * psiGpu / perStage;
    var kept = activation(sCp, job.b, job.h, job.a, tp, sp, "selective"), act = kept;
    if (mode === "full") act = activation(sCp, job.b, job.h, job.a, tp, sp, "full");
    else if (mode === "none" && !job.flash) act += 5.0 * job.a * sCp * job.s * job.b / tp;
    var held = pp === 1 ? job.L : perStage * inFlight(pp, m, v);
    var acts = act * held + (mode === "full" ? kept : 0.0);
    if (job.vocab) {    // the last stage: its layers for one microbatch in flight, and the logits
      var logits = 10.0 * (sCp * job.b) * job.vocab / tp;
      if (pp === 1) acts += logits;
      else acts = Math.max(acts, act * perStage + (mode === "full" ? kept : 0.0) + logits);
    }
    var layers = job.L / pp, tMb = job.b * sCp, mF = job.tokens / (job.s * dp * job.b);
    var pt = parts(job, tp, cp, tMb, sp);
    var rerun = {none: 0.0, selective: pt.attention_forward, full: pt.forward}[mode];
    var perLayer = pt.gemm + pt.attention + pt.memory + rerun;
    if (job.p8) perLayer += pt.quantize;
    var updated = zero >= 1 ? psiGpu / (dp * cp) : psiGpu;
    var compute = mF * layers * perLayer + SM.adam_bytes * updated / job.hw.hbm_bandwidth;
    var reps = mode === "full" ? 1.5 : 1.0;
    var tpLayer = tp > 1 ? reps * 4 * (ring("all_reduce", 2.0 * sCp * job.b * job.h, tp) / job.link +
                                       latency(job, "all_reduce", tp, job.g)) : 0.0;
    var tpS = m * layers * (tpLayer - 0.0);
    var cpS = 0.0, ppS = 0.0, dpS = 0.0, bw;
    if (cp > 1) {
      bw = bandwidth(job, sizes, [1], true)[0];
      var kv = Math.max(Math.floor(job.kv / tp), Math.floor(job.h / job.a));
      var ringS = 3 * (2 * ring("all_gather", 2.0 * job.s * job.b * kv, cp) / bw + (cp - 1) * net.inter_latency);
      cpS = m * layers * (ringS - Math.min(ringS, pt.attention));
    }
    if (pp > 1) {
      bw = bandwidth(job, sizes, [2], true)[0];
      ppS = toFloat(m * 2 * v) * (2.0 * sCp * job.b * job.h / tp / bw + net.inter_latency);
    }
    var busy = compute + tpS + cpS;
    var bubble = busy * (pp - 1) / toFloat(v * m);
    var n = dp * cp;
    if (n > 1) {
      var bwk = bandwidth(job, sizes, [1, 3], false), t = 0;
      var kinds = zero < 3 ? P.zero_passes[zero].map(function (kd) { return [kd, 1]; })
        : [["all_gather", 2 * m], ["reduce_scatter", 1]];
      kinds.forEach(function (x) {
        t += toFloat(x[1]) * (ring(x[0], psiGpu * 2.0, n) / bwk[0] + perStage * latency(job, x[0], n, bwk[1]));
      });
      dpS = t - Math.min(t, zero === 3 ? busy : busy * 2 / (3 * m));
    }
    var step = compute + bubble + tpS + cpS + ppS + dpS;
    return {tp: tp, cp: cp, pp: pp, dp: dp, v: v, zero: zero, recompute: mode, microbatches: m, states: st,
            activations: acts, usable: job.usable, compute: compute, bubble: bubble, tpS: tpS, cpS: cpS, ppS: ppS,
            dpS: dpS, mfu: 6 * job.psi * job.tokens / job.n / (job.peak * step), memory: st + acts, step: step};
  }

  function candidates(job, modes) {
    var out = [], seqs = job.tokens / job.s;
    P.pow2.forEach(function (tp) {
      if (!(tp <= job.g && job.g % tp === 0 && job.a % tp === 0)) return;
      P.pow2.forEach(function (cp) {
        if (!(job.s % cp === 0 && cp <= job.maxCp && (cp === 1 || job.s / cp >= P.min_cp_tokens))) return;   // layout.MIN_CP_TOKENS
        P.pow2.forEach(function (pp) {
          if (!(pp <= job.L) || job.n % (tp * cp * pp)) return;
          var dp = job.n / (tp * cp * pp), m = toInt(floorDiv(seqs, dp * job.b));
          if (m < 1) return;
          var vs = pp === 1 ? [1] : P.interleave.filter(function (v) { return v * pp <= job.L; });
          vs.forEach(function (v) {
            for (var zero = 0; zero <= job.maxZero; zero++)
              modes.forEach(function (mode) { out.push(evaluate(job, tp, cp, pp, dp, v, zero, mode)); });
          });
        });
      });
    });
    return out;
  }

  function shape(x) { return "TP " + x.tp + " · CP " + x.cp + " · PP " + x.pp + (x.v > 1 ? " (v=" + x.v + ")" : "") + " · DP " + x.dp; }

  /* layout.layout as plan() calls it: nics_per_node = gpus_per_node, one sequence per microbatch. */
  function layout(n, nl, h, a, s, batch, nGpus, gpu, g, u, vocab, precision) {
    var args = [["n_params", F(n)], ["n_layers", I(nl)], ["d_model", I(h)], ["n_heads", I(a)], ["seq_len", I(s)],
                ["global_batch_tokens", F(batch)], ["n_gpus", I(nGpus)], ["gpu", gpu], ["gpus_per_node", I(g)],
                ["nics_per_node", I(g)], ["nic_bits_per_s", F(P.hardware[gpu].nic_bits_per_s)], ["kv_heads", undefined],
                ["compute_mfu", undefined], ["usable_fraction", F(u)], ["flash_attention", undefined],
                ["max_cp", LAYOUT.max_cp], ["max_zero", LAYOUT.max_zero], ["vocab_size", I(vocab)],
                ["precision", precision]];
    return checked(args, function () {
      L.positiveInt("n_heads", I(a));
      L.positiveInt("d_model", I(h));
      if (h % a) fail("n_heads (" + L.intRepr(a) + ") must divide d_model (" + L.intRepr(h) + "): each head gets " +
                      "d_model/n_heads dimensions, a whole number of at least 1");
      if (batch < s) fail("global_batch_tokens (" + L.pyFloatRepr(batch) + ") is less than one sequence (seq_len=" + s + ")");
      var p8 = 0.0;    // layout.job._fp8_peak: the dense FP8 peak under precision="fp8", refused on a chip without
      if (precision === "fp8") {
        p8 = D.accelerators[gpu].fp8 || 0.0;
        if (!p8) fail("precision='fp8': gpu='" + gpu + "' has no FP8 tensor cores (no dense FP8 peak in " +
                      "the course's hardware table); use precision='bf16' or a chip with FP8: " +
                      Object.keys(D.accelerators).filter(function (x) { return D.accelerators[x].fp8; }).join(", "));
      } else if (precision !== "bf16") fail("precision must be one of 'bf16', 'fp8', got '" + precision + "'");
      if (nl > P.max_layers) fail("n_layers must be <= " + P.max_layers + ", got " + L.show(L.intRepr(nl)));
      var job = {psi: n, L: nl, h: h, a: a, s: s, tokens: batch, n: nGpus, kv: h, b: 1, flash: P.flash_attention,
                 peak: D.accelerators[gpu][P.hardware[gpu].dtype], p8: p8,
                 hw: P.hardware[gpu], vocab: vocab,
                 link: P.hardware[gpu].link_bandwidth, g: g,
                 ringBw: g * (P.hardware[gpu].nic_bits_per_s / 8), usable: P.hardware[gpu].hbm_bytes * u,
                 maxCp: LAYOUT.max_cp.num, maxZero: LAYOUT.max_zero.num};
      var all = candidates(job, job.flash ? ["none", "full"] : ["none", "selective", "full"]);
      all.sort(function (x, y) { return x.step < y.step ? -1 : x.step > y.step ? 1 : 0; });    // stable, like sorted()
      var fits = all.filter(function (x) { return x.memory <= x.usable; });
      if (!fits.length) {
        var small = null;
        all.forEach(function (x) { if (!small || x.memory < small.memory) small = x; });
        var why = small ? "the smallest needs " + pyFixed(small.memory / 1e9, 0) + " GB per GPU"
          : "the GPU count and the batch floor (a sequence per data-parallel replica) allow no layout";
        if (small && small.activations > small.states)    // then the width and length are the cause
          why += ", " + pyFixed(small.activations / 1e9, 0) + " GB of it activations (d_model=" + L.intRepr(h) +
                 ", seq_len=" + L.intRepr(s) + ")";
        fail("no layout fits: n_params=" + L.pyFloatRepr(n) + " on n_gpus=" + nGpus + " with global_batch_tokens=" +
             L.pyFloatRepr(batch) + " and usable_fraction=" + L.pyFloatRepr(u) + " of HBM: " + why);
      }
      var best = fits[0];
      best.numbers = [best.states, best.activations, best.usable, best.compute, best.bubble, best.tpS, best.cpS,
                      best.ppS, best.dpS, best.mfu, best.memory, best.step, best.microbatches];
      return best;
    });
  }

  // ------------------------------------------------------------ planner.py
  function modelShape(n) {
    var dGuess = Math.pow(n * P.head_dim / 12.0, 1 / 3);
    var heads = Math.max(8, 8 * pyRound(dGuess / P.head_dim / 8));
    var d = heads * P.head_dim;
    return [Math.max(1, pyRound(n / (12.0 * d * d))), d, heads];
  }

  function impossible(text, n, nGpus, g, hbm, u, batch, s, nl) {
    if (text.indexOf("smallest needs") >= 0) {
      var floor = toInt(Math.ceil(16.0 * n / (hbm * u)));
      return "n_gpus=" + nGpus + ": the plan does not fit (" + text + "). The model states alone (16 bytes per " +
        "parameter, ZeRO-3) need at least " + L.intRepr(floor) + " GPUs of this type; use more GPUs, a GPU with " +
        "more HBM, a shorter seq_len or a larger usable_fraction";
    }
    var seqs = batch / s, cp = Math.max.apply(null, P.pow2.filter(function (c) { return s % c === 0 && (c === 1 || s / c >= P.min_cp_tokens); }));
    var pp = Math.max.apply(null, P.pow2.filter(function (p) { return p <= nl; }));
    var need = toInt(Math.ceil(nGpus / (g * cp * pp)));
    return "global_batch_tokens=" + pyG(batch) + ": batch below the floor (" + text + "). " + pyG(seqs) + " sequence" +
      (seqs === 1 ? "" : "s") + " per step cannot give every data-parallel replica a sequence: one sequence feeds at " +
      "most TP " + g + " (a node) × CP " + cp + " × PP " + pp + " = " + L.intRepr(g * cp * pp) + " GPUs, so " + nGpus + " GPUs need " +
      L.intRepr(need) + ". Raise global_batch_tokens to " + pyG(need * s) + " or use fewer GPUs";
  }

  /* planner.failure_budget: checkpoint_bytes_per_rank, save_seconds, cluster_mtbf, Young's interval
   * (never shorter than one step), goodput; its two refusals. */
  function faults(n, nGpus, step, hw) {    // hw: the accelerator's cluster (storage, restart)
    var ckpt = checked([["n_params", F(n)], ["n_ranks", I(nGpus)], ["bytes_per_param", F(P.checkpoint_bytes_per_param)]],
      function () { var x = n * P.checkpoint_bytes_per_param / nGpus; return {x: x, numbers: [x]}; }).x * nGpus;
    var save = checked([["checkpoint_bytes", F(ckpt)], ["n_writers", I(nGpus)], ["writer_bandwidth", F(P.writer_bandwidth)],
                        ["storage_bandwidth", F(hw.storage_bytes_per_s)]], function () {
      var x = ckpt / Math.min(nGpus * P.writer_bandwidth, hw.storage_bytes_per_s);
      return {x: x, numbers: [x]};
    }).x;
    var gm = L.positive("gpu_mtbf_seconds", PLAN.gpu_mtbf_seconds);
    var mtbf = checked([["gpu_mtbf_seconds", F(gm)], ["n_gpus", I(nGpus)]],
      function () { return {x: gm / nGpus, numbers: [gm / nGpus]}; }).x;
    var young = mtbf > 0 ? checked([["save_seconds", F(save)], ["mtbf_seconds", F(mtbf)]], function () {
      var x = Math.sqrt(2 * save) * Math.sqrt(mtbf);
      return {x: x, numbers: [x]};
    }).x : 0.0;
    var tau = Math.max(young, step), r = hw.restart_seconds, good = 0.0;
    if (mtbf > 0 && tau + save < Infinity)
      good = checked([["interval_seconds", F(tau)], ["save_seconds", F(save)], ["restart_seconds", F(r)],
                      ["mtbf_seconds", F(mtbf)]], function () {
        var period = tau + save, x = tau / period * Math.max(0.0, 1.0 - (r + period / 2) / mtbf);
        return {x: x, numbers: [x]};
      }).x;
    if (good <= 0 && mtbf > 0 && step > young)
      fail("n_gpus=" + nGpus + ": one step takes " + pyG(step) + " s and the job fails every " + pyG(mtbf) + " s on " +
           "average; a checkpoint can only be taken between steps, so each failure costs a restart and half a step, " +
           "and no training progresses. Make a step shorter or the job's MTBF longer (gpu_mtbf_seconds) (in this " +
           "plan global_batch_tokens, mfu and nic_bits_per_s set the step)");
    if (good <= 0)
      fail("n_gpus=" + nGpus + ": the job fails every " + pyFixed(mtbf / 60, 1) + " minutes on average, less " +
           "than a restart (restart_seconds=" + L.pyFloatRepr(r) + ") and half a checkpoint period take: no training " +
           "progresses. Use fewer GPUs or more reliable ones (gpu_mtbf_seconds), or a faster restart");
    return {ckpt: ckpt, save: save, mtbf: mtbf, interval: tau, good: good};
  }

  function isAuto(f) { return !f.isNum && (f.repr === "''" || f.repr === "'auto'"); }

  /* plan(n_params=, n_tokens=, gpu=, n_gpus=, gpus_per_node=, seq_len=, global_batch_tokens=,
   * price_per_gpu_hour=, mfu=None if the field is empty or "auto"). */
  function plan(v) {
    var auto = isAuto(v.mfu);
    var args = [["compute", undefined], ["n_params", v.n_params], ["n_tokens", v.n_tokens], ["gpu", v.gpu],
                ["n_gpus", v.n_gpus], ["gpus_per_node", v.gpus_per_node], ["seq_len", v.seq_len],
                ["global_batch_tokens", v.global_batch_tokens], ["price_per_gpu_hour", v.price_per_gpu_hour],
                ["mfu", auto ? undefined : v.mfu], ["precision", v.precision]];
    args.push(["nic_bits_per_s", undefined]);    // None: the accelerator's generation
    ["gpu_mtbf_seconds", "vocab_size", "usable_fraction"].forEach(function (k) { args.push([k, PLAN[k]]); });
    return checked(args, function () {
      var n = L.positive("n_params", v.n_params), d = L.positive("n_tokens", v.n_tokens);
      [["n_params", n], ["n_tokens", d]].forEach(function (x) {
        if (x[1] < 1) fail(x[0] + " must be at least 1, got " + L.pyFloatRepr(x[1]));
      });
      var gpu = v.gpu, g = L.positiveInt("gpus_per_node", v.gpus_per_node), nGpus = L.positiveInt("n_gpus", v.n_gpus);
      var s = L.positiveInt("seq_len", v.seq_len), batch = L.positive("global_batch_tokens", v.global_batch_tokens);
      if (d < batch)    // a run shorter than one step
        fail("n_tokens (" + L.pyFloatRepr(d) + ") is less than one step of global_batch_tokens (" + L.pyFloatRepr(batch) +
             "): the run would not finish a single step");
      var price = L.positive("price_per_gpu_hour", v.price_per_gpu_hour);
      var sh = modelShape(n), u = PLAN.usable_fraction.num, best;
      if (sh[0] > P.max_layers || sh[1] > D.max_int || sh[2] > D.max_int)    // planner._check_default_shape
        fail("n_params=" + L.pyFloatRepr(n) + ": its default shape (model_shape: " + L.intRepr(sh[0]) + " layers, " +
             "d_model " + L.intRepr(sh[1]) + ", " + L.intRepr(sh[2]) + " heads) is beyond the layout planner's bounds " +
             "(at most " + P.max_layers + " layers, 2**53 for a width): give n_layers, d_model and n_heads");
      try {
        best = layout(n, sh[0], sh[1], sh[2], s, batch, nGpus, gpu, g, u, PLAN.vocab_size.num, v.precision);
      } catch (e) {
        if (!(e instanceof L.CalcError) || e.message.indexOf("no layout fits") !== 0) throw e;
        fail(impossible(e.message, n, nGpus, g, P.hardware[gpu].hbm_bytes, u, batch, s, sh[0]));
      }
      var used = auto ? best.mfu : L.utilisation("mfu", v.mfu);
      var dt = P.hardware[gpu].dtype, days = L.trainingDays(F(n), F(d), I(nGpus), F(used), gpu, dt);
      var stepS = 6.0 * n * batch / (nGpus * D.accelerators[gpu][dt] * used);
      var gpuHours = days * 24.0 * nGpus, f = faults(n, nGpus, stepS, P.hardware[gpu]);
      var tokensPerS = batch / stepS, bpt = P.bytes_per_token;
      var out = {layout_shape: shape(best), zero_stage: best.zero, recompute: best.recompute,
                 microbatches: best.microbatches, memory_bytes: best.memory, usable_bytes: best.usable,
                 mfu: used, mfu_estimate: best.mfu, step_s: stepS, days: days, gpu_hours: gpuHours,
                 cost: gpuHours * price, checkpoint_interval_s: f.interval, goodput: f.good,
                 wall_days: days / f.good, loader_tokens_per_s: tokensPerS};
      if (v.precision === "fp8") out.mfu_vs_fp8 = used * D.accelerators[gpu][dt] / D.accelerators[gpu].fp8;
      var flopsTotal = L.trainingFlops(F(n), F(d));
      out.numbers = [n, d, flopsTotal, d / n, nGpus, g, s, batch, sh[0], sh[1], sh[2], stepS, d / batch,
                     days, gpuHours, price, out.cost, f.ckpt, f.save, f.mtbf, f.interval, P.hardware[gpu].restart_seconds, f.good,
                     out.wall_days, tokensPerS, tokensPerS * bpt, bpt].concat(best.numbers);
      return out;
    });
  }

  // ------------------------------------------------------------ the form
  var fmt = L.fmt, sci = L.sci;
  function gb(x) { return fmt(x / 1e9, " GB"); }
  function pct(x) { return fmt(100 * x, " %"); }
  function str(x) { return x; }

  /* Python's messages name what course_lib.plan.plan takes; this form has fewer fields (no
   * usable_fraction, model shape, NIC rate, MTBF or restart time: they are the planner's defaults
   * here), so the page says what the reader can change in it instead. The numbers stay Python's. */
  function reader(m) {
    return m
      .replace(/ and usable_fraction=([^ ]+) of HBM/, function (all, u) { return " and " + pct(Number(u)) + " of HBM usable"; })
      .replace(/; use more GPUs, a GPU with more HBM, a shorter seq_len or a larger usable_fraction$/,
               "; use more GPUs (n_gpus), a GPU with more HBM (gpu) or a shorter seq_len")
      .replace(/\(model_shape: ([^ ]+) layers, d_model ([^ ]+), ([^ ]+) heads\)/, "($1 layers, width $2, $3 heads)")
      .replace(/: give n_layers, d_model and n_heads$/, ": this form derives the shape from n_params, so use a smaller one")
      .replace(/Make a step shorter or the job's MTBF longer \(gpu_mtbf_seconds\) \(in this plan global_batch_tokens, mfu and nic_bits_per_s set the step\)$/,
               "Make a step shorter (a smaller global_batch_tokens or a higher mfu) or the job's MTBF longer (fewer n_gpus)")
      .replace(/ \(restart_seconds=([^)]+)\)/, function (all, r) { return " (" + fmt(Number(r), " s") + ")"; })
      .replace(/Use fewer GPUs or more reliable ones \(gpu_mtbf_seconds\), or a faster restart$/,
               "Use fewer GPUs (n_gpus): one GPU's MTBF and the restart time are the planner's defaults here");
  }

  C.register("plan", {
    title: "Plan a pretraining run (course_lib.plan.plan)",
    reader: reader,
    fields: function () {
      return [L.text("n_params", "parameters N", "34e9"), L.text("n_tokens", "tokens D", "8e12"),
              L.select("gpu", "accelerator", "H100-SXM", Object.keys(D.accelerators).map(function (g) { return [g, g]; })),
              L.text("n_gpus", "GPUs", P.plan_defaults.n_gpus),
              L.text("gpus_per_node", "GPUs per node", P.plan_defaults.gpus_per_node),
              L.text("seq_len", "sequence length", P.plan_defaults.seq_len),
              L.text("global_batch_tokens", "global batch (tokens)", P.plan_defaults.global_batch_tokens),
              L.text("mfu", "MFU (0-1; auto = the layout's estimate)", "auto"),
              L.select("precision", "GEMM precision (fp8: the block's GEMMs at the FP8 peak)", "bf16",
                       [["bf16", "bf16"], ["fp8", "fp8"]]),
              L.text("price_per_gpu_hour", "$ per GPU-hour (an assumption)", P.plan_defaults.price_per_gpu_hour)];
    },
    run: function (v) {
      var r = plan(v), money = function (x) { return "$" + fmt(x, ""); };
      return [["layout_shape", "layout", r.layout_shape, str],
              ["zero_stage", "ZeRO stage", r.zero_stage, String],
              ["recompute", "recomputation", r.recompute, str],
              ["microbatches", "microbatches per pipeline m", r.microbatches, String],
              ["memory_bytes", "memory per GPU", r.memory_bytes, gb],
              ["usable_bytes", "usable per GPU", r.usable_bytes, gb],
              ["mfu", "MFU used", r.mfu, pct],
              ["mfu_estimate", "the layout's MFU estimate", r.mfu_estimate, pct]].concat(
              r.mfu_vs_fp8 === undefined ? [] : [["mfu_vs_fp8", "MFU against the FP8 peak", r.mfu_vs_fp8, pct]]).concat([
              ["step_s", "step time", r.step_s, function (x) { return fmt(x, " s"); }],
              ["days", "training time", r.days, function (x) { return fmt(x, " days"); }],
              ["gpu_hours", "GPU-hours", r.gpu_hours, function (x) { return sci(x, ""); }],
              ["cost", "cost", r.cost, money],
              ["checkpoint_interval_s", "checkpoint every", r.checkpoint_interval_s, function (x) { return fmt(x / 60, " min"); }],
              ["goodput", "goodput", r.goodput, pct],
              ["wall_days", "wall time with failures", r.wall_days, function (x) { return fmt(x, " days"); }],
              ["loader_tokens_per_s", "loader tokens/s (cluster)", r.loader_tokens_per_s, function (x) { return sci(x, ""); }]]);
    }
  });
})();
