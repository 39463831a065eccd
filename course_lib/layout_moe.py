"""Moved to ``course_lib.layout.moe`` (the layout planner's package, ``course_lib.layout``); this
module only keeps the old import path working for pages and code written before the move."""
from course_lib.layout.moe import (  # noqa: F401
    all_to_all_seconds,
    DEEPSEEK_V2,
    DEEPSEEK_V3,
    expert_degrees,
    MoE,
    routed_seconds,
)

__all__ = ['MoE', 'DEEPSEEK_V3', 'DEEPSEEK_V2', 'expert_degrees', 'routed_seconds', 'all_to_all_seconds']
