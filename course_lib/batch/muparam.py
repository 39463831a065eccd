"""µP (Yang et al. 2022, arXiv 2203.03466) for the course's tiny GPT, from scratch, beside
Microsoft's ``mup`` package (the reference implementation) on the same model.

Width grows with d_model at a fixed head size (heads = d_model / head_dim), so attention's
1/√d_head is unchanged and µP's 1/d attention is not needed. Against a base width, with
m = fan_in / base fan_in, µP for Adam changes three things:

* matrices whose two dimensions both grow (qkv, proj, up, down): initial std σ/√m, learning rate lr/m;
* the readout (the LM head, untied from the embedding): its input is multiplied by 1/m;
* everything else (embeddings, biases, LayerNorm): unchanged ("vector-like").

At the base width (m = 1) the µP model *is* the standard one. ``mup_reference`` builds the same
model with ``mup.MuReadout``, ``mup.set_base_shapes``, ``mup.init.normal_`` and ``mup.MuAdam``;
``compare_with_mup`` checks that the two give the same initial tensors, the same learning rate
per parameter and the same parameters after a few Adam steps, bit for bit.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..model import GPT, GPTConfig
from .._validate import choice, positive, positive_int

__all__ = ["width_config", "Readout", "build", "param_lrs", "optimizer", "mup_reference", "compare_with_mup"]


def width_config(width: int, head_dim: int = 8, seq_len: int = 32, n_layers: int = 2) -> GPTConfig:
    """The tiny GPT at ``width`` (untied head, ``width/head_dim`` heads of ``head_dim``)."""
    w = positive_int("width", width)
    h = positive_int("head_dim", head_dim)
    if w % h:
        raise ValueError(f"width ({width!r}) must be a multiple of head_dim ({head_dim!r})")
    return GPTConfig(seq_len=seq_len, n_layers=n_layers, n_heads=w // h, d_model=w, attn="sdpa",
                     tie_embeddings=False)


class Readout(nn.Linear):
    """µP's output layer: a Linear whose input is scaled by ``output_mult / width_mult``."""

    def __init__(self, d_in: int, d_out: int, width_mult: float, output_mult: float = 1.0) -> None:
        super().__init__(d_in, d_out, bias=False)
        self.width_mult, self.output_mult = width_mult, output_mult

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(self.output_mult * x / self.width_mult)


def _mults(cfg: GPTConfig, base: GPTConfig) -> dict[str, float | None]:
    """Per parameter: fan-in width multiplier if both dims grow with width, else None.

    A dimension grows with width when it differs between the base and a model twice as wide."""
    shapes = {n: p.shape for n, p in GPT(base).named_parameters()}
    wide = {n: p.shape for n, p in GPT(base.with_(d_model=2 * base.d_model,
                                                  n_heads=2 * base.n_heads)).named_parameters()}
    out = {}
    for n, p in GPT(cfg).named_parameters():
        grows = [a != b for a, b in zip(shapes[n], wide[n])]
        out[n] = p.shape[1] / shapes[n][1] if len(grows) == 2 and all(grows) else None
    return out


def _std(name: str, cfg: GPTConfig) -> float:
    return 0.02 / (2 * cfg.n_layers) ** 0.5 if name.endswith(("proj.weight", "down.weight")) else 0.02


def build(cfg: GPTConfig, base: GPTConfig, seed: int = 0, parametrization: str = "mup") -> GPT:
    """The GPT at ``cfg`` under ``"mup"`` (relative to ``base``) or ``"sp"`` (GPT-2's fixed std,
    a plain head). Initialised from the global generator seeded with ``seed`` inside a forked RNG
    (so it draws exactly what ``mup.init.normal_`` would, and leaves the caller's RNG alone)."""
    choice("parametrization", parametrization, ("mup", "sp"))
    model = GPT(cfg)
    mults = _mults(cfg, base)
    if parametrization == "mup":
        model.head = Readout(cfg.d_model, cfg.vocab_size, cfg.d_model / base.d_model)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0 if name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight")) else 0.0)
                continue
            scale = 1
            if parametrization == "mup" and mults[name] is not None:
                scale = mults[name] ** -0.5
            p.normal_(mean=0.0, std=_std(name, cfg) * scale)
    return model


def param_lrs(model: GPT, base: GPTConfig, lr: float, parametrization: str = "mup") -> dict[str, float]:
    """Adam's learning rate for each parameter: lr/m for width×width matrices under µP, else lr."""
    lr = positive("lr", lr)
    choice("parametrization", parametrization, ("mup", "sp"))
    mults = _mults(model.cfg, base)
    return {n: lr / mults[n] if parametrization == "mup" and mults[n] is not None else lr
            for n, _ in model.named_parameters()}


def optimizer(model: GPT, base: GPTConfig, lr: float, parametrization: str = "mup",
              betas: tuple[float, float] = (0.9, 0.95)) -> torch.optim.Adam:
    """Adam with one parameter group per learning rate (``param_lrs``), no weight decay."""
    lrs = param_lrs(model, base, lr, parametrization)
    groups: dict[float, list] = {}
    for n, p in model.named_parameters():
        groups.setdefault(lrs[n], []).append(p)
    return torch.optim.Adam([{"params": ps, "lr": g} for g, ps in groups.items()], lr=lr, betas=betas)


def mup_reference(cfg: GPTConfig, base: GPTConfig, seed: int, lr: float,
                  betas: tuple[float, float] = (0.9, 0.95)) -> tuple[GPT, torch.optim.Optimizer]:
    """The same model parametrised by Microsoft's ``mup`` (1.0.0): MuReadout head, base shapes
    from ``base`` and a model twice as wide, ``mup.init.normal_`` with the same stds, MuAdam."""
    import mup

    def make(c: GPTConfig) -> GPT:
        m = GPT(c)
        m.head = mup.MuReadout(c.d_model, c.vocab_size, bias=False)
        return m

    model = make(cfg)
    mup.set_base_shapes(model, make(base), delta=make(base.with_(d_model=2 * base.d_model,
                                                                 n_heads=2 * base.n_heads)),
                        rescale_params=False)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0 if name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight")) else 0.0)
            else:
                mup.init.normal_(p, mean=0, std=_std(name, cfg))
    return model, mup.MuAdam(model.parameters(), lr=lr, betas=betas)


def compare_with_mup(width: int, base_width: int, lr: float = 1e-2, steps: int = 3, seed: int = 0,
                     batch: int = 4) -> dict:
    """The course's µP against ``mup`` at ``width``: initial tensors, per-parameter learning rates
    and the parameters after ``steps`` Adam steps on the same batches, each compared exactly."""
    from .. import corpus
    cfg, base = width_config(width), width_config(base_width)
    ours = build(cfg, base, seed)
    opt = optimizer(ours, base, lr)
    ref, ref_opt = mup_reference(cfg, base, seed, lr)
    same_init = all(torch.equal(a, b) for a, b in zip(ours.parameters(), ref.parameters()))
    ref_lr = {id(p): g["lr"] for g in ref_opt.param_groups for p in g["params"]}
    lrs = param_lrs(ours, base, lr)
    same_lr = all(lrs[n] == ref_lr[id(p)] for n, p in ref.named_parameters())
    split = corpus.load()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = corpus.get_batch(split.train, batch, cfg.seq_len, gen)
        for m, o in ((ours, opt), (ref, ref_opt)):
            o.zero_grad()
            m(x, y)[1].backward()
            o.step()
    same_after = all(torch.equal(a, b) for a, b in zip(ours.parameters(), ref.parameters()))
    return {"width": width, "base_width": base_width, "same_init": same_init, "same_lr": same_lr,
            "same_after_steps": same_after, "steps": steps,
            "lrs": sorted({round(v / lr, 12) for v in lrs.values()})}
