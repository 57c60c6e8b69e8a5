"""Reading the official checkpoints of model families (BLIP, VSE infinity): torch files unpickled through an
allowlist only, the settings file beside a checkpoint, and DataParallel's ``module.`` prefix.

A ``.pth`` file is a pickle, and unpickling runs whatever the file names. :func:`load_torch_file` reads one with
``torch.load(weights_only=True)``, which rebuilds tensors and plain containers only, plus the types a family names
(VSE infinity's checkpoints pickle their options as an ``argparse.Namespace``); a file that needs any other type is
refused, naming it, and nothing of it runs.

Example:
    >>> import tempfile, pathlib, torch
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.pth"
    >>> torch.save({"model": {"fc.weight": torch.zeros(1)}, "opt": pathlib.PurePosixPath("/data")}, path)
    >>> load_torch_file(path, "`model` 'vse:model.pth'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rococo_eval.models.checkpoints.CheckpointError: `model` 'vse:model.pth' needs pathlib.PurePosixPath to be read, ...
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Optional, Sequence

MODULE_PREFIX = "module."  # torch.nn.DataParallel's, in the state dicts of models saved while wrapped in it
_UNSAFE_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


class CheckpointError(ValueError):
    """A file that is not an official checkpoint of its family, or a settings file beside it that is wrong."""


def load_torch_file(path, what: str, allowed: Iterable[type] = ()):
    """The content of torch file ``path``, unpickled with ``torch.load(weights_only=True)`` and ``allowed`` types.

    Args:
        path: the file.
        what: how errors name it: the argument and its value.
        allowed: types the file may hold beside tensors and plain containers (e.g. ``argparse.Namespace``), or
            ``(type, "module.name")`` pairs for a type pickled under another name.

    Raises:
        CheckpointError: no such file; a file that needs a type outside the allowlist (named); or one torch cannot
            read at all.
    """
    import torch

    path = Path(path).expanduser()
    if not path.is_file():
        raise CheckpointError(f"{what}: no such file")
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for what it cannot read
        unsafe = _UNSAFE_GLOBAL.search(str(error))
        if unsafe:
            raise CheckpointError(f"{what} needs {unsafe[1]} to be read, which is not on the allowlist of types it "
                                  f"may hold ({', '.join(_names(allowed)) or 'tensors and plain containers only'}): "
                                  "refused, nothing of it was run") from error
        reason = str(error).splitlines()[0] if str(error) else ""
        raise CheckpointError(f"{what}: torch.load(weights_only=True) cannot read it ({type(error).__name__}: "
                              f"{reason})") from error


def local_folder(name_or_path: str, what: str, expected: str) -> Optional[Path]:
    """The folder ``name_or_path`` names, or None for a Hub repository id (``ORG/NAME``), read from the name alone
    (a checkpoint given as a folder or a repository: ``--model pcmepp:...`` is checked before any work).

    Raises:
        CheckpointError: neither; ``what`` names the argument and its value, ``expected`` what it should name.

    Example:
        >>> local_folder("SanghyukChun/PCMEPP-ViT-B-16-CC3M-12M-RedCaps-256M", "m", ""), local_folder(".", "m", "")
        (None, PosixPath('.'))
        >>> local_folder("nowhere", "`model` 'pcmepp:nowhere'", "a PCME++ folder")
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'pcmepp:nowhere': no such folder, and not a Hub repository id (ORG/NAME): expected a PCME++ folder
    """
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        return folder
    if folder.exists() or name_or_path.count("/") != 1:
        raise CheckpointError(f"{what}: no such folder, and not a Hub repository id (ORG/NAME): expected {expected}")
    return None


def load_strictly(module, state: dict, what: str) -> None:
    """``module.load_state_dict(state, strict=True)``; keys that are missing or left over, or a shape that does not
    fit, are refused as :class:`CheckpointError` ``"{what}: missing [...], unexpected [...]"`` (five of each).

    Example:
        >>> import torch
        >>> load_strictly(torch.nn.Linear(2, 2), {"weight": torch.zeros(2, 2)}, "`model` 'm' does not fill a Linear")
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'm' does not fill a Linear: missing ['bias'], unexpected nothing
    """
    expected = set(module.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise CheckpointError(f"{what}: missing {missing[:5] or 'nothing'}, unexpected {unexpected[:5] or 'nothing'}")
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as error:  # a shape that the configuration and the other weights do not give
        raise CheckpointError(f"{what}: {str(error).splitlines()[-1].strip()}") from error


def strip_module_prefix(state: dict) -> dict:
    """``state`` without DataParallel's ``module.`` prefix: removed when every key has it, else kept as it is.

    Example:
        >>> strip_module_prefix({"module.fc.weight": 1, "module.fc.bias": 2})
        {'fc.weight': 1, 'fc.bias': 2}
        >>> strip_module_prefix({"fc.weight": 1})
        {'fc.weight': 1}
    """
    if state and all(key.startswith(MODULE_PREFIX) for key in state):
        return {key[len(MODULE_PREFIX):]: value for key, value in state.items()}
    return dict(state)


def read_sidecar(path, what: str, keys: Sequence[str], paths: Sequence[str] = ("tokenizer",),
                 folders: Sequence[str] = ()) -> dict:
    """The settings in ``PATH.json`` beside checkpoint ``PATH.pth`` (``{}`` when there is none). The values of ``paths``
    that name existing files or folders relative to the JSON file are made relative to its folder (others, such as a
    Hub id, are kept); the values of ``folders`` are always relative to it, unless absolute.

    Raises:
        CheckpointError: the file is not a JSON object of ``keys``.

    Example:
        >>> read_sidecar("no-such-folder/model_best.pth", "`model` 'vse:model_best.pth'", ["tokenizer"])
        {}
    """
    sidecar = Path(path).expanduser().with_suffix(".json")
    if not sidecar.is_file():
        return {}
    try:
        settings = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{what}: its settings file {str(sidecar)!r} is not JSON ({error})") from error
    unknown = sorted(set(settings) - set(keys)) if isinstance(settings, dict) else None
    if unknown is None or unknown:
        raise CheckpointError(f"{what}: its settings file {str(sidecar)!r} must be a JSON object with any of "
                              f"{', '.join(keys)}; got {unknown or type(settings).__name__}")
    for key in paths:
        value = settings.get(key)
        if isinstance(value, str) and (sidecar.parent / value).exists():
            settings[key] = str(sidecar.parent / value)
    for key in folders:
        value = settings.get(key)
        if value is not None and not isinstance(value, str):
            raise CheckpointError(f"{what}: {key!r} in {str(sidecar)!r} must be a folder's path, got {value!r}")
        if value is not None:
            settings[key] = str(sidecar.parent / Path(value).expanduser())
    return settings


def _names(types: Iterable) -> list[str]:
    """The names of allowed types: a type's module and name, or the name given beside it as ``(type, name)``."""
    return [kind[1] if isinstance(kind, tuple) else f"{kind.__module__}.{kind.__qualname__}" for kind in types]
