"""Moved to ``course_lib.layout.stepmodel`` (the layout planner's package, ``course_lib.layout``); this
module only keeps the old import path working for pages and code written before the move."""
from course_lib.layout.stepmodel import (  # noqa: F401
    ADAM_BYTES_PER_PARAM,
    ATTENTION_CEILING,
    attention_efficiency,
    gemm_seconds,
    layer_time,
    LayerShape,
    MATMUL_CEILING,
    optimizer_seconds,
    PROCESSORS,
    SUSTAINED,
)

__all__ = ['MATMUL_CEILING', 'PROCESSORS', 'ATTENTION_CEILING', 'gemm_seconds', 'attention_efficiency', 'LayerShape', 'layer_time', 'optimizer_seconds', 'ADAM_BYTES_PER_PARAM', 'SUSTAINED']
