"""Work run in a child process under an address-space limit (``RLIMIT_AS``): how a test shows that a hostile input
is refused within seconds and within memory, not by an allocation failure (nor by the machine's memory running out).

:func:`run_under_memory_limit` runs a command under a fixed limit. For :func:`run_probes`, the child imports what
the model families import (torch, transformers, the adapters), measures its address space then (the baseline: about
0.7 GB), and limits itself to that plus :data:`HEADROOM_BYTES`. Each probe is a call
``"module:function"`` with JSON arguments; its outcome is the error it raised (type and message, or None) and the
seconds it took. One child runs all the probes of a test module, so that the imports are paid once."""

import json
import os
import resource
import subprocess
import sys

HEADROOM_BYTES = 2 << 30  # over the baseline: what refusing may cost; building or reading the hostile sizes costs 4-128 GB
SECONDS_PER_PROBE = 20.0  # a probe still running then is stopped (SIGALRM) and reported as TimeoutError

_CHILD = r'''
import importlib, json, resource, signal, sys, time

import torch, transformers  # noqa: F401  (the baseline: what the families import)
import rococo_eval.models.adapters, rococo_eval.models.pcmepp, rococo_eval.models.vse_infty  # noqa: F401


def address_space():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))


def too_slow(*_):
    raise TimeoutError(f"still running after {seconds} s")


probes, headroom, seconds = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
baseline = address_space()
resource.setrlimit(resource.RLIMIT_AS, (baseline + headroom, resource.getrlimit(resource.RLIMIT_AS)[1]))
signal.signal(signal.SIGALRM, too_slow)
for probe in probes:
    module, name = probe["call"].split(":")
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        getattr(importlib.import_module(module), name)(*probe["args"], **probe["kwargs"])
        error, message = None, ""
    except BaseException as raised:  # MemoryError, TimeoutError, a traceback's error: each is the probe's outcome
        error, message = type(raised).__name__, str(raised)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps({"id": probe["id"], "error": error, "message": message, "baseline": baseline,
                      "seconds": time.monotonic() - start}), flush=True)
'''


def run_under_memory_limit(argv, limit_bytes: int, timeout_s: float) -> subprocess.CompletedProcess:
    """``argv`` run to its end with at most ``limit_bytes`` of address space and ``timeout_s`` seconds; its output as
    text. One BLAS thread: each thread's buffers count towards the limit."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return subprocess.run(argv, preexec_fn=limit, env=_one_thread_environment(), capture_output=True, text=True,
                          timeout=timeout_s)


def probe(probe_id: str, call: str, *args, **kwargs) -> dict:
    """One probe: ``call`` (``"module:function"``) with ``args`` and ``kwargs`` (JSON values), named ``probe_id``."""
    return {"id": probe_id, "call": call, "args": list(args), "kwargs": kwargs}


def run_probes(probes, headroom: int = HEADROOM_BYTES, seconds_per_probe: float = SECONDS_PER_PROBE) -> dict:
    """Run ``probes`` (:func:`probe`) one after another in a child limited to its baseline plus ``headroom`` bytes;
    return ``{probe_id: {"error", "message", "seconds", "baseline"}}`` (a probe the child never reported is absent)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(list(probes)), str(headroom),
                           str(seconds_per_probe)], capture_output=True, text=True, env=_one_thread_environment(),
                          timeout=60 + seconds_per_probe * len(probes))
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            results[result.pop("id")] = result
    return results


def _one_thread_environment() -> dict:
    """This environment with one BLAS/OpenMP thread: each thread's buffers count towards the limit."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
