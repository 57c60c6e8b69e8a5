"""Bounded parsing (issue 29): every malformed score file is refused by the io layer with a one-line ValueError that
names the file, before any work its forged header asks for; the command says so in one line (exit 1, no traceback)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from rococo_eval.cli import main
from rococo_eval.io.scorefiles import MAX_SAFETENSORS_HEADER_BYTES, read_header, read_references, read_scores
from helpers import REPO_ROOT
from helpers.malformed import deep_references, huge_header, malformed_files, many_members


@pytest.fixture(scope="module")
def malformed(tmp_path_factory):
    return malformed_files(tmp_path_factory.mktemp("malformed"))


@pytest.fixture(scope="module")
def huge(tmp_path_factory):
    return huge_header(tmp_path_factory.mktemp("huge") / "clip_rand_voca.safetensors")


EXPECTED = {
    "header null": "its header is a JSON NoneType, not an object of tensors",
    "header string": "its header is a JSON str, not an object of tensors",
    "header number": "its header is a JSON int, not an object of tensors",
    "header nested 100,000 deep": "the safetensors header JSON nests 100000 deep, deeper than its 3",
    "float shape": "tensor 'scores' has shape [2.0, 3], not a list of non-negative ints",
    "bool shape": "tensor 'scores' has shape [True, 3], not a list of non-negative ints",
    "corrupt deflate": "not a readable .npz file (Error -3 while decompressing data",
    "65 members": "not a readable .npz file (it holds 65 arrays, over the limit of 64)",
    "encrypted member": "its array 'scores.npy' is encrypted or compressed with method 0",
    "LZMA member": "its array 'scores.npy' is encrypted or compressed with method 14",
    "long dtype": "unsupported safetensors dtype 'F32\\nXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX'",
}


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_each_malformed_file_is_refused_naming_the_file(malformed, kind):
    path = malformed[kind]
    with pytest.raises(ValueError) as refused:
        read_scores(path)
    message = str(refused.value)
    assert message.startswith(f"{path.name}: ") and EXPECTED[kind] in message and "\n" not in message


def test_a_huge_header_is_refused_from_its_length(huge):
    assert huge.stat().st_size > 100_000_000
    with pytest.raises(ValueError, match=rf"clip_rand_voca.safetensors: not a readable .safetensors file \(its header is "
                                         rf"\d+ bytes \(9\d.\d MB\), over the limit of {MAX_SAFETENSORS_HEADER_BYTES} "
                                         r"bytes \(1.0 MB\)"):
        read_header(huge)


def _peak_growth_kb(path) -> int:
    """How much reading ``path``'s header (and being refused) moves a fresh process's peak memory (VmHWM), in kB."""
    script = (
        "import sys\n"
        "from rococo_eval.io.scorefiles import read_header\n"
        "def peak():\n"
        "    return next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM'))\n"
        "before = peak()\n"
        "try:\n"
        "    read_header(sys.argv[1])\n"
        "except ValueError:\n"
        "    pass\n"
        "print(peak() - before)\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    return int(done.stdout)


def test_refusing_a_huge_header_reads_eight_bytes_of_it(huge):
    """Measured in a process of its own: the refusal moves its peak memory (VmHWM) by under 10 MB, not by the 100 MB
    header (the parse of which took 1.5 GB before)."""
    assert _peak_growth_kb(huge) < 10 * 1024


def test_an_npz_of_many_members_is_refused_from_its_end_record(tmp_path):
    """300,000 members (a 27 MB file): refused from the count in the archive's end record, before zipfile lists them
    (which took 2.3 s and 172 MB)."""
    path = many_members(tmp_path / "many.npz", 300_000)
    with pytest.raises(ValueError, match="many.npz: not a readable .npz file \\(it holds 65535 arrays, over the limit"):
        read_header(path)
    assert _peak_growth_kb(path) < 10 * 1024


def test_a_references_json_over_its_limit_is_refused_before_parsing(tmp_path):
    path = tmp_path / "references.json"
    path.write_text("[" + ", ".join(["[1234567, 1234568]"] * 300_000) + "]")  # 6 MB
    with pytest.raises(ValueError, match=r"references.json: the file is \d+ bytes \(5.\d MB\), over the limit of "
                                         r"4194304 bytes \(4.0 MB\)"):
        read_references(path)


def test_a_references_file_nested_deep_is_refused(tmp_path):
    with pytest.raises(ValueError, match="references.json: the references JSON nests 200000 deep, deeper than its 2"):
        read_references(deep_references(tmp_path / "references.json"))


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_the_command_refuses_each_in_one_line(malformed, kind, tmp_path, capsys):
    status = main(["score", str(malformed[kind]), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 1 and "Traceback" not in err and len(err.splitlines()) == 1
    assert malformed[kind].name in err and EXPECTED[kind] in err


def test_the_command_refuses_the_huge_header_in_one_line(huge, tmp_path, capsys):
    status = main(["score", str(huge), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1 and "over the limit of" in err and huge.name in err
