"""course_lib: the one shared library of "Pretraining, Measured".

One module per concept (``hardware``, ``flops``, ``model``, ``dist``, ``grading``, ...); import
the module you need, e.g. ``from course_lib import flops``. Nothing here holds global state.
"""
__version__ = "0.1.0"
