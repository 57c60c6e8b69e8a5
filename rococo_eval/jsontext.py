"""The package's one JSON form: what ``report.json``, the saved layouts and a benchmark's data files are written as.

NaN and infinities become ``null`` (JSON has neither), numpy values plain Python, tuples and arrays lists, paths
strings; keys are strings.

Example:
    >>> print(json_text({"recall@1": np.float32(0.5), "ci": (1, 2), "asr": float("nan")}, compact=True))
    {"recall@1":0.5,"ci":[1,2],"asr":null}
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def json_text(value, *, compact: bool = False) -> str:
    """``value`` as JSON text: indented and ASCII with a final newline (reports), or ``compact``: no spaces,
    non-ASCII characters kept as they are (a generated benchmark's data files)."""
    if compact:
        return json.dumps(jsonable(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return json.dumps(jsonable(value), indent=2, allow_nan=False) + "\n"


def jsonable(value):
    """``value`` with every part JSON can write: see the module's docstring."""
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [jsonable(item) for item in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value
