"""rococo_eval.io.atomic: a file is replaced whole or not at all, through a temporary file beside it that no error
leaves behind, with the permissions of the umask; a cache folder's manifest is written once and checked after."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from helpers.memory_limit import run_under_memory_limit
from helpers.sparse_files import sparse_file
from rococo_eval.io.atomic import open_cache_folder, write_atomic


def test_the_target_keeps_its_old_content_until_the_new_one_is_complete(tmp_path):
    path = tmp_path / "report.json"
    path.write_bytes(b"old")
    seen = {}

    def write(handle):
        handle.write(b"new, ")
        seen["target"] = path.read_bytes()
        seen["files"] = sorted(p.name for p in tmp_path.iterdir())
        handle.write(b"complete")

    assert write_atomic(path, write) == path
    assert seen["target"] == b"old"
    temporary, target = seen["files"]
    assert target == "report.json" and temporary.startswith(".report.json.") and temporary.endswith(".part")
    assert path.read_bytes() == b"new, complete"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_an_error_half_way_leaves_the_old_file_and_no_temporary_one(tmp_path, error):
    path = tmp_path / "shard.npy"
    path.write_bytes(b"old")

    def write(handle):
        handle.write(b"half")
        raise error

    with pytest.raises(type(error)):
        write_atomic(path, write)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["shard.npy"]


def test_a_file_that_never_existed_is_not_created_by_a_failed_write(tmp_path):
    def write(handle):
        handle.write(b"half")
        raise ValueError("cannot serialise")

    with pytest.raises(ValueError, match="cannot serialise"):
        write_atomic(str(tmp_path / "new" / "report.json"), write)
    assert list((tmp_path / "new").iterdir()) == []


def test_missing_folders_are_created_and_a_path_is_returned(tmp_path):
    path = write_atomic(str(tmp_path / "a" / "b" / "chart.png"), lambda handle: handle.write(b"png"))
    assert isinstance(path, Path) and path == tmp_path / "a" / "b" / "chart.png" and path.read_bytes() == b"png"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_the_permissions_follow_the_umask(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        path = write_atomic(tmp_path / "report.md", lambda handle: handle.write(b"# report"))
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == mode


def test_a_cache_folder_is_made_with_its_manifest_and_refuses_another(tmp_path):
    folder = tmp_path / "cache" / "model"
    manifest = {"model": "a", "count": 3}
    open_cache_folder(folder, manifest, "embeddings")
    assert [p.name for p in folder.iterdir()] == ["manifest.json"]
    assert json.loads((folder / "manifest.json").read_text()) == manifest
    open_cache_folder(folder, {"count": 3, "model": "a"}, "embeddings")  # the same manifest: the folder is reused
    with pytest.raises(ValueError) as caught:
        open_cache_folder(folder, {"model": "b", "count": 3}, "ITM scores")
    assert str(caught.value) == f"cache folder {str(folder)!r} holds other ITM scores ({manifest}); remove it"
    assert json.loads((folder / "manifest.json").read_text()) == manifest


def test_a_damaged_manifest_is_written_anew_with_a_warning_about_the_numbers(tmp_path):
    """Issue 39: a damaged cache file is a validity warning, which the report records and --quiet keeps."""
    from rococo_eval.validity import recorded

    (tmp_path / "manifest.json").write_text("{not json")
    with recorded() as found:
        open_cache_folder(tmp_path, {"model": "a"}, "embeddings")
    assert len(found) == 1 and found[0].startswith(f"{tmp_path / 'manifest.json'} is damaged (")
    assert found[0].endswith("): written anew")


def test_a_manifest_of_2_gib_is_written_anew_within_memory(tmp_path):
    """A cache manifest that is a 2 GiB hole (a faulty disk, a stray copy) is not read whole: under a 1 GiB address
    space it is called damaged and written anew, within seconds."""
    sparse_file(tmp_path / "manifest.json", head=b'{"model": "a"')
    code = ("import sys; from pathlib import Path; from rococo_eval.io.atomic import open_cache_folder; "
            "open_cache_folder(Path(sys.argv[1]), {'model': 'a'}, 'embeddings')")
    started = time.monotonic()
    done = run_under_memory_limit([sys.executable, "-c", code, str(tmp_path)], limit_bytes=1 << 30, timeout_s=60)
    assert done.returncode == 0, done.stderr
    assert f"{tmp_path / 'manifest.json'} is damaged (" in done.stderr and time.monotonic() - started < 30
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"model": "a"}
