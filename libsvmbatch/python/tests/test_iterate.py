# SPDX-License-Identifier: MIT
"""iter_safetensors: a checkpoint one (name, tensor) at a time, as a
serving engine's load_weights() takes it; only some names; dtype on the
way; stopping early; and the loader keeping none of what it handed out."""

import gc
import weakref

import pytest

import torch  # required: an import failure is a collection error
import svmbatch.torch as sbt
from conftest import needs_cuda
from test_safetensors import assert_same, raw_bytes, sample, write_minimal
from test_sharded import three_shards, write_checkpoint

DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


def ring_of(chunk_mib=1, slots=8):
    return {"staging_bytes": (slots * chunk_mib) << 20, "chunk_bytes": chunk_mib << 20}


@pytest.mark.parametrize("device", DEVICES)
def test_the_iterator_yields_the_checkpoint_in_file_order(tmp_path, baseline, device):
    shards, tensors = three_shards()
    write_checkpoint(tmp_path, shards)
    pairs = list(sbt.iter_safetensors(tmp_path, device, threads=3, **ring_of()))
    assert [n for n, _ in pairs] == [n for shard in shards for n in shard]
    assert all(t.device.type == device for _, t in pairs)
    assert_same(dict(pairs), tensors)


@pytest.mark.parametrize("device", DEVICES)
def test_names_load_only_those_tensors(tmp_path, baseline, device):
    shards, tensors = three_shards()
    write_checkpoint(tmp_path, shards)
    some = {"big1", "ids", "empty", "scalar"}
    got = dict(sbt.iter_safetensors(tmp_path, device, names=some, **ring_of()))
    assert_same(got, {k: tensors[k] for k in some})
    got = sbt.load_safetensors(tmp_path, device, names=lambda n: n.startswith("layer."))
    assert_same(got, {k: v for k, v in tensors.items() if k.startswith("layer.")})
    got = sbt.load_safetensors(tmp_path, device, names=[], staged=True)
    assert got == {}


@pytest.mark.parametrize("device", DEVICES)
def test_a_name_the_checkpoint_lacks_is_a_key_error_before_any_read(tmp_path, baseline,
                                                                    device):
    write_minimal(tmp_path / "m.safetensors", sample())
    with pytest.raises(KeyError, match="'nope'"):
        next(sbt.iter_safetensors(tmp_path / "m.safetensors", device, names={"ids", "nope"}))
    with pytest.raises(KeyError, match="'nope'"):
        sbt.load_safetensors(tmp_path / "m.safetensors", device, names=["nope"])


@pytest.mark.parametrize("device", DEVICES)
def test_dtype_converts_each_floating_point_tensor_on_its_device(tmp_path, baseline, device):
    tensors = sample()
    write_minimal(tmp_path / "m.safetensors", tensors)
    for name, t in sbt.iter_safetensors(tmp_path / "m.safetensors", device,
                                        dtype=torch.float16):
        want = tensors[name]
        if want.is_floating_point():
            assert t.dtype == torch.float16 and t.device.type == device, name
            assert torch.equal(t.cpu(), want.to(torch.float16)), name
        else:
            assert t.dtype == want.dtype and torch.equal(t.cpu(), want), name


@pytest.mark.parametrize("allocate", ["block", "tensor"])
@pytest.mark.parametrize("device", DEVICES)
def test_the_loader_keeps_nothing_it_handed_out(tmp_path, baseline, device, allocate):
    """Each tensor is the caller's alone: dropped, nothing of the iterator
    refers to it, and device memory holds the round being read, never the
    checkpoint."""
    shards, tensors = three_shards()
    write_checkpoint(tmp_path, shards)
    round_bytes = 2 << 20
    if device == "cuda":
        before = torch.cuda.memory_allocated()
    seen = []
    for name, t in sbt.iter_safetensors(tmp_path, device, allocate=allocate,
                                        round_bytes=round_bytes, **ring_of()):
        assert raw_bytes(t.cpu()) == raw_bytes(tensors[name]), name
        seen.append(weakref.ref(t))
        del t
        gc.collect()
        assert all(r() is None for r in seen), name
        if device == "cuda":
            # A round, and a tensor larger than a round on its own.
            largest = max(v.numel() * v.element_size() for v in tensors.values())
            assert torch.cuda.memory_allocated() - before <= round_bytes + largest + (1 << 20), \
                name
    assert len(seen) == len(tensors)
    if device == "cuda":
        assert torch.cuda.memory_allocated() == before


@pytest.mark.parametrize("device", DEVICES)
def test_stopping_early_cancels_and_leaves_nothing(tmp_path, baseline, device):
    big = {f"t{i}": torch.randn(1 << 18) for i in range(16)}  # 16 MiB, 1 MiB each
    write_minimal(tmp_path / "big.safetensors", big)
    it = sbt.iter_safetensors(tmp_path / "big.safetensors", device, **ring_of())
    name, t = next(it)
    assert name == "t0" and torch.equal(t.cpu(), big["t0"])
    it.close()
    # The ring is back for the next load, which is whole.
    assert_same(sbt.load_safetensors(tmp_path / "big.safetensors", device, staged=True,
                                     **ring_of()), big)
    for name, t in sbt.iter_safetensors(tmp_path / "big.safetensors", device, **ring_of()):
        if name == "t9":
            break
    del it, t
