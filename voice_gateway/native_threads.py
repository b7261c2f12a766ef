"""The BLAS thread pool of a gateway process: one thread by default (`VG_BLAS_THREADS`).

numpy's OpenBLAS keeps a pool of one thread per core, and after each call that used the pool
its threads spin, waiting for the next call, for tens of milliseconds. The gateway's numpy work
is many small pieces from many calls at once (whisper's log-mel before each decode, each call's
end-of-turn features and echo figures), so the pool saves little and its spinning takes the CPU
that other calls' decodes and the event loop need. Measured on a 2-vCPU EPYC (bench/stt_cpu.py,
whisper tiny.en on 13 real recordings): with the default pool a decode took 77 ms and 180 ms of
CPU, 31 ms of it spent spinning after the decode returned; with one thread 78 ms and 83 ms of
CPU, nothing after (0.46x the CPU per decode).

threadpoolctl changes the pool of a library already loaded (numpy is, by then), whatever the
environment said, where an `OPENBLAS_NUM_THREADS` set after numpy's import does nothing. Its
rule: one live thread at a time may set OpenBLAS's count (the first that does; others are
ignored), so the gateway sets and restores it from the thread that serves. CTranslate2's own
OpenMP threads are `VG_STT_THREADS` and are left alone."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy  # noqa: F401  (loads OpenBLAS, so that the limit reaches it)
from threadpoolctl import threadpool_info, threadpool_limits

log = logging.getLogger(__name__)


def blas_threads() -> list[int]:
    """The thread count of each BLAS library loaded in this process."""
    return [int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]


def limit_blas(threads: int) -> Callable[[], None]:
    """Cap every loaded BLAS library at `threads` (0: leave them as they are); returns what
    puts the previous limits back."""
    if threads <= 0:
        return lambda: None
    before = blas_threads()
    limits = threadpool_limits(limits=threads, user_api="blas")
    log.debug("BLAS threads %s -> %s", before, blas_threads())
    return limits.restore_original_limits
