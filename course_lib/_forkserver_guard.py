"""Imported only inside multiprocessing's fork server (as a preload module): make the server die
with the process that started it, so that a killed notebook kernel leaves no server behind. The
ranks forked from the server ask for the same, so the whole tree goes down together. (Not done
in ``course_lib.dist`` at import: that would tie a notebook kernel to its own parent.)"""
from course_lib.dist_rank import _die_with_parent

_die_with_parent()
