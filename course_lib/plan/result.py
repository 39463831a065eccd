"""What the planner returns: one dataclass whose fields each come from one chapter's calculator,
and its ``render()``, a text summary that names the chapter behind every line."""
from __future__ import annotations

from dataclasses import dataclass

from ..report import si

__all__ = ["Plan"]

_DAY = 86_400.0


@dataclass(frozen=True)
class Plan:
    """A pretraining plan. Units: counts, FLOP, bytes, seconds, days, dollars (SI throughout)."""

    # chapter 2: how big, how many tokens
    sizing: str
    n_params: float
    n_tokens: float
    compute_flops: float            # 6ND (chapter 1)
    tokens_per_param: float
    inference_flops: float          # 2N per served token, over the inference budget
    # the cluster as given
    gpu: str
    n_gpus: int
    gpus_per_node: int
    seq_len: int
    global_batch_tokens: float
    # chapters 4, 5, 11: shape, layout, memory per GPU
    n_layers: int
    d_model: int
    n_heads: int
    layout_shape: str               # "TP 8 · CP 1 · PP 16 (v=2) · DP 128" (layout.Layout.shape)
    tp: int
    cp: int
    pp: int
    dp: int
    interleave: int
    zero_stage: int
    recompute: str
    microbatches: int
    states_bytes: float
    activation_bytes: float
    memory_bytes: float
    usable_bytes: float
    # step time (the layout planner's estimate) and its parts
    layout_step_s: float
    compute_s: float
    bubble_s: float
    exposed_comm_s: dict
    # chapter 1: MFU and what it costs
    mfu_estimate: float
    mfu: float
    mfu_source: str
    step_s: float
    steps: float
    days: float
    gpu_hours: float
    price_per_gpu_hour: float
    cost: float
    # chapter 12: checkpoints and failures
    checkpoint_bytes: float
    save_s: float
    mtbf_s: float
    checkpoint_interval_s: float
    restart_s: float
    goodput: float
    wall_days: float
    # chapter 3: the loader
    loader_tokens_per_s: float
    loader_bytes_per_s: float
    bytes_per_token: int
    # chapter 7: numerics
    dtype: str
    caveats: tuple
    layout_explanation: str = ""
    # precision="fp8" only: the MFU used, restated against the chip's dense FP8 peak (None under BF16)
    mfu_vs_fp8: float | None = None
    # chapter 16: the batch against the critical batch at the predicted final loss (batch.law)
    batch_note: str = ""

    @property
    def fits(self) -> bool:
        """Memory per GPU within the usable share of HBM (always true for a plan returned)."""
        return self.memory_bytes <= self.usable_bytes

    def render(self) -> str:
        """The plan as text, one line per stage, each naming the chapter that explains it."""
        source = self.mfu_source + (f"; the layout estimates {self.mfu_estimate:.1%}"
                                    if self.mfu_source == "given" else "")
        comm = ", ".join(f"{k.upper()} {v:.2f}" for k, v in self.exposed_comm_s.items())
        lines = [
            f"[ch02 sizing]    {si(self.n_params)} parameters, {si(self.n_tokens)} tokens "
            f"({self.tokens_per_param:.0f} per parameter; {self.sizing}); 6ND = {self.compute_flops:.3g} FLOP"
            + (f"; inference {self.inference_flops:.3g} FLOP" if self.inference_flops else ""),
            f"[ch04/05/11]     {self.n_layers} layers × d {self.d_model}, {self.n_heads} heads on "
            f"{self.n_gpus} × {self.gpu}: {self.layout_shape}, ZeRO-{self.zero_stage}, "
            f"recompute={self.recompute}, m={self.microbatches} microbatches",
            f"[ch04/11 memory] {self.memory_bytes / 1e9:.1f} GB of {self.usable_bytes / 1e9:.1f} GB usable "
            f"per GPU (states {self.states_bytes / 1e9:.1f}, activations {self.activation_bytes / 1e9:.1f})",
            f"[ch05/11 step]   estimated {self.layout_step_s:.2f} s = compute {self.compute_s:.2f} + bubble "
            f"{self.bubble_s:.2f} + exposed comm ({comm}) s",
            f"[ch01 MFU]       {self.mfu:.1%} ({source}) → step {self.step_s:.2f} s × {self.steps:.3g} steps",
            f"[ch01 time/cost] {self.days:.1f} days, {self.gpu_hours / 1e6:.3g}M GPU-hours, "
            f"${self.cost / 1e6:.3g}M at ${self.price_per_gpu_hour:g}/GPU-hour",
            f"[ch12 failures]  checkpoint {self.checkpoint_bytes / 1e12:.2f} TB saved in {self.save_s:.1f} s; "
            f"job MTBF {self.mtbf_s / 3600:.1f} h → checkpoint every {self.checkpoint_interval_s / 60:.1f} min, "
            f"goodput {self.goodput:.1%} → {self.wall_days:.1f} days of wall time",
            f"[ch03 loader]    {si(self.loader_tokens_per_s)} tokens/s for the cluster "
            f"({si(self.loader_tokens_per_s / self.n_gpus)} per GPU), {si(self.loader_bytes_per_s)}B/s "
            f"at {self.bytes_per_token} bytes per token",
        ]
        lines += [f"[ch16 batch]     {self.batch_note}"] if self.batch_note else []
        lines += [f"[ch07 numerics]  {c}" for c in self.caveats]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()
