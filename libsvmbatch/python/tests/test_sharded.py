# SPDX-License-Identifier: MIT
"""load_safetensors of a sharded checkpoint, laid out as Hugging Face lays
it out (model-0000K-of-0000N.safetensors and model.safetensors.index.json):
from the index, the directory or a list of files, through the CPU path and
the staging ring; and every kind of index that does not describe its
shards."""

import json
import os

import pytest

import torch  # required: an import failure is a collection error
import svmbatch.torch as sbt
from conftest import has_cuda, needs_cuda
from svmbatch.safetensors_format import FormatError
from test_safetensors import assert_same, sample, write_minimal

INDEX = "model.safetensors.index.json"


def shard_name(k, n):
    return f"model-{k:05d}-of-{n:05d}.safetensors"


def write_checkpoint(directory, shards, weight_map=None):
    """shards: one dict of tensors per file; the index maps each name to
    its file unless weight_map says otherwise."""
    n = len(shards)
    wm = {}
    for k, tensors in enumerate(shards, 1):
        write_minimal(directory / shard_name(k, n), tensors)
        wm.update({name: shard_name(k, n) for name in tensors})
    index = {"metadata": {"total_size": 0}, "weight_map": wm if weight_map is None else weight_map}
    (directory / INDEX).write_text(json.dumps(index))
    return [str(directory / shard_name(k, n)) for k in range(1, n + 1)]


def three_shards():
    tensors = sample()
    tensors.update({f"big{i}": torch.randn((3 << 17) + i) for i in range(3)})
    names = sorted(tensors)
    return [{k: tensors[k] for k in names[i::3]} for i in range(3)], tensors


@pytest.mark.parametrize("form", ["index", "directory", "list", "directory without index"])
@pytest.mark.parametrize("path", ["direct", "staged", pytest.param("cuda", marks=needs_cuda)])
def test_a_sharded_checkpoint_loads_from_any_form(tmp_path, baseline, form, path):
    shards, tensors = three_shards()
    files = write_checkpoint(tmp_path, shards)
    if form == "directory without index":
        os.unlink(tmp_path / INDEX)
    where = {"index": str(tmp_path / INDEX), "list": files}.get(form, str(tmp_path))
    # 1 MiB chunks, two to a batch: batches hold the end of one shard
    # and the start of the next.
    got = sbt.load_safetensors(where, device="cuda" if path == "cuda" else "cpu",
                               staged=path == "staged", staging_bytes=8 << 20,
                               chunk_bytes=1 << 20, threads=3)
    assert_same(got, tensors)
    # File order: the shards in turn.
    assert list(got) == [name for shard in shards for name in sorted(shard, key=list(
        shard).index)]


def test_a_single_file_in_a_list_is_the_file(tmp_path, baseline):
    tensors = sample()
    write_minimal(tmp_path / "one.safetensors", tensors)
    assert_same(sbt.load_safetensors([tmp_path / "one.safetensors"]), tensors)


def hostile_index(tmp_path, case):
    """Write the case's checkpoint; return the path to load and the error's words."""
    a = {"a": torch.arange(10, dtype=torch.int32)}
    b = {"b": torch.arange(20, dtype=torch.int16)}
    if case == "missing shard":
        write_checkpoint(tmp_path, [a, b])
        os.unlink(tmp_path / shard_name(2, 2))
        return tmp_path / INDEX, "missing"
    if case == "one tensor in two shards":
        files = write_checkpoint(tmp_path, [a, dict(a)])
        return files, "in both"
    if case == "a name its shard lacks":
        write_checkpoint(tmp_path, [a, b], {"a": shard_name(1, 2), "b": shard_name(2, 2),
                                           "ghost": shard_name(1, 2)})
        return tmp_path / INDEX, "'ghost' is not in its shard"
    if case == "a tensor the index lacks":
        write_checkpoint(tmp_path, [a, b], {"a": shard_name(1, 2), "c": shard_name(2, 2)})
        return tmp_path / INDEX, "'b' of .* is not in the weight_map"
    if case == "the wrong shard":
        write_checkpoint(tmp_path, [a, b], {"a": shard_name(2, 2), "b": shard_name(1, 2)})
        return tmp_path / INDEX, "the weight_map says"
    if case in ("a shard outside the directory", "an absolute shard path"):
        outside = "../escape.safetensors" if case.startswith("a shard") else "/etc/passwd"
        write_minimal(tmp_path.parent / "escape.safetensors", a)
        write_checkpoint(tmp_path, [b], {"b": shard_name(1, 1), "a": outside})
        return tmp_path / INDEX, "outside the index's directory"
    if case == "not JSON":
        (tmp_path / INDEX).write_text("{weight_map: nope")
        return tmp_path / INDEX, "not JSON"
    if case == "no weight_map":
        (tmp_path / INDEX).write_text(json.dumps({"metadata": {}}))
        return tmp_path / INDEX, "no weight_map"
    if case == "a weight_map of numbers":
        (tmp_path / INDEX).write_text(json.dumps({"weight_map": {"a": 1}}))
        return tmp_path / INDEX, "not a non-empty string"
    if case == "two indexes":
        write_checkpoint(tmp_path, [a])
        (tmp_path / "other.safetensors.index.json").write_text((tmp_path / INDEX).read_text())
        return tmp_path, "several indexes"
    if case == "a hostile shard":
        write_checkpoint(tmp_path, [a, b])
        with open(tmp_path / shard_name(2, 2), "r+b") as f:
            f.truncate(12)
        return tmp_path, "past the end"
    raise AssertionError(case)


HOSTILE_INDEXES = ["missing shard", "one tensor in two shards", "a name its shard lacks",
                   "a tensor the index lacks", "the wrong shard", "a shard outside the directory",
                   "an absolute shard path", "not JSON", "no weight_map",
                   "a weight_map of numbers", "two indexes", "a hostile shard"]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("case", HOSTILE_INDEXES)
def test_hostile_checkpoints_are_value_errors_and_leak_nothing(tmp_path, baseline, case,
                                                                device):
    root = tmp_path / "checkpoint"
    root.mkdir()
    where, words = hostile_index(root, case)
    if device == "cuda":
        before = torch.cuda.memory_allocated()
    with pytest.raises(ValueError, match=words) as e:
        sbt.load_safetensors(where, device=device)
    if case == "a hostile shard":
        assert isinstance(e.value, FormatError)
    if device == "cuda":
        assert torch.cuda.memory_allocated() == before


def test_a_directory_without_a_checkpoint_says_so(tmp_path, baseline):
    with pytest.raises(FileNotFoundError, match="no .safetensors file"):
        sbt.load_safetensors(tmp_path)
    with pytest.raises(ValueError, match="no checkpoint file"):
        sbt.load_safetensors([])


def test_no_cuda_is_refused_before_any_shard_is_opened(tmp_path, baseline):
    if has_cuda():
        pytest.skip("torch has a CUDA device here: only a missing one is tested")
    shards, _ = three_shards()
    write_checkpoint(tmp_path, shards)
    with pytest.raises(OSError, match="device cuda"):
        sbt.load_safetensors(tmp_path, device="cuda")


def test_the_hugging_face_cache_layout_loads(tmp_path, baseline):
    """The hub cache: the snapshot's shards and index are symbolic links
    into blobs/, outside the snapshot's directory."""
    shards, tensors = three_shards()
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    files = write_checkpoint(blobs, shards)
    snapshot = tmp_path / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for f in files + [str(blobs / INDEX)]:
        os.symlink(os.path.relpath(f, snapshot), snapshot / os.path.basename(f))
    assert_same(sbt.load_safetensors(snapshot), tensors)
