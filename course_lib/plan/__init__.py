"""Chapter 13, the capstone: plan a pretraining run end to end with the chapters' calculators
(``planner.plan``, returning a ``result.Plan`` whose ``render()`` names the chapter of every line),
and check the planner against the runs labs have published (``runs.RUNS``, ``runs.check_published``)
and, held out and reported apart, NVIDIA's published FP8 benchmark rows (``published_fp8``,
``runs.check_fp8_held_out``); ``published_fp8.untimed_parts`` lists what DeepSeek-V3's timing leaves out."""
from .planner import DEFAULT_PRICE_PER_GPU_HOUR, LLAMA3_GPU_MTBF_S, model_shape, plan
from .result import Plan

__all__ = ["plan", "Plan", "model_shape", "DEFAULT_PRICE_PER_GPU_HOUR", "LLAMA3_GPU_MTBF_S"]
