"""How large a batch is still useful, and how many GPUs it allows: the planner's batch ceiling.

The critical batch grows as the loss falls. Kaplan et al. 2020 (arXiv 2001.08361, eq. 1.4 / 5.3)
fit B_crit(L) ≈ B_* / L^(1/α_B) with B_* ≈ 2·10⁸ tokens and α_B ≈ 0.21, L the test loss in nats per
token of GPT-2's BPE on WebText2; the constants belong to that tokenizer and that data (a loss in
another unit or on other text is another law), and to the gradient noise scale B_simple they
measured it with. ``"tiny_gpt"`` is the same form fitted to this chapter's own runs (byte-level
loss on the course corpus, data/batch_critical.json): it shows the method, not a size to plan with.

Past B_crit extra examples buy ever fewer steps (chapter 16), so it caps the global batch; one
sequence per replica then caps the data-parallel degree at floor(B_crit / seq_len) (chapter 4,
``comm.max_dp_degree``), and the GPUs that follow multiply it by what splits one sequence's work.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from .. import comm
from .._validate import calculator, choice, positive, positive_int

__all__ = ["LAWS", "law", "critical_batch_tokens", "largest_useful_batch", "dp_ceiling", "gpus_allowed"]

DATA = Path(__file__).resolve().parents[2] / "data" / "batch_critical.json"

LAWS = {
    "kaplan2020": {
        "b_star": 2e8, "alpha_b": 0.21, "unit": "tokens",
        "loss_unit": "nats per token, GPT-2 BPE, WebText2 test set",
        "source": "Kaplan et al. 2020, arXiv 2001.08361, eq. (1.4) and §5.1 (fit of Fig. 10)",
        "limits": "fitted on their runs' losses (about 2.5 to 6 nats/token); another tokenizer, "
                  "dataset or a loss far below that range needs its own fit",
    },
}


@lru_cache(maxsize=1)
def _tiny() -> dict:
    fit = json.loads(DATA.read_text())["law"]
    return {"b_star": fit["b_star"], "alpha_b": fit["alpha_b"], "unit": "tokens",
            "loss_unit": "nats per byte, the course corpus (validation split)",
            "source": f"this chapter's sweep, {fit['command']}",
            "limits": f"fitted between losses {fit['loss_min']:.2f} and {fit['loss_max']:.2f} on a "
                      f"{fit['n_params']:,}-parameter model: a demonstration of the method"}


def law(law_name: str = "kaplan2020") -> dict:
    """The constants of the law ``law_name`` ("kaplan2020" or "tiny_gpt") with their provenance."""
    choice("law_name", law_name, ("kaplan2020", "tiny_gpt"))
    return dict(LAWS[law_name]) if law_name in LAWS else _tiny()


@calculator
def critical_batch_tokens(loss: float, law_name: str = "kaplan2020") -> float:
    """B_crit(L) = B_* / L^(1/α_B) in tokens at loss ``loss`` (in the law's own loss unit)."""
    c = law(law_name)
    return c["b_star"] / positive("loss", loss) ** (1 / c["alpha_b"])


@calculator
def largest_useful_batch(loss: float, seq_len: int, law_name: str = "kaplan2020") -> int:
    """The largest global batch in whole sequences that stays within B_crit at ``loss``: past it,
    doubling the batch saves at most a quarter of the steps for twice the examples per step."""
    s = positive_int("seq_len", seq_len)
    return int(math.floor(critical_batch_tokens(loss, law_name) / s + 1e-9))


@calculator
def dp_ceiling(loss: float, seq_len: int, pp: int = 1, law_name: str = "kaplan2020") -> int:
    """Most data-parallel replicas at ``loss``: floor(B_crit / (seq_len·pp)), one sequence per
    replica and microbatch, with ``pp`` ≥ 1 microbatches per pipeline (m ≥ p keeps its bubble under
    a half). ``comm.max_dp_degree`` on the law's B_crit."""
    p = positive_int("pp", pp)
    s = positive_int("seq_len", seq_len)
    b = critical_batch_tokens(loss, law_name)
    if b < s * p:
        raise ValueError(f"loss ({loss!r}) gives a critical batch of {b:.4g} tokens, less than one sequence "
                         f"per pipeline stage (seq_len={s} × pp={p}): not even one replica fits")
    return comm.max_dp_degree(b, s * p)


@calculator
def gpus_allowed(loss: float, seq_len: int, tp: int = 1, cp: int = 1, pp: int = 1,
                 law_name: str = "kaplan2020") -> int:
    """GPUs the batch keeps busy: dp_ceiling × tp × cp × pp (tensor and context parallelism split
    one sequence's work; pipeline stages each need a microbatch of the same batch)."""
    t = positive_int("tp", tp)
    c = positive_int("cp", cp)
    return dp_ceiling(loss, seq_len, pp, law_name) * t * c * positive_int("pp", pp)
