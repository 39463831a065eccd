"""Imported only inside multiprocessing's fork server (as a preload module): make the server die
with the process that started it, so that a killed notebook kernel leaves no server behind. The
ranks forked from the server ask for the same, so the whole tree goes down together."""
import ctypes
import signal

try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except OSError:  # not Linux: the launcher's own cleanup still stops the ranks
    pass
