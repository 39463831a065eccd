"""Inputs that exercise notebooks load (a recorded loss trace, the MoE schemes to classify).

They live here, not in the question banks, because a graded run hides the banks from the
submission's sandbox while the notebook still needs its inputs.
"""
from __future__ import annotations

# The schemes of chapter 8's classification question: name -> MoE keyword arguments.
MOE_SCHEMES = {
    "token_choice_no_capacity": dict(router="token"),
    "token_choice_fcfs_per_sequence": dict(router="token", capacity_factor=1.0, group="sequence",
                                           priority="position"),
    "token_choice_top2_gshard_rank": dict(router="token", top_k=2, capacity_factor=1.0,
                                          group="sequence", priority="rank"),
    "token_choice_score_priority_batch": dict(router="token", capacity_factor=1.0, group="batch",
                                              priority="score"),
    "expert_choice_per_sequence": dict(router="expert", capacity_factor=1.0, group="sequence"),
    "expert_choice_batch": dict(router="expert", capacity_factor=1.0, group="batch"),
}


def exercise_trace() -> list[float]:
    """Chapter 6's exercise loss trace (one value per step; a diverged step is NaN)."""
    from course_lib.stability import ablation

    return [float("nan") if v is None else v for v in ablation.load()["spikes"]["exercise"]["loss"]]
