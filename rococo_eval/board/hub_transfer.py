"""The leaderboard's transfers with its dataset repo, in a child process that the parent kills when the Hub does not
answer in time (:class:`rococo_eval.board.hub_records.HubRecords`): a thread that waits on a silent Hub cannot be
stopped, a process can.

``python -m rococo_eval.board.hub_transfer commit REPO_ID ENDPOINT FILE...`` commits each record file (a
:mod:`~rococo_eval.board.records` record) in a commit of its own, at its path (:func:`~rococo_eval.board.records.
record_path`), unless the repo holds that path already (a record is never overwritten); it prints ``landed FILE``
for each that is in the repo.

``python -m rococo_eval.board.hub_transfer download REPO_ID ENDPOINT FOLDER`` downloads into ``FOLDER`` every record
(``submissions/<YYYY>/<id>.json``) that ``FOLDER`` does not hold yet, printing ``got PATH`` for each, and
``legacy leaderboard.jsonl`` when the repo holds the old board but no record.

``ENDPOINT`` is ``-`` for the Hub itself; the token is read from ``$HF_TOKEN`` (never the command line). With
``$ROCOCO_HUB_DEADLINE_S`` the process ends itself (SIGALRM) after that many seconds, so that it cannot outlive a
parent that died before killing it. Exit status 0 when everything asked was done; otherwise 1, with the problem on the
last line of stderr.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import sys
from pathlib import Path
from typing import Iterator

from rococo_eval.board.records import RECORD_PATTERN, record_path

LEGACY_BOARD = "leaderboard.jsonl"


def main(argv=None) -> int:
    deadline = os.environ.get("ROCOCO_HUB_DEADLINE_S", "")
    if deadline.isdigit() and int(deadline) > 0:
        signal.alarm(int(deadline))  # the default action ends the process
    from huggingface_hub import HfApi

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 4 or args[0] not in ("commit", "download"):
        print("usage: python -m rococo_eval.board.hub_transfer commit|download REPO_ID ENDPOINT FILE...|FOLDER",
              file=sys.stderr)
        return 2
    action, repo_id, endpoint, *paths = args
    api = HfApi(endpoint=None if endpoint == "-" else endpoint)
    try:
        if action == "commit":
            _commit(api, repo_id, paths)
        else:
            listed = api.list_repo_files(repo_id, repo_type="dataset")
            if LEGACY_BOARD in listed and not any(RECORD_PATTERN.fullmatch(path) for path in listed):
                print(f"legacy {LEGACY_BOARD}", flush=True)
            for path in download_records(api, repo_id, Path(paths[0]), listed):
                print(f"got {path}", flush=True)
    except Exception as error:  # the Hub's errors, a network's: one line for the parent's log
        print(f"{type(error).__name__}: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    return 0


def _commit(api, repo_id: str, files: list[str]) -> None:
    from huggingface_hub import CommitOperationAdd

    for file in files:
        data = Path(file).read_bytes()
        path_in_repo = record_path(json.loads(data))
        if not api.file_exists(repo_id, path_in_repo, repo_type="dataset"):
            api.create_commit(repo_id, [CommitOperationAdd(path_in_repo, data)], repo_type="dataset",
                              commit_message=f"rococo-eval leaderboard: record {Path(path_in_repo).stem}")
        print(f"landed {file}", flush=True)


def fetch(api, repo_id: str, path: str, revision: str = "main") -> bytes:
    """The file ``path`` of the dataset repo ``repo_id`` at ``revision`` (an ``huggingface_hub.HfApi``'s endpoint and
    token), in one GET: records never change, so there is no metadata to compare first.

    Raises:
        huggingface_hub.errors.HfHubHTTPError: the Hub's answer is an error (no such file, no access).
    """
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    response = get_session().get(hf_hub_url(repo_id, path, repo_type="dataset", revision=revision,
                                                    endpoint=api.endpoint),
                                 headers=build_hf_headers(token=api.token), follow_redirects=True)
    hf_raise_for_status(response)
    return response.content


def download_records(api, repo_id: str, folder: Path, listed: list[str]) -> Iterator[str]:
    """Download into ``folder`` every record of ``listed`` (the repo's files) that ``folder`` does not hold yet, each
    written whole or not at all; yield each record's path as it lands."""
    wanted = [path for path in listed if RECORD_PATTERN.fullmatch(path) and not (folder / path).is_file()]

    def download(path: str) -> str:
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        partial.write_bytes(fetch(api, repo_id, path))
        partial.replace(target)  # whole or not at all
        return path

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        yield from pool.map(download, wanted)


if __name__ == "__main__":
    sys.exit(main())
