# SPDX-License-Identifier: MIT
"""Which safetensors files a checkpoint is: one file, a list of files, a
directory, or a Hugging Face index (``model.safetensors.index.json``,
``{"metadata": {...}, "weight_map": {"tensor name": "shard file"}}``).

An index is checked against the shards' own headers (:func:`check_index`):
every shard it names exists, every name it maps is in that shard, and
every tensor of a shard is mapped to it.  Shard names are file names
relative to the index's directory; one that is absolute or climbs out of
it (``..``) is refused before anything is opened.  Everything wrong with
an index is a :class:`CheckpointIndexError` (a ValueError) naming the index.
"""

import json as _json
import os as _os
import typing as _typing
from collections.abc import Mapping as _Mapping
from collections.abc import Sequence as _Sequence
from dataclasses import dataclass as _dataclass

__all__ = ["Checkpoint", "CheckpointIndexError", "MAX_INDEX_BYTES", "check_index", "resolve"]

#: Largest index file accepted (a real one is well under 1 MiB).
MAX_INDEX_BYTES = 64 << 20

PathLike = _typing.Union[str, _os.PathLike]


class CheckpointIndexError(ValueError):
    """A checkpoint index that does not describe its shards."""


@_dataclass(frozen=True)
class Checkpoint:
    """The shard files of a checkpoint, in load order, and where it came
    from: the index's weight_map (name -> shard path) when there is one."""

    files: tuple[str, ...]
    index: _typing.Optional[str] = None
    weight_map: _typing.Optional[_Mapping[str, str]] = None


def _shard_path(index, directory, name):
    if not isinstance(name, str) or not name:
        raise CheckpointIndexError(f"{index}: a shard name is not a non-empty string: {name!r}")
    parts = name.replace("\\", "/").split("/")
    if _os.path.isabs(name) or ".." in parts or "\0" in name:
        raise CheckpointIndexError(f"{index}: shard {name!r} is outside the index's directory")
    return _os.path.join(directory, name)


def _read_index(index):
    directory = _os.path.dirname(_os.path.abspath(index))
    with open(index, "rb") as f:
        raw = f.read(MAX_INDEX_BYTES + 1)
    if len(raw) > MAX_INDEX_BYTES:
        raise CheckpointIndexError(f"{index}: over the {MAX_INDEX_BYTES}-byte limit of an index")
    try:
        doc = _json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointIndexError(f"{index}: not JSON: {e}") from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointIndexError(f"{index}: no weight_map of tensor names to shard files")
    paths = {}
    mapped = {}
    for tensor, shard in weight_map.items():
        if shard not in paths:
            paths[shard] = _shard_path(index, directory, shard)
        mapped[tensor] = paths[shard]
    # The Hugging Face order: model-00001-of-00004... sorted by name.
    files = tuple(paths[s] for s in sorted(paths))
    for f in files:
        if not _os.path.isfile(f):
            raise CheckpointIndexError(f"{index}: shard {_os.path.basename(f)!r} is missing ({f})")
    return Checkpoint(files, index, mapped)


def resolve(path: _typing.Union[PathLike, _Sequence[PathLike]]) -> Checkpoint:
    """The checkpoint at path: a .safetensors file, an index .json, a
    directory (its one ``*.safetensors.index.json``, else every
    ``*.safetensors`` in name order), or a list of files."""
    if isinstance(path, (list, tuple)):
        files = tuple(_os.fspath(p) for p in path)
        if not files:
            raise ValueError("no checkpoint file given")
        return Checkpoint(files)
    path = _os.fspath(path)
    if _os.path.isdir(path):
        names = sorted(_os.listdir(path))
        indexes = [n for n in names if n.endswith(".safetensors.index.json")]
        if len(indexes) > 1:
            raise ValueError(f"{path}: several indexes ({', '.join(indexes)}): name one")
        if indexes:
            return _read_index(_os.path.join(path, indexes[0]))
        files = tuple(_os.path.join(path, n) for n in names if n.endswith(".safetensors"))
        if not files:
            raise FileNotFoundError(f"{path}: no .safetensors file and no index")
        return Checkpoint(files)
    if path.endswith(".json"):
        return _read_index(path)
    return Checkpoint((path,))


def check_index(checkpoint: Checkpoint, names_by_file: _Sequence[_Sequence[str]]) -> None:
    """Raise CheckpointIndexError where the shards' headers (the tensor names of
    each of checkpoint.files, in order) disagree with the index."""
    if checkpoint.weight_map is None:
        return
    # The usual case in one comparison; the loop below says what differs.
    if {name: f for f, names in zip(checkpoint.files, names_by_file)
            for name in names} == checkpoint.weight_map:
        return
    index = checkpoint.index
    found = {}
    for f, names in zip(checkpoint.files, names_by_file):
        for name in names:
            found[name] = f
            where = checkpoint.weight_map.get(name)
            if where is None:
                raise CheckpointIndexError(f"{index}: tensor {name!r} of {_os.path.basename(f)!r} "
                                  "is not in the weight_map")
            if where != f:
                raise CheckpointIndexError(f"{index}: tensor {name!r} is in "
                                  f"{_os.path.basename(f)!r}, the weight_map says "
                                  f"{_os.path.basename(where)!r}")
    for name, f in checkpoint.weight_map.items():
        if name not in found:
            raise CheckpointIndexError(f"{index}: tensor {name!r} is not in its shard "
                              f"{_os.path.basename(f)!r}")
