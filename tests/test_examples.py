"""The quick start in examples/ runs as a user would run it, and prints the metric's outputs."""

import json
import subprocess
import sys

from helpers import REPO_ROOT


def test_quickstart_prints_the_metric_outputs():
    done = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / "quickstart.py")], capture_output=True,
                          text=True, check=True, cwd=REPO_ROOT)
    result = json.loads(done.stdout)
    assert result["num_queries"] == 4 and result["num_gallery"] == 41 and result["num_adversarial"] == 20
    assert 0 <= result["recall@1"] <= result["clean_recall@1"] <= 100
