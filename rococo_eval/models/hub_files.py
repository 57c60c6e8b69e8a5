"""Official checkpoint files named in a Hugging Face Hub repository: ``blip:hf-hub:ORG/REPO/PATH.pth`` and
``vse:hf-hub:ORG/REPO/PATH.pth``, and where each ``--model`` form that names a Hub repository names it.

The form joins open_clip's ``hf-hub:`` schema (``open_clip:hf-hub:ORG/REPO``) to the path form of huggingface_hub's
file system (``hf://ORG/REPO[@REVISION]/PATH``, :class:`huggingface_hub.HfFileSystem`): the repository, an optional
revision after ``@`` (a branch, a tag or a commit, without ``/``; default ``main``), then the file's path in the
repository (:func:`parse_hub_file`).

What the loader reads beside the checkpoint comes from the same repository at the same commit
(:func:`download_hub_file`): the settings file ``PATH.json`` beside it, when the repository holds one, and each file
or folder the settings name by a path relative to it (BERT's vocabulary as ``tokenizer``; VSE infinity's
``region_features``; a path that leaves the repository, by ``..``, ``/`` or ``~``, is refused).
``snapshot_download(allow_patterns=...)`` puts them in the Hugging Face cache, which keeps the repository's layout,
so the settings' relative paths resolve there as they do beside a local checkpoint, and the local form's loader reads
the copy: the numbers are those of ``blip:PATH.pth`` on the same files. Offline (``HF_HUB_OFFLINE=1``) the cache
answers, at the commit the revision last resolved to.

A name in the settings that is no path of the repository (a Hub id, such as ``bert-base-uncased``, the ``tokenizer``
both loaders read when the settings name none: :data:`READ_ELSEWHERE`) is read as the local form reads it; the board
(``own_files_only``) refuses it, for it reads one repository at one commit.

Example:
    >>> parse_hub_file("hf-hub:org/vse-infty@v1/coco_wsl_grid_bert/model_best.pth", "`model` 'vse:...'")
    HubFile(repo='org/vse-infty', path='coco_wsl_grid_bert/model_best.pth', revision='v1')
    >>> hub_location("open_clip", "hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K")
    HubFile(repo='laion/CLIP-ViT-B-32-laion2B-s34B-b79K', path=None, revision=None)
    >>> hub_location("vse", "coco_wsl_grid_bert/model_best.pth") is None  # a local file
    True
"""

from __future__ import annotations

import logging
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Optional

from rococo_eval.models.checkpoints import MAX_SETTINGS_BYTES, MAX_SETTINGS_DEPTH, CheckpointError, read_json_file
from rococo_eval.models.families import FAMILIES, HUB_FILE, HUB_REPO, HUB_REPO_ID, HUB_SCHEMA

logger = logging.getLogger(__name__)

# What the official loaders read from another repository when the settings file names nothing else: BERT's
# vocabulary (blip_official.DEFAULT_TOKENIZER, vse_infty.DEFAULT_TOKENIZER, as the official code loads it)
READ_ELSEWHERE = {"tokenizer": "bert-base-uncased"}
# The settings the loaders read as paths (checkpoints.read_sidecar's paths and folders: blip_official.read_sidecar,
# vse_infty's); they refuse any other string, so no other key is followed (a settings file of a thousand keys would
# cost a thousand downloads)
PATH_SETTINGS = ("tokenizer", "region_features")
_PART = r"[\w.+-]+"  # a file or folder name: no glob characters (allow_patterns), no spaces
_NAME = re.compile(rf"{HUB_SCHEMA}(?P<repo>{HUB_REPO_ID})(?:@(?P<revision>[\w.-]+))?/(?P<path>.+)")
_PATH = re.compile(rf"{_PART}(/{_PART})*")


@dataclass(frozen=True)
class HubFile:
    """A Hub repository a ``--model`` name names (``repo``, ``ORG/REPO``), the file in it (``path``; None where the
    name is the whole repository) and the revision the name gives (None: ``main``)."""

    repo: str
    path: Optional[str] = None
    revision: Optional[str] = None


def parse_hub_file(location: str, what: str) -> HubFile:
    """The repository, revision and file of ``hf-hub:ORG/REPO[@REVISION]/PATH`` (a ``blip:`` or ``vse:`` name after
    its prefix), read from the name alone.

    Raises:
        CheckpointError: ``what`` (the argument and its value) and the form expected; a path or revision with ``..``.

    Example:
        >>> parse_hub_file("hf-hub:org/blip/../model.pth", "`model` 'blip:hf-hub:...'")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'blip:hf-hub:...': '../model.pth' is no path ...
    """
    match = _NAME.fullmatch(location)
    if match is None:
        raise CheckpointError(f"{what}: {location!r} names no file of a Hub repository: expected "
                              "hf-hub:ORG/REPO/PATH or hf-hub:ORG/REPO@REVISION/PATH")
    if match["revision"] is not None and (match["revision"].startswith(".") or ".." in match["revision"]):
        raise CheckpointError(f"{what}: {match['revision']!r} is no revision of {match['repo']}: a branch, a tag or "
                              "a commit, which git names without a leading '.' or '..'")
    path = match["path"]
    if not _PATH.fullmatch(path) or any(part in (".", "..") for part in path.split("/")):
        raise CheckpointError(f"{what}: {path!r} is no path of a file in {match['repo']}: names of letters, digits "
                              "and ._+- between slashes, without '.' or '..'")
    return HubFile(match["repo"], path, match["revision"])


def hub_location(library: str, name: str, what: str = "`model`") -> Optional[HubFile]:
    """The Hub repository (and file) that a ``--model`` name of family ``library`` (``name`` after the prefix)
    names, as the family's :attr:`~rococo_eval.models.families.Family.hub` says its names do: the name itself for a
    family whose names are a repository id or a folder (``hf:``, ``pcmepp:``: the caller checks that it is an id);
    None for a local file or folder of the other families, or a family whose names never name one.

    Raises:
        CheckpointError: a ``blip:``/``vse:`` name after ``hf-hub:`` that is no file of a repository
            (:func:`parse_hub_file`).
    """
    kind = FAMILIES[library].hub
    if kind == HUB_REPO:
        return HubFile(name)
    if kind and name.startswith(HUB_SCHEMA):
        return parse_hub_file(name, what) if kind == HUB_FILE else HubFile(name.removeprefix(HUB_SCHEMA))
    return None


def download_hub_file(hub_file: HubFile, what: str, *, revision: Optional[str] = None, own_files_only: bool = False,
                      cache_dir=None, endpoint: Optional[str] = None, token=None) -> tuple[Path, list[str]]:
    """Download checkpoint ``hub_file`` and what its loader reads beside it (the module's docstring), all at one
    commit: ``revision`` (default the name's, else ``main``) as it resolves now, or from the cache offline.

    Args:
        hub_file: the checkpoint (:func:`parse_hub_file`).
        what: how errors name it: the argument and its value.
        revision: the branch, tag or commit to read, instead of the name's.
        own_files_only: refuse what the settings take from elsewhere (the board's rule: one repository, one commit).
        cache_dir, endpoint, token: ``snapshot_download``'s (None: the Hugging Face cache, ``$HF_ENDPOINT``, the
            saved token).

    Returns:
        The snapshot folder (the checkpoint is ``folder / hub_file.path``), and the paths in the repository of every
        file downloaded.

    Raises:
        CheckpointError: a repository, revision or file the Hub (or the cache, offline) does not have; a setting
            whose path leaves the repository; with ``own_files_only``, a setting read from another repository.
    """
    from huggingface_hub import snapshot_download

    def download(patterns, at):
        try:
            return Path(snapshot_download(hub_file.repo, revision=at, allow_patterns=patterns, cache_dir=cache_dir,
                                          endpoint=endpoint, token=token))
        except Exception as error:  # huggingface_hub's errors for a repository, revision or connection it lacks
            reason = (str(error).strip().splitlines() or [""])[0]
            raise CheckpointError(f"{what}: cannot download {hub_file.path!r} of {hub_file.repo} at "
                                  f"{at or 'main'} ({type(error).__name__}: {reason})") from error

    settings = PurePosixPath(hub_file.path).with_suffix(".json").as_posix()
    folder = download([hub_file.path, settings], revision or hub_file.revision)
    commit = folder.name  # the snapshot folder is named after the commit the revision resolved to
    if not (folder / hub_file.path).is_file():
        raise CheckpointError(f"{what}: {hub_file.repo} has no file {hub_file.path!r} at {commit[:12]}")
    read = [hub_file.path]
    values = {}
    if (folder / settings).is_file():
        read.append(settings)
        values = read_json_file(folder / settings, f"{what}: its settings file", MAX_SETTINGS_BYTES,
                                MAX_SETTINGS_DEPTH)
        values = values if isinstance(values, dict) else {}  # the loader refuses it, naming what it holds
    elsewhere = [f"{key} {value!r} (the default)" for key, value in READ_ELSEWHERE.items() if key not in values]
    for key, value in values.items():
        if key not in PATH_SETTINGS or not isinstance(value, str):
            continue
        inside = posixpath.normpath(posixpath.join(posixpath.dirname(settings), value))
        if value.startswith(("/", "~")) or inside == ".." or inside.startswith("../"):
            raise CheckpointError(f"{what}: its settings file {settings} names {key} {value!r}, outside "
                                  f"{hub_file.repo}: a checkpoint of a Hub repository reads files of that "
                                  "repository, by paths relative to its settings file, or Hub ids")
        found = []
        if _PATH.fullmatch(inside):
            download([inside, f"{inside}/*"], commit)
            found = sorted(path.relative_to(folder).as_posix()
                           for path in [folder / inside, *(folder / inside).rglob("*")] if path.is_file())
        read += found
        if not found:
            elsewhere.append(f"{key} {value!r}")
    if own_files_only and elsewhere:
        raise CheckpointError(f"{what}: reads {', '.join(elsewhere)} from outside {hub_file.repo} at {commit[:12]}: "
                              "the board reads one repository at one commit; put the file in the repository and "
                              f"name it in {settings} (e.g. \"tokenizer\": \"vocab.txt\")")
    logger.info("%s: %s at commit %s (%d file(s))", what, hub_file.repo, commit, len(read))
    return folder, read
