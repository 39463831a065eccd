"""Chapter 1's mechanism: why training costs 6N FLOPs per token — one linear layer's three matrix
products (forward Y = X·W, backward dX = dY·Wᵀ and dW = Xᵀ·dY), each 2 FLOPs per weight per
token, and the attention scores that sit outside N — drawn from ``course_lib.flops``."""
from __future__ import annotations

from typing import NamedTuple

from .. import flops, plots
from .._validate import flag, positive, positive_int
from ..i18n import tr

__all__ = ["Gemm", "linear_gemms", "token_flops", "six_n"]


class Gemm(NamedTuple):
    """One matrix product ``out = left · right``: each operand as (symbol, rows, cols), and its
    FLOPs, 2·m·k·n for an (m×k)·(k×n) product (one multiply and one add per term)."""
    role: str
    formula: str
    left: tuple[str, int, int]
    right: tuple[str, int, int]
    out: tuple[str, int, int]
    flops: int


def linear_gemms(tokens: int = 4, d_in: int = 3, d_out: int = 5) -> list[Gemm]:
    """The three products of a training step through ``Y = X·W`` for ``tokens`` tokens, with
    W ∈ R^(d_in×d_out): the forward, the input gradient dX = dY·Wᵀ that back-propagation passes on,
    and the weight gradient dW = Xᵀ·dY the optimizer uses. Each has the same T·d_in·d_out terms,
    so each costs 2·T·N with N = d_in·d_out; together ``flops.training_flops(N, T)``."""
    t = positive_int("tokens", tokens)
    a = positive_int("d_in", d_in)
    b = positive_int("d_out", d_out)
    shapes = [("forward", "Y = X·W", ("X", t, a), ("W", a, b), ("Y", t, b)),
              ("backward, input", "dX = dY·Wᵀ", ("dY", t, b), ("Wᵀ", b, a), ("dX", t, a)),
              ("backward, weight", "dW = Xᵀ·dY", ("Xᵀ", a, t), ("dY", t, b), ("dW", a, b))]
    return [Gemm(role, formula, left, right, out, 2 * left[1] * left[2] * right[2])
            for role, formula, left, right, out in shapes]


def token_flops(n_layers: int = 32, d_model: int = 4096, seq_len: int = 4096, n_params: float = 7e9,
                causal: bool = True) -> dict[str, float]:
    """Training FLOPs per token of a whole model, split as the diagram draws them: the dense
    matmuls' forward, input gradient and weight gradient (2N each, ``flops.training_flops``), and
    the attention scores' forward (``flops.attention_flops_per_token``) and backward (twice it)."""
    n = positive("n_params", n_params)
    c = flag("causal", causal)
    dense = flops.training_flops(n, 1.0) / 3
    attn = flops.attention_flops_per_token(n_layers, d_model, seq_len, causal=c)
    return {"forward": dense, "backward, input": dense, "backward, weight": dense,
            "attention forward": attn, "attention backward": 2 * attn}


# operand kind -> (colour, hatch, legend label); colour never alone: each has its own hatch and symbol
_KIND = {"weight": (plots.THEORY, None, "weights W, Wᵀ and their gradient dW"),
         "act": (plots.ACCENT, "..", "activations X, Xᵀ, Y"),
         "grad": (plots.NEUTRAL, "///", "activation gradients dY, dX")}
_ROLE_HATCH = {"forward": None, "backward, input": "///", "backward, weight": "xx"}
_SHORT = {"forward": "Y = X·W", "backward, input": "dX", "backward, weight": "dW"}
_ROLE_COLOUR = {"forward": plots.THEORY, "backward, input": plots.NEUTRAL, "backward, weight": plots.PALETTE[4]}


def _kind(symbol: str) -> str:
    return "weight" if symbol in ("W", "Wᵀ", "dW") else "grad" if symbol.startswith("d") else "act"


def six_n(tokens: int = 4, d_in: int = 3, d_out: int = 5, n_layers: int = 32, d_model: int = 4096,
          seq_len: int = 4096, n_params: float = 7e9, lang: str = "en"):
    """Top: the three products of ``linear_gemms`` as grids of their elements, one row each, with
    one dot product of the forward outlined and each product's FLOPs. Bottom: a whole model's
    training FLOPs per token (``token_flops``), the dense 6N as three equal parts beside the
    attention scores at ``seq_len``, which no parameter count contains. ``lang="zh"``: its words in
    Chinese (``course_lib.i18n``)."""
    import matplotlib.patches as mpatches
    gemms = linear_gemms(tokens, d_in, d_out)
    n = d_in * d_out
    fig, (ax, bar) = plots.figure(nrows=2, figsize=(6.4, 5.2), height_ratios=[3.4, 1.2], lang=lang)
    row_h = max(max(g.left[1], g.right[1], g.out[1]) for g in gemms) + 2.2
    text_x = max(g.left[2] + g.right[2] + g.out[2] for g in gemms) + 2 * 1.4 + 1.0
    for i, g in enumerate(gemms):
        y_top = (len(gemms) - i) * row_h - 1.4
        x = 0.0
        for j, (sym, rows, cols) in enumerate((g.left, g.right, g.out)):
            colour, hatch, _ = _KIND[_kind(sym)]
            for r in range(rows):
                for c in range(cols):
                    ax.add_patch(mpatches.Rectangle((x + c, y_top - r - 1), 1, 1, facecolor=colour, alpha=0.55,
                                                    hatch=hatch, edgecolor="white", linewidth=0.8))
            ax.text(x + cols / 2, y_top - rows - 0.35, f"{sym}  {rows}×{cols}", ha="center", va="top", fontsize=8)
            if i == 0:                    # one output element = one row of X times one column of W
                hl = {0: (x, y_top - 1, cols, 1), 1: (x, y_top - rows, 1, rows), 2: (x, y_top - 1, 1, 1)}[j]
                ax.add_patch(mpatches.Rectangle(hl[:2], hl[2], hl[3], facecolor="none", edgecolor="black",
                                                linewidth=1.6, zorder=3))
            x += cols
            if j < 2:
                ax.text(x + 0.7, y_top - 1.5, "·" if j == 0 else "=", ha="center", va="center", fontsize=14)
                x += 1.4
        m, k = g.left[1], g.left[2]
        ax.text(text_x, y_top - 0.2, f"{tr(g.role, lang)}: {g.formula}", ha="left", va="top", fontsize=9,
                fontweight="bold")
        ax.text(text_x, y_top - 1.5, f"2·{m}·{k}·{g.right[2]} = {g.flops} FLOP\n" + tr("= 2 per weight per token", lang),
                ha="left", va="top", fontsize=8)
    total = sum(g.flops for g in gemms)
    ax.text(0, -0.6, tr("outlined: one output element, a dot product of length d_in = {d} ({d} multiplies, {d} adds)",
                        lang, d=d_in), ha="left", va="top", fontsize=8)
    ax.set_title(tr("one linear layer, T = {t} tokens, W is {a}×{b}: N = {n} weights\n"
                    "three products of {each} FLOP = {total} = 6·N·T", lang, t=tokens, a=d_in, b=d_out, n=n,
                    each=gemms[0].flops, total=total)
                 + f" (flops.training_flops({n}, {tokens}) = {flops.training_flops(n, tokens):g})", fontsize=9)
    ax.set_xlim(-0.2, text_x + 12.5)
    ax.set_ylim(-1.6, len(gemms) * row_h - 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    tf = token_flops(n_layers, d_model, seq_len, n_params)
    g = 1e9
    left = 0.0
    for role in ("forward", "backward, input", "backward, weight"):
        bar.barh(1, tf[role] / g, left=left, color=_ROLE_COLOUR[role], hatch=_ROLE_HATCH[role],
                 edgecolor="white", linewidth=0.6, label=f"{tr(role, lang)} (2N)")
        bar.text(left + tf[role] / g / 2, 1, f"{_SHORT[role]}: 2N", ha="center", va="center", fontsize=8,
                 bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"})
        left += tf[role] / g
    a_f, a_b = tf["attention forward"] / g, tf["attention backward"] / g
    bar.barh(0, a_f, color=plots.ACCENT, edgecolor="black", linewidth=0.6,
             label=tr("attention scores, forward", lang))
    bar.barh(0, a_b, left=a_f, color=plots.ACCENT, hatch="///", edgecolor="black", linewidth=0.6,
             label=tr("attention scores, backward", lang))
    share = flops.attention_fraction(n_layers, d_model, seq_len, n_params)
    bar.text(a_f + a_b + 0.6, 0, tr("QKᵀ and A·V at s = {s} (causal): {g:.1f} GFLOP, {share:.1%} of 6N; "
                                    "no weights, grows with s", lang, s=seq_len, g=a_f + a_b, share=share),
             ha="left", va="center", fontsize=8)
    bar.set_yticks([0, 1], [tr("attention", lang), tr("dense 6N", lang)], fontsize=8)
    bar.set_xlim(0, left * 1.02)
    bar.set_ylim(-0.6, 1.6)
    bar.set_xlabel(tr("training GFLOP per token, {b:g}B model (L = {L}, d = {d}): 6N = {six:.0f}", lang,
                      b=n_params / 1e9, L=n_layers, d=d_model, six=left), fontsize=8)
    bar.tick_params(labelsize=8)
    bar.grid(False)
    handles = [mpatches.Patch(facecolor=c, alpha=0.55, hatch=h, edgecolor="white", label=tr(lab, lang))
               for c, h, lab in _KIND.values()]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8)
    return fig
