"""Moved to ``course_lib.layout`` (its ``explanation``, ``published`` and ``widget`` modules); this
module only keeps the old import path working for pages and code written before the move."""
from course_lib.layout.explanation import explain, gb  # noqa: F401
from course_lib.layout.published import (  # noqa: F401
    LLAMA3_TABLE4_MFU,
    MEGATRON_2021,
    llama3_405b,
    megatron_1t,
    mfu_counting_attention,
)
from course_lib.layout.widget import layout_calculator, layout_widget, render_layout  # noqa: F401

__all__ = ["explain", "gb", "mfu_counting_attention", "LLAMA3_TABLE4_MFU", "llama3_405b", "megatron_1t",
           "MEGATRON_2021", "layout_calculator", "render_layout", "layout_widget"]
