"""The tests' shared helpers: tiny real models, a misbehaving HTTP server, sparse score files, the metric's slow
references and cases. Test modules import them as ``helpers.<module>`` (``tests/`` is on ``pythonpath``)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_script(path: Path):
    """The module of a script outside the package (``tools/walk.py``, ``docs/hooks.py``), loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
