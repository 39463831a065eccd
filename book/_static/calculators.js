/* Live calculators for the chapter pages: no kernel, no network, no framework (plain ES2015).
 *
 * Each one mirrors a course_lib function: the same formula, evaluated in the same order, and the
 * same ValueError message for bad input (course_lib/_validate.py). The constants (peak FLOP/s,
 * loss fits, limits) are not typed here: window.COURSE_CALC_DATA is generated from course_lib at
 * build time (course_lib/site_data.py, book/_ext/course_calculators.py).
 *
 * A page asks for a calculator with <div class="course-calc" data-calc="NAME"></div>; this script
 * fills it with labelled inputs and <output> elements that carry the full-precision result in
 * data-value (tests/test_site_calculators.py compares it with Python to 1e-9). On a Chinese page
 * (<html lang="zh-CN">) the words are calculators_i18n.js's: the numbers and data-message do not change.
 */
(function () {
  "use strict";
  var D = window.COURSE_CALC_DATA;

  function CalcError(message) { this.message = message; }
  function fail(message) { throw new CalcError(message); }
  function ZeroDivision() {}
  function Overflow(message) { this.message = message; }    // Python's OverflowError, with its text

  // ------------------------------------------------------------ Python's repr of what was typed
  function pad2(n) { return n < 10 ? "0" + n : String(n); }

  function pyFloatRepr(x) {
    if (x !== x) return "nan";
    if (x === Infinity) return "inf";
    if (x === -Infinity) return "-inf";
    if (x === 0) return 1 / x < 0 ? "-0.0" : "0.0";
    var m = /^(-?)(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(x.toExponential());  // shortest round-trip digits
    var sign = m[1], digits = m[2] + (m[3] || ""), e = parseInt(m[4], 10);
    if (e >= -4 && e < 16) {    // Python writes these without an exponent
      if (e < 0) return sign + "0." + "0".repeat(-e - 1) + digits;
      var whole = (digits + "0".repeat(Math.max(0, e + 1 - digits.length))).slice(0, e + 1);
      return sign + whole + "." + (digits.slice(e + 1) || "0");
    }
    var mant = digits[0] + (digits.length > 1 ? "." + digits.slice(1) : "");
    return sign + mant + "e" + (e < 0 ? "-" : "+") + pad2(Math.abs(e));
  }

  function pyStrRepr(s) {
    var q = s.indexOf("'") >= 0 && s.indexOf('"') < 0 ? '"' : "'";
    var body = s.replace(/\\/g, "\\\\");
    if (q === "'") body = body.replace(/'/g, "\\'");
    return q + body + q;
  }

  function show(repr) {    // _validate._show: a long value is shortened
    return repr.length <= 40 ? repr : repr.slice(0, 20) + "..." + repr.slice(-8) + " (" + repr.length + " characters)";
  }

  var INT_RE = /^[+-]?\d+$/;
  var FLOAT_RE = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$|^[+-]?(nan|inf|infinity)$/i;

  /* The reader's units: a number may end in a magnitude, any case: k (thousand), M (million, never
   * milli), B or G (billion), T (trillion), P (10^15), or a binary one, Ki Mi Gi Ti Pi (1024^n:
   * "128Ki" tokens is 131072); e-notation (1e9) works as before. An integer with a magnitude is the
   * integer it names ("70B" is 70000000000), a decimal one the float it names ("1.5M" is 1.5e6,
   * rounded once, as Python's float("1.5e6")). */
  var SUFFIX_RE = /^([+-]?)(\d+\.?\d*|\.\d+)\s*(ki|mi|gi|ti|pi|k|m|b|g|t|p)$/i;
  var DECIMAL = {k: 3, m: 6, b: 9, g: 9, t: 12, p: 15}, BINARY = {ki: 1, mi: 2, gi: 3, ti: 4, pi: 5};
  function expandSuffix(t) {
    var m = SUFFIX_RE.exec(t);
    if (!m) return t;
    var sign = m[1], num = m[2], suffix = m[3].toLowerCase(), isInt = /^\d+$/.test(num);
    if (suffix in DECIMAL) return sign + num + (isInt ? "0".repeat(DECIMAL[suffix]) : "e" + DECIMAL[suffix]);
    var scale = Math.pow(1024, BINARY[suffix]);    // a power of two: the product is exact
    if (isInt && typeof BigInt === "function") return sign + (BigInt(num) * BigInt(scale)).toString();
    return sign + pyFloatRepr(Number(num) * scale);
  }

  /* What a text field holds, read the way the test reads it for Python: an integer literal is an
   * int, another float literal a float, anything else (empty included) the string itself; a
   * magnitude (expandSuffix) is read first. */
  function parseField(text) {
    var t = expandSuffix(text.trim());
    if (INT_RE.test(t)) {
      var neg = t[0] === "-", digits = t.replace(/^[+-]/, "").replace(/^0+(?=\d)/, "");
      var canon = (neg && digits !== "0" ? "-" : "") + digits;
      return {isNum: true, isInt: true, num: Number(canon), repr: canon};
    }
    if (FLOAT_RE.test(t)) {
      var low = t.toLowerCase(), num;
      if (/nan/.test(low)) num = NaN;
      else if (/inf/.test(low)) num = low[0] === "-" ? -Infinity : Infinity;
      else num = Number(t);
      return {isNum: true, isInt: false, num: num, repr: pyFloatRepr(num)};
    }
    return {isNum: false, isInt: false, num: NaN, repr: pyStrRepr(t)};
  }

  /* A number of a message (Python's repr of an int or a float) in the reader's units, which the
   * form reads back to the same value: 70000000000.0 -> 70B, 15600000000000.0 -> 15.6T, 131072 ->
   * 128Ki (a power-of-two multiple that the decimal form would spell with more digits), 1e+300 ->
   * 1e300. Below 10,000, and nan/inf, it stays as Python wrote it. */
  var DECIMAL_NAMES = ["k", "M", "B", "T", "P"], BINARY_NAMES = ["Ki", "Mi", "Gi", "Ti", "Pi"];
  function readerNumber(token) {
    var sign = token[0] === "-" ? "-" : "", body = token.replace(/^[+-]/, ""), x = Number(body);
    if (!isFinite(x) || x < 1e4) return token;
    var digits, e;
    if (/[.e]/i.test(body)) {    // a float: its shortest digits (Python's repr and JS agree)
      var m = /^(\d)(?:\.(\d+))?e\+?(-?\d+)$/.exec(x.toExponential());
      digits = m[1] + (m[2] || "");
      e = parseInt(m[3], 10);
    } else {                      // an int: every digit, even past 2**53
      digits = body.replace(/^0+/, "");
      e = digits.length - 1;
      digits = digits.replace(/0+$/, "");
    }
    if (e >= 18) return sign + digits[0] + (digits.length > 1 ? "." + digits.slice(1) : "") + "e" + e;
    if (digits.length > 4 && x < D.max_int && x === Math.floor(x)) {    // below 2**53 a double is the exact integer
      for (var k = 5; k >= 1; k--) {
        var q = x / Math.pow(1024, k);
        if (q === Math.floor(q) && String(q).length <= 4) return sign + q + BINARY_NAMES[k - 1];
      }
    }
    var i = Math.floor(e / 3), point = e - 3 * i + 1;    // digits before the decimal point
    var mantissa = digits.length <= point ? digits + "0".repeat(point - digits.length)
      : digits.slice(0, point) + "." + digits.slice(point);
    return sign + mantissa + DECIMAL_NAMES[i - 1];
  }

  /* An error message as the page shows it: the calculator's own rewording first (spec.reader:
   * what to change in this form, for a message that names an argument the form has no field
   * for), then every number that is not followed by a unit in the reader's units. Quoted text
   * (what was typed) is left as it is. The message Python raises stays in data-message. */
  var NUMBER_RE = /(^|[^\w.*+-])([+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?)(?![\w.*])/gi;
  var UNIT_RE = /^\s*(?:s|GB|GPUs|minutes|min|h|days)\b/;    // a number with its unit keeps its digits
  function readerMessage(message, spec) {
    var text = spec && spec.reader ? spec.reader(message) : message;
    return text.split(/('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")/).map(function (part, i) {
      return i % 2 ? part : part.replace(NUMBER_RE, function (all, before, number, at, whole) {
        var unit = UNIT_RE.test(whole.slice(at + all.length));
        return before + (unit && Math.abs(Number(number)) < 1e18 ? number : readerNumber(number));
      });
    }).join("");
  }

  // ------------------------------------------------------------ _validate.py
  function number(name, f) {
    if (!f.isNum) fail(name + " must be a number, got " + show(f.repr));
    if (f.isInt && !isFinite(f.num))
      fail(name + " is too large (more than a float holds, ~1.8e308), got " + show(f.repr));
    if (!isFinite(f.num)) fail(name + " must be finite, got " + show(f.repr));
    return f.num;
  }

  function positive(name, f, allowZero) {
    var v = number(name, f);
    if (v < 0 || (v === 0 && !allowZero))
      fail(name + " must be " + (allowZero ? "non-negative" : "positive") + ", got " + show(f.repr));
    return v;
  }

  function intRepr(v) {    // Python's int(v) for an integral double, digit for digit
    return typeof BigInt === "function" ? BigInt(v).toString() : String(v);
  }

  function positiveInt(name, f) {    // minimum 1, maximum 2**53
    if (!f.isNum) fail(name + " must be an integer, got " + show(f.repr));
    var repr = f.repr;
    if (!f.isInt) {
      var v = number(name, f);
      if (v !== Math.floor(v)) fail(name + " must be an integer, got " + show(f.repr));
      repr = intRepr(v);    // Python shows int(v) from here on
    }
    var digits = repr.replace(/^-/, ""), top = String(D.max_int);
    if (repr[0] === "-" || digits === "0") fail(name + " must be >= 1, got " + show(repr));
    if (digits.length > top.length || (digits.length === top.length && digits > top))
      fail(name + " must be <= 2**53, got " + show(repr));
    return Number(repr);
  }

  function utilisation(name, f) {
    var u = positive(name, f, false);
    if (u > 1) fail(name + " must be a fraction in (0, 1], got " + f.repr + " (45% is 0.45, not 45)");
    return u;
  }

  function discount(name, f) {    // distill._discount
    var d = positive(name, f, true);
    if (d >= 1) fail(name + " must be a fraction in [0, 1), got " + f.repr + " (50% off is 0.5, not 50)");
    return d;
  }

  function choice(name, value, options) {
    if (options.indexOf(value) < 0)
      fail(name + " must be one of " + options.map(pyStrRepr).join(", ") + "; got " + show(pyStrRepr(value)));
    return value;
  }

  function peak(gpu, dtype) {    // hardware.Accelerator.peak
    var peaks = D.accelerators[gpu];
    return peaks[choice("dtype", dtype, Object.keys(peaks))];
  }

  function div(a, b) {    // Python float division: dividing by zero raises
    if (b === 0) throw new ZeroDivision();
    return a / b;
  }

  /* _validate.calculator: a division by zero or a non-finite result becomes a message naming the
   * most extreme numeric inputs (within 10 decades of the largest |log10|). */
  function culprits(args, zeroDivides) {
    var mags = [], top = -Infinity;
    args.forEach(function (a) {
      var f = a[1];
      if (typeof f !== "object" || !f.isNum || f.num !== f.num) return;
      var m = f.num !== 0 ? Math.abs(Math.log10(Math.abs(f.num))) : (zeroDivides ? Infinity : null);
      if (m === null) return;
      mags.push([a[0], f, m]);
      top = Math.max(top, m);
    });
    if (!mags.length) return args.map(function (a) { return a[0]; }).join(", ");
    return mags.filter(function (x) { return x[2] >= top - 10; })
      .map(function (x) { return x[0] + "=" + show(x[1].repr); }).join(", ");
  }

  function calculator(args, body) {
    var result;
    try {
      result = body();
    } catch (e) {
      if (e instanceof ZeroDivision)
        fail("inputs out of range: " + culprits(args, true) +
             " (too large or too small for float arithmetic: float division by zero)");
      if (e instanceof Overflow)
        fail("inputs out of range: " + culprits(args, false) + " (too large or too small for float arithmetic: " +
             e.message + ")");
      throw e;
    }
    if ([].concat(result).some(function (x) { return !isFinite(x); }))
      fail("inputs out of range: " + culprits(args, false) + " (too large or too small: the result overflows a float)");
    return result;
  }

  // ------------------------------------------------------------ the course_lib functions
  function trainingFlops(n, d) {    // flops.training_flops
    return calculator([["n_params", n], ["n_tokens", d]], function () {
      return 6.0 * positive("n_params", n) * positive("n_tokens", d);
    });
  }

  function trainingDays(n, d, g, u, gpu, dtype) {    // flops.training_days
    var args = [["n_params", n], ["n_tokens", d], ["n_gpus", g], ["mfu", u], ["gpu", gpu], ["dtype", dtype]];
    return calculator(args, function () {
      var c = trainingFlops(n, d);
      var gv = positive("n_gpus", g), uv = utilisation("mfu", u);
      return div(c, gv * peak(gpu, dtype) * uv) / D.seconds_per_day;
    });
  }

  function computeOptimal(c, fit) {    // scaling.compute_optimal
    return calculator([["compute", c], ["fit", fit]], function () {
      choice("fit", fit, D.fit_names);
      var cv = positive("compute", c), tpp = D.tokens_per_param;
      if (fit === "tokens_per_param") {
        var n0 = Math.sqrt(div(cv, 6.0 * tpp));
        return [n0, tpp * n0];
      }
      var f = D.fits[fit], a = f.beta / (f.alpha + f.beta);
      var G = Math.pow(f.alpha * f.A / (f.beta * f.B), 1.0 / (f.alpha + f.beta));
      var n = G * Math.pow(cv / 6.0, a);
      return [n, cv / (6.0 * n)];    // numpy: no exception, an inf the check reports
    });
  }

  function zeroMemoryPerGpu(psiF, nF, stage, bppF) {    // memory.zero_memory_per_gpu
    var args = [["n_params", psiF], ["dp_degree", nF], ["stage", stage], ["bytes_per_param", bppF]];
    return calculator(args, function () {
      var psi = positive("n_params", psiF), n = positiveInt("dp_degree", nF);
      var s = stage.num;
      if ([0, 1, 2, 3].indexOf(s) < 0) fail("stage must be 0 (plain DP), 1, 2 or 3, got " + show(stage.repr));
      var b = positive("bytes_per_param", bppF, false);
      if (b < 4) fail("bytes_per_param must be >= 4 (2 for bf16 weights + 2 for gradients), got " + bppF.repr);
      return 2.0 * psi / (s >= 3 ? n : 1) + 2.0 * psi / (s >= 2 ? n : 1) + (b - 4) * psi / (s >= 1 ? n : 1);
    });
  }

  function pipelineSizes(p, m, v) {
    return [positiveInt("p", p), positiveInt("m", m), positiveInt("v", v)];
  }

  function bubbleFraction(p, m, v) {    // pipeline.bubble_fraction
    return calculator([["p", p], ["m", m], ["v", v]], function () {
      var s = pipelineSizes(p, m, v);
      return (s[0] - 1) / (s[2] * s[1] + s[0] - 1);
    });
  }

  function bubbleOverhead(p, m, v) {    // pipeline.bubble_overhead
    return calculator([["p", p], ["m", m], ["v", v]], function () {
      var s = pipelineSizes(p, m, v);
      return (s[0] - 1) / (s[2] * s[1]);
    });
  }

  /* Chapter 5's schedules, replayed as course_lib.pipeline.simulate replays them (layout.bubble):
   * the op order of every rank (pipeline.schedules), then each op as soon as its rank is free and
   * its inputs are done, at T_F = T_B = T_W (bubble.FBW). An op is [kind, microbatch, chunk],
   * kind 0 = F, 1 = B (input gradient), 2 = W (weight gradient). The limits are bubble's own,
   * exported by course_lib/site_data.py (PAGE_SCHEDULES, PAGE_MAX_P, MAX_REPLAY). */
  var PIPE = D.pipeline;

  function zbH1Order(p, m, s) {    // schedules.zero_bubble_h1
    var warm = Math.min(p - s - 1, m), ops = [], backs = 0, weights = 0, i;
    function backward() {
      ops.push([1, backs++, 0]);
      if (backs - weights > s) ops.push([2, weights++, 0]);
    }
    for (i = 0; i < warm; i++) ops.push([0, i, 0]);
    for (i = 0; i < m - warm; i++) { ops.push([0, warm + i, 0]); backward(); }
    while (backs < m) backward();
    for (i = weights; i < m; i++) ops.push([2, i, 0]);
    return ops;
  }

  function zbVOrder(p, m, s) {    // schedules.zero_bubble_v, built for max(m, 2p − 1) microbatches
    var n = Math.max(m, 2 * p - 1), f = [0, 0], b = [0, 0], ops = [], i, c;
    function add(kind, ch, count) { ops.push([kind, count[ch]++, ch]); }
    for (i = 0; i < 2 * (p - s) - 1; i++) add(0, 0, f);
    for (i = 0; i < s; i++) { add(0, 1, f); add(0, 0, f); }
    for (i = 0; i < p - s; i++) { add(0, 1, f); ops.push([1, b[1], 1], [2, b[1], 1]); b[1]++; }
    while (f[1] < f[0] || f[0] < n) {
      if (f[0] < n) add(0, 0, f);
      for (c = 0; c < 2; c++) {
        if (c) add(0, 1, f);
        ops.push([1, b[c], c], [2, b[c], c]);
        b[c]++;
      }
    }
    var w = b.slice();
    for (i = 0; i < s; i++) { add(1, 0, b); add(1, 1, b); }
    for (i = 0; i < p - s; i++) { add(1, 0, b); add(2, 0, w); }
    [1, 0].forEach(function (ch) { for (var k = w[ch]; k < n; k++) ops.push([2, k, ch]); });
    return ops.filter(function (op) { return op[1] < m; });
  }

  function dualpipeVOrder(p, m, r) {    // schedules.dualpipe_v: the eight phases of DualPipeV.step
    var f = [0, 0], b = [0, 0], owed = [], ops = [], i, split = false;
    function fwd(c) { ops.push([0, f[c]++, c]); }
    function bwd(c, zb) { ops.push([1, b[c], c]); (zb ? owed : ops).push([2, b[c]++, c]); }
    function weight() { ops.push(owed.shift()); }
    for (i = 0; i < 2 * (p - r - 1); i++) fwd(0);
    for (i = 0; i < r + 1; i++) { fwd(0); fwd(1); }
    for (i = 0; i < p - r - 1; i++) { bwd(1, true); weight(); fwd(1); }
    for (i = 0; i < m - 2 * p + r + 1; i++) { fwd(0); bwd(1); fwd(1); bwd(0); }
    for (i = 0; i < p - r - 1; i++) { bwd(1); fwd(1); bwd(0); }
    for (i = 0; i < r + 1; i++) {
      split = split || (i === Math.floor((r + 1) / 2) && r % 2 === 1);
      bwd(1, split);
      split = split || (i === Math.floor((r + 1) / 2) && r % 2 === 0);
      bwd(0, split);
    }
    for (i = 0; i < p - r - 1; i++) { weight(); bwd(0, true); }
    while (owed.length) weight();
    return ops;
  }

  var ORDERS = {"zb-h1": zbH1Order, "zb-v": zbVOrder, "dualpipev": dualpipeVOrder};

  /* pipeline.simulate of one step at T_F : T_B : T_W = 1 : 1 : 1 per rank (a V chunk takes half):
   * [idle time per rank (makespan − 3m), most stage-activations in flight on a rank]. */
  function simulateSchedule(name, p, m) {
    var v = name === "zb-h1" ? 1 : 2, last = p * v - 1, dur = [1.0 / v, 0, 0], orders = [], peak = 0, r, i;
    dur[2] = 2.0 / v * 0.5;    // a whole backward of 2.0 / v, split: W takes w_share 0.5, B the rest
    dur[1] = 2.0 / v - dur[2];
    for (r = 0; r < p; r++) {    // an op packed as (stage · m + microbatch) · 3 + kind; pipeline._peak on the way
      var list = ORDERS[name](p, m, r), packed = new Int32Array(list.length), live = 0;
      for (i = 0; i < list.length; i++) {
        var o = list[i], stage = o[2] === 0 ? r : 2 * p - 1 - r;
        packed[i] = (stage * m + o[1]) * 3 + o[0];
        live += o[0] === 0 ? 1 : (o[0] === 2 ? -1 : 0);    // one more at each F, one fewer at its W
        peak = Math.max(peak, live);
      }
      orders.push(packed);
    }
    var done = new Float64Array(3 * p * v * m).fill(-1), waiting = new Int32Array(3 * p * v * m).fill(-1);
    var ptr = new Array(p).fill(0), free = new Array(p).fill(0.0), end = 0.0, finished = 0, todo = [];
    for (r = p - 1; r >= 0; r--) todo.push(r);
    while (todo.length) {    // a rank runs until an input is missing, then waits for that op alone
      r = todo.pop();
      var ops = orders[r];
      while (ptr[r] < ops.length) {
        var code = ops[ptr[r]], k = code % 3, gm = (code - k) / 3, need = -1, d1 = 0.0, d2 = 0.0;
        if (k === 0) { if (gm >= m) d1 = done[need = (gm - m) * 3]; }       // F(mb, stage − 1)
        else if (k === 2) d1 = done[need = gm * 3 + 1];                    // B(mb, stage)
        else {                                                             // F(mb, stage), B(mb, stage + 1)
          d1 = done[need = gm * 3];
          if (d1 >= 0 && gm < last * m) d2 = done[need = (gm + m) * 3 + 1];
        }
        if (d1 < 0 || d2 < 0) { waiting[need] = r; break; }
        free[r] = done[code] = Math.max(free[r], d1, d2) + dur[k];
        end = Math.max(end, free[r]);
        ptr[r]++;
        if (waiting[code] >= 0) { todo.push(waiting[code]); waiting[code] = -1; }
      }
      if (ptr[r] === ops.length) finished++;
    }
    if (finished < p) throw new Error("deadlock in the " + name + " order");
    return [end - m * (1.0 + 1.0 + 1.0), peak / v];
  }

  function replaySchedule(name, p, m) {    // layout.bubble.replay: past MAX_REPLAY ops, affine in m
    var ops = 3 * p * m * (name === "zb-h1" ? 1 : 2);
    if (ops > PIPE.max_replay && m > 8 * p) {
      var a = replaySchedule(name, p, 4 * p), b = replaySchedule(name, p, 8 * p);
      return [a[0] + (m - 4 * p) * (b[0] - a[0]) / (4 * p), a[1]];
    }
    return simulateSchedule(name, p, m);
  }

  function pipelineSchedule(p, m, v, name) {    // layout.bubble.page_calculator
    return calculator([["p", p], ["m", m], ["v", v]], function () {
      var s = pipelineSizes(p, m, v), P = s[0], M = s[1], V = s[2];
      choice("schedule", name, PIPE.schedules);
      if (name === "1f1b")
        return [(P - 1) / (V * M + P - 1), (P - 1) / (V * M),
                V > 1 ? Math.min(P * (1 + (P - 1) / (P * V)), M) : Math.min(P, M)];
      var vShaped = name !== "zb-h1";
      if (V > (vShaped ? 2 : 1))
        fail("v must be " + (vShaped ? "1 or 2" : "1") + " for the " + pyStrRepr(name) + " schedule (" +
             (vShaped ? "two chunks per rank, in a V" : "one chunk per rank") + "), got " + intRepr(V));
      if (name === "dualpipev" && M < 2 * P)
        fail("m must be at least 2p = " + intRepr(2 * P) + " for the 'dualpipev' schedule (it feeds both ends " +
             "of the pipeline), got " + intRepr(M));
      if (P > PIPE.max_p)
        fail("p must be at most " + PIPE.max_p + " for the " + pyStrRepr(name) + " schedule (replayed op by op), got " +
             intRepr(P));
      var rep = replaySchedule(name, P, M), share = P === 1 ? 0.0 : rep[0] / (M * (1.0 + 1.0 + 1.0));
      return [share / (1 + share), share, rep[1]];
    });
  }

  function apiCost(out, pOut, inp, pIn, disc) {    // distill.api_cost
    var args = [["output_tokens", out], ["price_out_per_mtok", pOut], ["input_tokens", inp],
                ["price_in_per_mtok", pIn], ["batch_discount", disc]];
    return calculator(args, function () {
      var o = positive("output_tokens", out), po = positive("price_out_per_mtok", pOut);
      var i = positive("input_tokens", inp, true), pi = positive("price_in_per_mtok", pIn, true);
      var d = discount("batch_discount", disc);
      return (o * po + i * pi) / D.mtok * (1.0 - d);
    });
  }

  function share(name, f) {    // distill._share
    var v = positive(name, f, true);
    if (v > 1) fail(name + " must be a fraction in [0, 1], got " + f.repr);
    return v;
  }

  function distillationCost(vis, pOut, pIn, ipo, cached, mult, hidden, disc) {    // distill.distillation_cost
    var args = [["visible_tokens", vis], ["price_out_per_mtok", pOut], ["price_in_per_mtok", pIn],
                ["input_per_output", ipo], ["cached_fraction", cached], ["cache_read_multiplier", mult],
                ["hidden_per_visible", hidden], ["batch_discount", disc]];
    return calculator(args, function () {
      var v = positive("visible_tokens", vis), po = positive("price_out_per_mtok", pOut);
      var pi = positive("price_in_per_mtok", pIn, true), r = positive("input_per_output", ipo, true);
      var c = share("cached_fraction", cached), m = share("cache_read_multiplier", mult);
      var h = positive("hidden_per_visible", hidden, true), keep = 1.0 - discount("batch_discount", disc);
      var billedOut = v * (1.0 + h), inp = v * r;
      var outDollars = billedOut * po / D.mtok * keep;
      var inDollars = inp * pi * ((1.0 - c) + c * m) / D.mtok * keep;
      var total = outDollars + inDollars;
      return [v, billedOut, inp, inp * c, outDollars, inDollars, total, total / v * D.mtok];
    });
  }

  /* distill.distill_calculator: the bill next to the teacher's pretraining cost (6ND GPU-hours at
   * an assumed price), their ratio and the break-even volume. */
  function distillCalculator(v) {
    var names = ["visible_tokens", "price_out_per_mtok", "price_in_per_mtok", "input_per_output", "cached_fraction",
                 "hidden_per_visible", "batch_discount", "teacher_params", "teacher_tokens", "gpu_hour_price", "mfu"];
    var args = names.map(function (k) { return [k, v[k]]; }).concat([["gpu", v.gpu]]);
    return calculator(args, function () {
      var bill = distillationCost(v.visible_tokens, v.price_out_per_mtok, v.price_in_per_mtok, v.input_per_output,
                                  v.cached_fraction, parseField(String(D.cache_read_multiplier)),
                                  v.hidden_per_visible, v.batch_discount);
      var n = positive("teacher_params", v.teacher_params), d = positive("teacher_tokens", v.teacher_tokens);
      var u = utilisation("mfu", v.mfu), pk = peak(v.gpu, "bf16");
      var hours = div(6.0 * n * d, pk * u) / 3600.0;
      var pre = hours * positive("gpu_hour_price", v.gpu_hour_price);
      var total = bill[6], perMtok = bill[7];
      return [total, pre, hours, div(total, pre), div(pre, perMtok) * D.mtok, perMtok];
    });
  }


  // chapters 11, 12 and 14: activation memory and TP traffic, checkpoints and goodput, the all-to-all
  function asFloat(x) { return {isNum: true, isInt: false, num: x, repr: pyFloatRepr(x)}; }    // a computed float
  function isNone(f) { return !f.isNum && (f.repr === "''" || f.repr === "'none'"); }    // "" or none: Python's None
  function ring(kind, size, n) { return (kind === "all_reduce" ? 2.0 : 1.0) * (n - 1) / n * size; }    // comm._ring

  function activationBytesPerLayer(sF, bF, hF, aF, tF, sp, mode) {    // memory.activation_bytes_per_layer
    var args = [["seq_len", sF], ["micro_batch", bF], ["d_model", hF], ["n_heads", aF], ["tp", tF],
                ["sequence_parallel", sp], ["recompute", mode]];
    return calculator(args, function () {
      var s = positiveInt("seq_len", sF), b = positiveInt("micro_batch", bF), h = positiveInt("d_model", hF);
      var a = positiveInt("n_heads", aF), t = positiveInt("tp", tF);
      choice("recompute", mode, D.recompute);
      if (a % t) fail("tp (" + t + ") must divide n_heads (" + a + "): tensor parallelism gives each rank whole attention heads");
      var sbh = s * b * h, tSp = sp ? t : 1;    // memory._activation_bytes
      if (mode === "full") return 2.0 * sbh / tSp;
      var linear = sbh * (10.0 / tSp + 24.0 / t);
      return mode === "selective" ? linear : linear + 5.0 * a * s * s * b / t;
    });
  }

  function tpBytesPerLayer(sF, bF, hF, tF, vF) {    // comm.tp_bytes_per_layer
    var args = [["seq_len", sF], ["micro_batch", bF], ["d_model", hF], ["tp", tF], ["bytes_per_value", vF]];
    return calculator(args, function () {
      var s = positiveInt("seq_len", sF), b = positiveInt("micro_batch", bF), h = positiveInt("d_model", hF);
      var t = positiveInt("tp", tF), v = positive("bytes_per_value", vF);
      return 4 * ring("all_reduce", s * b * h * v, t);
    });
  }

  function clusterMtbf(mF, nF) {    // faults.cluster_mtbf
    return calculator([["gpu_mtbf_seconds", mF], ["n_gpus", nF]], function () {
      var job = positive("gpu_mtbf_seconds", mF) / positiveInt("n_gpus", nF);
      if (job === 0)
        fail("gpu_mtbf_seconds=" + mF.repr + ", n_gpus=" + nF.repr + ": the job's MTBF gpu_mtbf_seconds / n_gpus " +
             "underflows a float (inputs too small)");
      return job;
    });
  }

  function optimalCheckpointInterval(dF, mF) {    // faults.optimal_checkpoint_interval (Young)
    return calculator([["save_seconds", dF], ["mtbf_seconds", mF]], function () {
      var d = positive("save_seconds", dF), m = positive("mtbf_seconds", mF);
      return Math.sqrt(2 * d) * Math.sqrt(m);
    });
  }

  function dalyCheckpointInterval(dF, mF) {    // faults.daly_checkpoint_interval
    return calculator([["save_seconds", dF], ["mtbf_seconds", mF]], function () {
      var d = positive("save_seconds", dF), m = positive("mtbf_seconds", mF);
      if (d >= 2 * m) return m;
      var x = d / (2 * m);
      return Math.sqrt(2 * d) * Math.sqrt(m) * (1 + Math.sqrt(x) / 3 + x / 9) - d;
    });
  }

  function goodput(tauF, dF, rF, mF) {    // faults.goodput
    var args = [["interval_seconds", tauF], ["save_seconds", dF], ["restart_seconds", rF], ["mtbf_seconds", mF]];
    return calculator(args, function () {
      var tau = positive("interval_seconds", tauF), d = positive("save_seconds", dF);
      var r = positive("restart_seconds", rF, true), m = positive("mtbf_seconds", mF);
      var period = tau + d, left = 1.0 - (r + period / 2) / m;
      return tau / period * (left > 0.0 ? left : 0.0);    // max(0.0, left)
    });
  }

  /* The chapter-12 form: the job's MTBF from one GPU's, Young's and Daly's intervals for its save,
   * and the goodput at the interval typed (or, left at auto, at Young's). */
  function checkpointing(v) {
    var mtbf = clusterMtbf(v.gpu_mtbf_seconds, v.n_gpus), m = asFloat(mtbf);
    var young = optimalCheckpointInterval(v.save_seconds, m), daly = dalyCheckpointInterval(v.save_seconds, m);
    var auto = !v.interval_seconds.isNum && (v.interval_seconds.repr === "''" || v.interval_seconds.repr === "'auto'");
    var tau = auto ? asFloat(young) : v.interval_seconds;
    return [mtbf, young, daly, goodput(tau, v.save_seconds, v.restart_seconds, m)];
  }

  function epBytesPerLayer(tF, dF, kF, eF, cfF, bF) {    // comm.ep_bytes_per_layer
    var args = [["tokens", tF], ["d_model", dF], ["top_k", kF], ["ep", eF], ["capacity_factor", cfF],
                ["bytes_per_value", bF]];
    return calculator(args, function () {
      var t = positiveInt("tokens", tF), d = positiveInt("d_model", dF), k = positiveInt("top_k", kF);
      var e = positiveInt("ep", eF), cf = isNone(cfF) ? 1.0 : positive("capacity_factor", cfF);
      var b = positive("bytes_per_value", bF);
      return 4.0 * k * t * cf * (e - 1) / e * d * b;
    });
  }

  function epNodeBytes(tF, dF, kF, eF, gF, mF, bF) {    // comm.ep_node_bytes
    var args = [["tokens", tF], ["d_model", dF], ["top_k", kF], ["ep", eF], ["gpus_per_node", gF],
                ["max_nodes", mF], ["bytes_per_value", bF]];
    return calculator(args, function () {
      var t = positiveInt("tokens", tF), d = positiveInt("d_model", dF), k = positiveInt("top_k", kF);
      var e = positiveInt("ep", eF), g = positiveInt("gpus_per_node", gF), b = positive("bytes_per_value", bF);
      if (e % g) fail("gpus_per_node (" + gF.repr + ") must divide ep (" + eF.repr + "): whole nodes");
      var unit = 4.0 * t * d * b;
      if (isNone(mF)) return [unit * k * (g - 1) / e, unit * k * (e - g) / e];
      var n = Math.floor(e / g), m = positiveInt("max_nodes", mF);
      if (m > Math.min(n, k))
        fail("max_nodes (" + mF.repr + ") must be at most the number of nodes ep/gpus_per_node = " + n +
             " and at most top_k = " + k);
      return [unit * k * (g - 1) / g, unit * m * (n - 1) / n];
    });
  }

  // ------------------------------------------------------------ the forms
  function sci(x, unit) { return x.toPrecision(4).replace("e+", "e") + unit; }
  function fmt(x, unit) {    // 4 significant digits; an exponent only for very large or small values
    if (x !== 0 && (Math.abs(x) >= 1e6 || Math.abs(x) < 1e-3)) return sci(x, unit);
    return Number(x.toPrecision(4)).toLocaleString("en-US", {maximumSignificantDigits: 4}) + unit;
  }
  function dtypes() {
    var all = [];
    Object.keys(D.accelerators).forEach(function (g) {
      Object.keys(D.accelerators[g]).forEach(function (t) { if (all.indexOf(t) < 0) all.push(t); });
    });
    return all;
  }
  function text(name, label, value) { return {name: name, label: label, value: value}; }
  function select(name, label, value, options, validFor) {
    return {name: name, label: label, value: value, options: options, validFor: validFor};
  }
  /* The precisions one accelerator has a peak for: a select offers only choices that can compute. */
  function dtypesOf(values) { return Object.keys(D.accelerators[values.gpu] || {}); }

  var CALCULATORS = {
    training_days: {
      title: "Training time: 6ND / (GPUs × peak × MFU)",
      fields: function () {
        return [text("n_params", "parameters N", "34e9"), text("n_tokens", "tokens D", "8e12"),
                text("n_gpus", "GPUs", "1024"), text("mfu", "MFU (0-1)", "0.45"),
                select("gpu", "accelerator", "H100-SXM", Object.keys(D.accelerators).map(function (g) { return [g, g]; })),
                select("dtype", "precision", "bf16", dtypes().map(function (t) { return [t, t]; }), dtypesOf)];
      },
      run: function (v) {
        return [["flops", "compute", trainingFlops(v.n_params, v.n_tokens), function (x) { return sci(x, " FLOP"); }],
                ["days", "training time", trainingDays(v.n_params, v.n_tokens, v.n_gpus, v.mfu, v.gpu, v.dtype),
                 function (x) { return fmt(x, " days"); }]];
      }
    },
    compute_optimal: {
      title: "Compute-optimal size for a budget C = 6ND",
      fields: function () {
        return [text("compute", "compute C (FLOP)", "5.76e23"),
                select("fit", "fit", "hoffmann", D.fit_names.map(function (f) { return [f, f]; }))];
      },
      run: function (v) {
        var r = computeOptimal(v.compute, v.fit);
        return [["n_params", "parameters N*", r[0], function (x) { return sci(x, ""); }],
                ["n_tokens", "tokens D*", r[1], function (x) { return sci(x, ""); }]];
      }
    },
    zero_memory: {
      title: "Model-state memory per GPU under ZeRO",
      fields: function () {
        return [text("n_params", "parameters Ψ", "7.5e9"), text("dp_degree", "data-parallel degree n", "64"),
                select("stage", "ZeRO stage", "3", [["0", "0 (plain DP)"], ["1", "1: optimizer state"],
                                                   ["2", "2: + gradients"], ["3", "3: + parameters"]]),
                text("bytes_per_param", "bytes per parameter", "16")];
      },
      run: function (v) {
        return [["bytes", "per GPU", zeroMemoryPerGpu(v.n_params, v.dp_degree, parseField(v.stage), v.bytes_per_param),
                 function (x) { return fmt(x / 1e9, " GB"); }]];
      }
    },
    bubble: {
      title: "Pipeline bubble",
      fields: function () {
        return [text("p", "stages p", "8"), text("m", "microbatches m", "32"), text("v", "chunks per rank v", "1"),
                select("schedule", "schedule (T_F = T_B = T_W)", "1f1b",
                       [["1f1b", "1F1B (interleaved when v > 1)"], ["zb-h1", "ZB-H1"], ["zb-v", "ZB-V"],
                        ["dualpipev", "DualPipeV"]].filter(function (o) { return PIPE.schedules.indexOf(o[0]) >= 0; }))];
      },
      run: function (v) {    // layout.bubble.page_calculator
        var r = pipelineSchedule(v.p, v.m, v.v, v.schedule), pct = function (x) { return fmt(100 * x, " %"); };
        return [["fraction", "idle share of the step", r[0], pct],
                ["overhead", "idle time / ideal time", r[1], pct],
                ["in_flight", "stage-activations held at the peak", r[2], function (x) { return fmt(x, ""); }]];
      }
    },
    distill: {
      title: "Distillation bill against pretraining the teacher",
      fields: function () {
        var gpus = Object.keys(D.accelerators).filter(function (g) { return "bf16" in D.accelerators[g]; });
        return [text("visible_tokens", "usable teacher tokens T", "1e12"),
                text("price_out_per_mtok", "$ per M output tokens", "25"),
                text("price_in_per_mtok", "$ per M input tokens", "5"),
                text("input_per_output", "input tokens per returned token r", "0.2"),
                text("cached_fraction", "cached share of the input c (0-1)", "0"),
                text("hidden_per_visible", "hidden reasoning tokens per returned h", "0"),
                text("batch_discount", "batch discount b (0-1)", "0"),
                text("teacher_params", "teacher parameters", "405e9"),
                text("teacher_tokens", "teacher pretraining tokens", "15.6e12"),
                text("gpu_hour_price", "$ per GPU-hour (an assumption)", String(D.assumed_gpu_hour_price)),
                text("mfu", "teacher's MFU (0-1)", "0.4"),
                select("gpu", "accelerator", "H100-SXM", gpus.map(function (g) { return [g, g]; }))];
      },
      run: function (v) {
        var r = distillCalculator(v), money = function (x) { return "$" + fmt(x, ""); };
        return [["total_dollars", "distillation bill", r[0], money],
                ["dollars_per_visible_mtok", "per usable M tokens", r[5], money],
                ["pretraining_dollars", "pretraining the teacher", r[1], money],
                ["distill_over_pretrain", "bill / pretraining", r[3], function (x) { return fmt(x, ""); }],
                ["break_even_tokens", "break-even usable tokens", r[4], function (x) { return sci(x, ""); }]];
      }
    },
    api_cost: {
      title: "Distillation bill at API prices",
      fields: function () {
        return [text("output_tokens", "output tokens", "1e12"), text("price_out_per_mtok", "$ per M output tokens", "25"),
                text("input_tokens", "input tokens", "0"), text("price_in_per_mtok", "$ per M input tokens", "0"),
                text("batch_discount", "batch discount (0-1)", "0.5")];
      },
      run: function (v) {
        return [["dollars", "bill", apiCost(v.output_tokens, v.price_out_per_mtok, v.input_tokens, v.price_in_per_mtok,
                                            v.batch_discount), function (x) { return "$" + fmt(x, ""); }]];
      }
    },
    activation: {
      title: "Activation memory and TP traffic per layer (Korthikanti et al.)",
      fields: function () {
        return [text("seq_len", "sequence length s", "2048"), text("micro_batch", "microbatch b", "1"),
                text("d_model", "width h", "12288"), text("n_heads", "attention heads a", "96"),
                text("tp", "tensor-parallel degree t", "8"),
                select("sequence_parallel", "sequence parallelism", "False", [["False", "off"], ["True", "on"]]),
                select("recompute", "recomputation", "none", D.recompute.map(function (r) { return [r, r]; })),
                text("bytes_per_value", "bytes per value (TP traffic; 2 = bf16)", "2")];
      },
      run: function (v) {
        var sp = v.sequence_parallel === "True";
        return [["activation_bytes", "kept for the backward, per GPU",
                 activationBytesPerLayer(v.seq_len, v.micro_batch, v.d_model, v.n_heads, v.tp, sp, v.recompute),
                 function (x) { return fmt(x / 1073741824, " GiB"); }],
                ["tp_bytes", "TP all-reduce bytes sent per rank",
                 tpBytesPerLayer(v.seq_len, v.micro_batch, v.d_model, v.tp, v.bytes_per_value),
                 function (x) { return fmt(x / 1e9, " GB"); }]];
      }
    },
    checkpoint: {
      title: "Checkpoint interval and goodput",
      fields: function () {
        return [text("gpu_mtbf_seconds", "one GPU's MTBF in s (Llama 3's)", D.faults.gpu_mtbf_seconds),
                text("n_gpus", "GPUs in the job", D.faults.n_gpus),
                text("save_seconds", "a save blocks training δ, s", "120"),
                text("restart_seconds", "a restart takes R, s (a 10,000-GPU failover)", D.faults.restart_seconds),
                text("interval_seconds", "compute between saves τ, s (auto = Young's)", "auto")];
      },
      run: function (v) {
        var r = checkpointing(v), minutes = function (x) { return fmt(x / 60, " min"); };
        return [["mtbf_seconds", "job MTBF M", r[0], function (x) { return fmt(x / 3600, " h"); }],
                ["young_seconds", "Young's interval √(2δM)", r[1], minutes],
                ["daly_seconds", "Daly's interval", r[2], minutes],
                ["goodput", "goodput at τ", r[3], function (x) { return fmt(100 * x, " %"); }]];
      }
    },
    all_to_all: {
      title: "Expert-parallel all-to-all bytes per MoE layer",
      fields: function () {
        return [text("tokens", "tokens per rank and microbatch T", "4096"), text("d_model", "width d", "7168"),
                text("top_k", "experts per token k", "8"), text("ep", "expert-parallel degree", "64"),
                text("capacity_factor", "capacity factor (none = dropless)", "none"),
                text("gpus_per_node", "GPUs per node", "8"),
                text("max_nodes", "nodes a token may reach (none = any)", "4"),
                text("bytes_per_value", "bytes per value (2 = bf16)", "2")];
      },
      run: function (v) {
        var gb = function (x) { return fmt(x / 1e9, " GB"); };
        var total = epBytesPerLayer(v.tokens, v.d_model, v.top_k, v.ep, v.capacity_factor, v.bytes_per_value);
        var wires = epNodeBytes(v.tokens, v.d_model, v.top_k, v.ep, v.gpus_per_node, v.max_nodes, v.bytes_per_value);
        return [["bytes", "sent per rank, dispatch + combine, forward + backward", total, gb],
                ["nvlink_bytes", "dropless, by wire: inside a node (NVLink)", wires[0], gb],
                ["ib_bytes", "dropless, by wire: across nodes (InfiniBand)", wires[1], gb]];
      }
    }
  };

  /* The reader's language: a page whose <html lang> is Chinese (the twins in book/zh/) shows its
   * calculators' words in Chinese, from window.COURSE_CALC_I18N (calculators_i18n.js); every
   * number, field name and data-value stays as it is. A word or message with no entry stays English. */
  var I18N = window.COURSE_CALC_I18N || {};
  function pageLang(node) {
    var at = node && node.closest ? node.closest("[lang]") : null;
    var lang = (at && at.getAttribute("lang")) || "";
    return /^zh/i.test(lang) ? "zh" : "en";
  }
  function has(table, key) { return !!table && Object.prototype.hasOwnProperty.call(table, key); }
  function localText(lang, words) { var t = I18N[lang]; return t && has(t.text, words) ? t.text[words] : words; }
  function localUnit(lang, shown) {    // "41.4 days" -> "41.4 天"
    var t = I18N[lang], units = t ? t.units : null;
    if (!units) return shown;
    for (var unit in units) {
      if (has(units, unit) && shown.length > unit.length && shown.slice(-unit.length) === unit)
        return shown.slice(0, -unit.length) + units[unit];
    }
    return shown;
  }
  /* A field's label with its code name, as the form shows it: "MFU (0-1) (mfu)" in English. In
   * Chinese a label that already ends in a bracket takes the name inside it, first ("MFU（mfu，0-1）"),
   * instead of a second pair of brackets ("MFU（0-1）（mfu）"); any other label gets its own. */
  function fieldLabel(lang, label, name) {
    var shown = localText(lang, label);
    if (lang !== "zh") return shown + " (" + name + ")";
    var m = /^(.*)（([^（）]+)）$/.exec(shown);
    return m ? m[1] + "（" + name + "，" + m[2] + "）" : shown + "（" + name + "）";
  }
  function localMessage(lang, message) {    // the message as the reader sees it, in the reader's language
    var t = I18N[lang];
    if (!t || !t.messages) return message;
    t.messages.forEach(function (rule) { message = message.replace(rule[0], rule[1]); });
    return message;
  }

  function el(tag, attrs, content) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (content !== undefined) e.textContent = content;
    return e;
  }

  function build(box) {
    var name = box.getAttribute("data-calc"), spec = CALCULATORS[name];
    if (!spec || !D) return;
    box.textContent = "";
    var lang = pageLang(box), title = localText(lang, spec.title);
    var form = el("form", {"class": "course-calc-form", "aria-label": title});
    form.appendChild(el("p", {"class": "course-calc-title"}, title));
    var fields = spec.fields(), inputs = {};
    fields.forEach(function (f) {
      var id = "calc-" + name + "-" + f.name, row = el("div", {"class": "course-calc-field"});
      row.appendChild(el("label", {"for": id}, fieldLabel(lang, f.label, f.name)));
      var input;
      if (f.options) {
        input = el("select", {id: id, name: f.name});
        f.options.forEach(function (o) {
          var attrs = o[0] === f.value ? {value: o[0], selected: ""} : {value: o[0]};
          input.appendChild(el("option", attrs, localText(lang, o[1])));
        });
      } else {    // the value attribute keeps the default (form reset, defaultValue)
        input = el("input", {id: id, name: f.name, type: "text", inputmode: "decimal", autocomplete: "off",
                             spellcheck: "false", value: f.value});
      }
      inputs[f.name] = input;
      row.appendChild(input);
      form.appendChild(row);
    });
    form.appendChild(el("p", {"class": "course-calc-hint"}, localText(lang, "Numbers may end in k, M, B (or G), T, P " +
                        "(70B, 15T, 2k, 1.5M), Ki, Mi, Gi for powers of 1024 (128Ki), or be written 1e9.")));
    var results = el("div", {"class": "course-calc-results", "aria-live": "polite"});
    var error = el("p", {"class": "course-calc-error", role: "status"});
    form.appendChild(results);
    form.appendChild(error);
    box.appendChild(form);

    /* A select whose valid options depend on another field (the precisions of the chosen
     * accelerator) disables the others; if its choice became invalid it falls back to its default,
     * or else its first valid option. */
    function restrict() {
      var chosen = {};
      fields.forEach(function (f) { if (f.options) chosen[f.name] = inputs[f.name].value; });
      fields.forEach(function (f) {
        if (!f.validFor) return;
        var ok = f.validFor(chosen), sel = inputs[f.name];
        Array.prototype.forEach.call(sel.options, function (o) { o.disabled = ok.indexOf(o.value) < 0; });
        if (ok.length && ok.indexOf(sel.value) < 0) sel.value = ok.indexOf(f.value) >= 0 ? f.value : ok[0];
      });
    }

    function update() {
      restrict();
      var values = {};
      fields.forEach(function (f) {
        values[f.name] = f.options ? inputs[f.name].value : parseField(inputs[f.name].value);
      });
      results.textContent = "";
      error.textContent = "";
      error.removeAttribute("data-message");
      try {
        spec.run(values).forEach(function (r) {
          var row = el("div", {"class": "course-calc-result"});
          var id = "calc-" + name + "-out-" + r[0];
          row.appendChild(el("span", {id: id + "-label"}, localText(lang, r[1]) + (lang === "zh" ? "：" : ": ")));
          row.appendChild(el("output", {id: id, "data-key": r[0], "data-value": String(r[2]),
                                        "aria-labelledby": id + "-label"}, localUnit(lang, r[3](r[2]))));
          results.appendChild(row);
        });
      } catch (e) {
        if (!(e instanceof CalcError)) throw e;
        error.setAttribute("data-message", e.message);    // Python's own text (the tests compare it)
        error.textContent = localMessage(lang, readerMessage(e.message, spec));
      }
    }
    form.addEventListener("input", update);
    form.addEventListener("change", update);
    form.addEventListener("submit", function (ev) { ev.preventDefault(); update(); });
    update();
  }

  var started = false;
  function start() {
    started = true;
    Array.prototype.forEach.call(document.querySelectorAll("div.course-calc[data-calc]"), build);
  }

  /* A second script (calculators_plan.js) adds its calculator here, reusing these checks. */
  window.COURSE_CALC = {
    register: function (name, spec) {
      CALCULATORS[name] = spec;
      if (started) Array.prototype.forEach.call(document.querySelectorAll('div.course-calc[data-calc="' + name + '"]'), build);
    },
    calculators: CALCULATORS,
    lib: {CalcError: CalcError, fail: fail, ZeroDivision: ZeroDivision, Overflow: Overflow, parseField: parseField,
          expandSuffix: expandSuffix, readerNumber: readerNumber, readerMessage: readerMessage,
          pyFloatRepr: pyFloatRepr, pyStrRepr: pyStrRepr, show: show, intRepr: intRepr, number: number,
          positive: positive, positiveInt: positiveInt, utilisation: utilisation, choice: choice, peak: peak,
          div: div, calculator: calculator, trainingFlops: trainingFlops, trainingDays: trainingDays, fmt: fmt,
          sci: sci, text: text, select: select, localText: localText, localUnit: localUnit,
          localMessage: localMessage, fieldLabel: fieldLabel, pipelineSchedule: pipelineSchedule,
          replaySchedule: replaySchedule, PIPE: PIPE}
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
