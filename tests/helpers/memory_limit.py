"""Commands run in a child process under an address-space limit (``RLIMIT_AS``): a test of a file that would cost
GBs to read asserts that it is refused within bounds, and a regression ends in the child's MemoryError, not in the
machine's memory running out."""

import os
import resource
import subprocess


def run_under_memory_limit(argv, limit_bytes: int, timeout_s: float) -> subprocess.CompletedProcess:
    """``argv`` run to its end with at most ``limit_bytes`` of address space and ``timeout_s`` seconds; its output as
    text. One BLAS thread: each thread's buffers count towards the limit."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(argv, preexec_fn=limit, env=environment, capture_output=True, text=True, timeout=timeout_s)
