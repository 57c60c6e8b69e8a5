"""tools/walk.py: the walk of a call tree, its stays, rooms and climbs back, counted on a tree built by hand."""

from helpers import REPO_ROOT, load_script


def _code(name):
    """The code of a function ``name`` (the tree keys calls by their function's code)."""
    return next(const for const in compile(f"def {name}(): pass", "<tree>", "exec").co_consts
                if hasattr(const, "co_name"))


def test_the_walk_counts_stays_rooms_and_climbs_back_to_its_depth():
    walk = load_script(REPO_ROOT / "tools" / "walk.py")
    root = walk.Call(_code("_run_model"), "cli")
    evaluate = root.child(_code("evaluate_model"), "evaluation")
    gathered = _code("gathered")
    assert evaluate.child(gathered, "processes") is evaluate.child(gathered, "processes")  # a loop's turns: once
    evaluate.child(_code("write_report"), "reporting/report")
    root.child(_code("to_text_table"), "reporting/report")
    steps = walk.walk(root, depth=2)
    assert walk.stays(steps) == [("cli", "start"), ("evaluation", "call"), ("processes", "call"),
                                 ("evaluation", "return"), ("reporting/report", "call"), ("cli", "return"),
                                 ("reporting/report", "call")]
    assert walk.figures(steps) == {"stays": 7, "rooms": 4, "climbs": 2}
    assert walk.figures(walk.walk(root, depth=1)) == {"stays": 4, "rooms": 3, "climbs": 1}
