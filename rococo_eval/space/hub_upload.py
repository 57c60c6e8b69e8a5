"""Upload one file to a Hugging Face dataset repo: the child process of the leaderboard's copy
(:class:`rococo_eval.space.leaderboard.HubCopy`), which kills it when the Hub does not answer in time.

``python -m rococo_eval.space.hub_upload FILE REPO_ID PATH_IN_REPO [ENDPOINT]``, with the token in ``$HF_TOKEN``
(never on the command line). With ``$ROCOCO_HUB_UPLOAD_DEADLINE_S``, the process ends itself (SIGALRM) after that
many seconds, so that it cannot outlive a parent that died before killing it. Exit status 0 when the commit landed;
otherwise 1, with the problem on the last line of stderr.
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv=None) -> int:
    deadline = os.environ.get("ROCOCO_HUB_UPLOAD_DEADLINE_S", "")
    if deadline.isdigit() and int(deadline) > 0:
        signal.alarm(int(deadline))  # the default action ends the process
    from huggingface_hub import HfApi

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (3, 4):
        print("usage: python -m rococo_eval.space.hub_upload FILE REPO_ID PATH_IN_REPO [ENDPOINT]", file=sys.stderr)
        return 2
    path, repo_id, path_in_repo, *endpoint = args
    try:
        HfApi(endpoint=endpoint[0] if endpoint else None).upload_file(
            path_or_fileobj=path, path_in_repo=path_in_repo, repo_id=repo_id, repo_type="dataset",
            commit_message="rococo-eval leaderboard: a new submission")
    except Exception as error:  # the Hub's errors, a network's: one line for the parent's log
        print(f"{type(error).__name__}: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
