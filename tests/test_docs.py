"""The docs' generated parts (docs/hooks.py) say what the code says; ``make test`` builds the site itself."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_refused_inputs_table_gives_the_metrics_own_message_for_each_case(hooks):
    from rococo_recall import rococo_recall

    cases = hooks.load_metric_cases()
    table = hooks.refused_inputs_table()
    assert len(hooks.refused_inputs()) == len(cases.BAD_INPUTS)
    for overrides, _ in cases.BAD_INPUTS:
        with pytest.raises(ValueError) as caught:
            rococo_recall(**{**hooks.BASE_CALL, **overrides})
        assert hooks.prose(str(caught.value)) in table


@pytest.mark.parametrize("case, message", [
    ((dict(k=0), "`k` must be something else"), "the tests expect"),
    ((dict(k=1), "accepted"), "the metric accepted"),
])
def test_a_case_the_metric_answers_otherwise_fails_the_build(hooks, monkeypatch, case, message):
    monkeypatch.setattr(hooks, "load_metric_cases", lambda: type("Cases", (), {"BAD_INPUTS": [case]}))
    with pytest.raises(ValueError, match=message):
        hooks.refused_inputs()


def test_every_module_of_the_package_is_in_a_layer(hooks):
    assert hooks.unlayered_modules() == []
    listed = [module for layer in hooks.layers() for name in layer for module in hooks.modules_of(name)]
    assert "rococo_eval.io.atomic" in listed and "rococo_eval.catalog" in listed
    assert len(listed) == len(set(listed))


def test_the_layers_are_real_modules_listed_bottom_first(hooks):
    """Each layer names modules of the package, and a layer imports only from itself and the layers before it."""
    import grimp

    graph = grimp.build_graph("rococo_eval", cache_dir=None)
    below: set[str] = set()
    for layer in hooks.layers():
        assert set(layer) <= graph.modules, f"{layer}: not modules of the package"
        modules = set().union(*({name} | graph.find_descendants(name) for name in layer))
        imported = set().union(*(graph.find_modules_directly_imported_by(module) for module in modules))
        assert imported & graph.modules <= below | modules, f"{layer} imports from a module of no layer below it"
        below |= modules


def test_a_page_that_lists_the_layers_in_another_order_fails(hooks):
    titles = [hooks.layer_title(layer) for layer in hooks.layers()]
    page = "\n".join(f"{number}. **{title}**: ..." for number, title in enumerate(titles, start=1))
    assert hooks.check_layer_order(page)
    titles[0], titles[-1] = titles[-1], titles[0]
    swapped = "\n".join(f"{number}. **{title}**: ..." for number, title in enumerate(titles, start=1))
    with pytest.raises(ValueError, match="contract"):
        hooks.check_layer_order(swapped)


def test_the_commands_help_is_generated_for_every_subcommand(hooks):
    text = hooks.rococo_eval_help()
    for command in ("rococo-eval run", "rococo-eval score", "rococo-eval attack"):
        assert f"`{command}`" in text and "usage: " + command in text
    assert "usage: rococo_dataset.py export" in hooks.rococo_dataset_help()


def test_markers_name_known_generators(hooks):
    markers = {name for page in (ROOT / "docs").rglob("*.md") for name in hooks.MARKER.findall(page.read_text())}
    assert markers and markers <= set(hooks.GENERATORS) | {"layer-order-check"}
