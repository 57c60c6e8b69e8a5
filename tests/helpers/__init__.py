"""The tests' shared helpers: tiny real models, a misbehaving HTTP server, sparse score files, the metric's slow
references and cases. Test modules import them as ``helpers.<module>`` (``tests/`` is on ``pythonpath``)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
