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


def typed_rows(rows) -> list:
    """Summary rows written as dicts (as ``report.json`` and the Space's page keep them), as the
    :class:`~rococo_eval.results.SummaryRow` values the board takes."""
    from rococo_eval.results import SummaryRow

    return [SummaryRow.from_dict(row) for row in rows]
