"""What the planner returns: one dataclass whose fields each come from one chapter's calculator,
and its ``render()``, a text summary that names the chapter behind every line."""
from __future__ import annotations

from dataclasses import dataclass

from ..i18n import tr, translate
from ..report import si, text_width

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

    def render(self, lang: str = "en") -> str:
        """The plan as text, one line per stage, each naming the chapter that explains it; its words
        in ``lang`` ("en" or "zh", course_lib.i18n: the planner's own sentences, such as the caveats,
        are looked up whole, with their numbers)."""
        est = tr("; the layout estimates {estimate:.1%}", lang, estimate=self.mfu_estimate)
        source = translate(self.mfu_source, lang) + (est if self.mfu_source == "given" else "")
        comm = tr(", ", lang, context="list").join(f"{k.upper()} {v:.2f}" for k, v in self.exposed_comm_s.items())
        lines = [
            ("[ch02 sizing]", tr("{n_params} parameters, {n_tokens} tokens ({per_param:.0f} per parameter; {sizing}); "
                                 "6ND = {flops:.3g} FLOP", lang, n_params=si(self.n_params), n_tokens=si(self.n_tokens),
                                 per_param=self.tokens_per_param, sizing=translate(self.sizing, lang),
                                 flops=self.compute_flops)
             + (tr("; inference {flops:.3g} FLOP", lang, flops=self.inference_flops) if self.inference_flops else "")),
            ("[ch04/05/11]", tr("{n_layers} layers × d {d_model}, {n_heads} heads on {n_gpus} × {gpu}: {shape}, "
                                "ZeRO-{zero}, recompute={recompute}, m={m} microbatches", lang,
                                n_layers=self.n_layers, d_model=self.d_model, n_heads=self.n_heads, n_gpus=self.n_gpus,
                                gpu=self.gpu, shape=self.layout_shape, zero=self.zero_stage, recompute=self.recompute,
                                m=self.microbatches)),
            ("[ch04/11 memory]", tr("{memory:.1f} GB of {usable:.1f} GB usable per GPU (states {states:.1f}, "
                                    "activations {activations:.1f})", lang, memory=self.memory_bytes / 1e9,
                                    usable=self.usable_bytes / 1e9, states=self.states_bytes / 1e9,
                                    activations=self.activation_bytes / 1e9)),
            ("[ch05/11 step]", tr("estimated {step:.2f} s = compute {compute:.2f} + bubble {bubble:.2f} + exposed comm "
                                  "({comm}) s", lang, step=self.layout_step_s, compute=self.compute_s,
                                  bubble=self.bubble_s, comm=comm)),
            ("[ch01 MFU]", tr("{mfu:.1%} ({source}) → step {step:.2f} s × {steps:.3g} steps", lang, mfu=self.mfu,
                              source=source, step=self.step_s, steps=self.steps)),
            ("[ch01 time/cost]", tr("{days:.1f} days, {gpu_hours:.3g}M GPU-hours, ${cost:.3g}M at ${price:g}/GPU-hour",
                                    lang, days=self.days, gpu_hours=self.gpu_hours / 1e6, cost=self.cost / 1e6,
                                    price=self.price_per_gpu_hour)),
            ("[ch12 failures]", tr("checkpoint {size:.2f} TB saved in {save:.1f} s; job MTBF {mtbf:.1f} h → checkpoint "
                                   "every {interval:.1f} min, goodput {goodput:.1%} → {wall:.1f} days of wall time",
                                   lang, size=self.checkpoint_bytes / 1e12, save=self.save_s, mtbf=self.mtbf_s / 3600,
                                   interval=self.checkpoint_interval_s / 60, goodput=self.goodput,
                                   wall=self.wall_days)),
            ("[ch03 loader]", tr("{rate} tokens/s for the cluster ({per_gpu} per GPU), {bytes}B/s at {per_token} bytes "
                                 "per token", lang, rate=si(self.loader_tokens_per_s),
                                 per_gpu=si(self.loader_tokens_per_s / self.n_gpus), bytes=si(self.loader_bytes_per_s),
                                 per_token=self.bytes_per_token)),
        ]
        lines += [("[ch16 batch]", translate(self.batch_note, lang))] if self.batch_note else []
        lines += [("[ch07 numerics]", translate(c, lang)) for c in self.caveats]
        tags = [tr(tag, lang) for tag, _ in lines]
        width = max(17, 1 + max(map(text_width, tags)))       # English: the tags in a column 17 wide
        return "\n".join(tag + " " * (width - text_width(tag)) + text for tag, (_, text) in zip(tags, lines))

    def __str__(self) -> str:
        return self.render()
