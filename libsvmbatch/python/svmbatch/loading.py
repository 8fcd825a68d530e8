# SPDX-License-Identifier: MIT
"""load_safetensors: a safetensors checkpoint (one file or its shards)
read with READ_FIXED on several cores, for CUDA through a ring of
registered staging memory whose copies to the GPU overlap the reads (one
ring for every shard, the next shard's reads overlapping the current
one's copies), for the CPU straight into the tensors."""

import os as _os
import threading as _threading
import typing as _typing
from collections import deque as _deque

import torch as _torch

from . import _checkpoint
from . import _svmbatch
from . import _torch_common as _common
from ._errors import io_error as _io_error
from .arena import Arena as _Arena
from .pinning import _register_tensors
from .safetensors_format import read_header as _read_header

__all__ = ["load_safetensors", "release_staging"]


def _check_read(results, names, path):
    for r, name in zip(results, names):
        if r.err:
            raise _io_error(r.err, f"{path}: reading tensor {name!r} after {r.bytes} bytes")


def _load_cpu(fd, header, outputs, path, threads, context):
    """Read straight into the output tensors, registered for the read."""
    entries = [e for e in header.entries if e.nbytes]
    if not entries:
        return
    tensors = [outputs[e.name] for e in entries]
    registration, which, spans, _ = _register_tensors(tensors, context)
    with registration, _svmbatch.Reader(registration, threads=threads) as reader:
        requests = [(fd, header.data_start + e.begin, e.nbytes, k, t.data_ptr() - spans[k][0])
                    for e, t, k in zip(entries, tensors, which)]
        _check_read(reader.read(requests), [e.name for e in entries], path)


class _Staging:
    """The staging ring of _load_staged: registered (CUDA-mapped) memory
    and a Reader over it, kept for the next load (a sharded checkpoint is
    several files) until release_staging()."""

    def __init__(self, key, nbytes, context, cuda, threads):
        self.key = key
        self.arena = _Arena(nbytes, context=context, cuda=cuda)
        self.tensor = self.arena.empty(nbytes, dtype=_torch.uint8)
        self.offset = self.tensor.data_ptr() - self.arena.base_address
        self.reader = _svmbatch.Reader(self.arena.registration, threads=threads)

    def close(self):
        self.reader.close()
        self.arena.close()
        self.tensor = None


_staging = None
_staging_lock = _threading.Lock()


def release_staging() -> None:
    """Free the staging ring that load_safetensors keeps between loads."""
    global _staging
    with _staging_lock:
        if _staging is not None:
            _staging.close()
            _staging = None


def _staging_for(key, nbytes, context, cuda, threads):
    """The cached ring if it fits key (the caller holds _staging_lock)."""
    global _staging
    if _staging is None or _staging.key != key:
        if _staging is not None:
            _staging.close()
            _staging = None
        _staging = _Staging(key, nbytes, context, cuda, threads)
    return _staging


def _load_staged(shards, outputs, threads, context, staging_bytes, chunk_bytes, cuda):
    """Read the shards ((fd, header, path) each, in order) into a ring of
    registered (and CUDA-mapped) staging slots on several cores; copy each
    slot to the tensors it covers (on the CUDA stream) as soon as its read
    completes, and read into it again once its copies are done.  groups
    batches are in flight at once, and a batch may hold the end of one
    shard and the start of the next.  cuda=False copies to CPU tensors the
    same way (the tests of the ring's logic)."""
    chunk_bytes = max(1 << 20, chunk_bytes // 4096 * 4096)
    slots = max(2, staging_bytes // chunk_bytes)
    groups = 4 if slots >= 8 else 2
    per_group = slots // groups
    slots = per_group * groups
    if cuda:
        backend, reason = _common.cuda_backend()
        if backend is None:
            raise _common.no_cuda(f"{shards[0][2]}: device cuda: {reason}")
    stream = _torch.cuda.current_stream() if cuda else None
    flat = {e.name: _common.bytes_of(outputs[e.name])
            for _, header, _ in shards for e in header.entries if e.nbytes}
    # Per shard: its tensors with bytes, in file order.
    orders = [[e for e in header.entries if e.nbytes] for _, header, _ in shards]
    key = (slots * chunk_bytes, cuda, _torch.cuda.current_device() if cuda else -1, threads,
           id(context))
    # One load at a time uses the cached ring; a concurrent one gets its own.
    shared = _staging_lock.acquire(blocking=False)
    try:
        ring = _staging_for(key, slots * chunk_bytes, context, cuda, threads) if shared else \
            _Staging(key, slots * chunk_bytes, context, cuda, threads)
    except BaseException:
        if shared:
            _staging_lock.release()
        raise
    staging, base, reader = ring.tensor, ring.offset, ring.reader
    pending = _deque()
    try:
        # Every shard's data section in chunks: (shard, offset in it, length).
        chunks = [(s, off, min(chunk_bytes, header.data_bytes - off))
                  for s, (_, header, _) in enumerate(shards)
                  for off in range(0, header.data_bytes, chunk_bytes)]
        events = [None] * groups
        t_index = [0] * len(shards)  # per shard: first tensor that may overlap its next chunk

        def copy_out(group, first, batch):
            results = batch.wait()
            for j, r in enumerate(results):
                if r.err:
                    s, c_off, _ = chunks[first + j]
                    raise _io_error(r.err, f"{shards[s][2]}: reading data bytes at {c_off}")
            for j in range(len(results)):
                s, c_off, c_len = chunks[first + j]
                order = orders[s]
                slot = staging[(group * per_group + j) * chunk_bytes:][:c_len]
                while t_index[s] < len(order) and order[t_index[s]].end <= c_off:
                    t_index[s] += 1
                k = t_index[s]
                while k < len(order) and order[k].begin < c_off + c_len:
                    e = order[k]
                    a = max(e.begin, c_off)
                    b = min(e.end, c_off + c_len)
                    flat[e.name][a - e.begin:b - e.begin].copy_(
                        slot[a - c_off:b - c_off], non_blocking=True)
                    k += 1
            if cuda:
                events[group] = _torch.cuda.Event()
                events[group].record(stream)

        for n, first in enumerate(range(0, len(chunks), per_group)):
            group = n % groups
            if len(pending) == groups:
                copy_out(*pending.popleft())
            if events[group] is not None:
                events[group].synchronize()  # its slots' copies are done
            requests = []
            for j in range(min(per_group, len(chunks) - first)):
                s, c_off, c_len = chunks[first + j]
                fd, header, _ = shards[s]
                requests.append((fd, header.data_start + c_off, c_len, 0,
                                 base + (group * per_group + j) * chunk_bytes))
            pending.append((group, first, reader.start(requests)))
        while pending:
            copy_out(*pending.popleft())
    finally:
        # Every batch waited for or cancelled before the ring is reused.
        for _, _, batch in pending:
            batch.cancel()
            batch.wait()
        if cuda:
            stream.synchronize()  # no copy from the ring still in flight
        if shared:
            _staging_lock.release()
        else:
            ring.close()


def _open_shards(checkpoint):
    """(fd, header, path) of every shard, checked against the index and
    against each other (a tensor name in two shards); closes what it
    opened if anything is wrong."""
    shards = []
    try:
        for f in checkpoint.files:
            fd = _os.open(f, _os.O_RDONLY | _os.O_CLOEXEC)
            shards.append((fd, None, f))
            shards[-1] = (fd, _read_header(fd, f), f)
        _checkpoint.check_index(checkpoint,
                                [[e.name for e in h.entries] for _, h, _ in shards])
        seen = {}
        for _, header, f in shards:
            for e in header.entries:
                if e.name in seen:
                    raise _checkpoint.CheckpointIndexError(
                        f"tensor {e.name!r} is in both {seen[e.name]} and {f}")
                seen[e.name] = f
    except BaseException:
        for fd, _, _ in shards:
            _os.close(fd)
        raise
    return shards


def load_safetensors(path: _typing.Union[str, _os.PathLike,
                                         _typing.Sequence[_typing.Union[str, _os.PathLike]]],
                     device: _typing.Union[_torch.device, str, int] = "cpu",
                     dtype: _typing.Optional[_torch.dtype] = None, *, threads: int = 0,
                     context: _typing.Optional[_svmbatch.Context] = None,
                     staging_bytes: int = 256 << 20, chunk_bytes: int = 8 << 20,
                     staged: _typing.Optional[bool] = None) -> dict[str, _torch.Tensor]:
    """Load a safetensors checkpoint: a dict name -> tensor on device (the
    CPU unless told, as safetensors), equal to
    safetensors.torch.load_file(path, device) for one file and to the union
    of its shards for a sharded one.  path is a .safetensors file, a list
    of them, a Hugging Face index (model.safetensors.index.json, checked
    against the shards' headers) or a directory holding an index or shards.
    The files are parsed here (hostile files and indexes raise
    ValueError), read with READ_FIXED on several cores (threads: 0 = the
    CPUs, at most 16); for CUDA through one ring of staging_bytes of
    registered, CUDA-mapped staging buffers for every shard, whose H2D
    copies overlap the reads; for the CPU straight into the tensors.
    dtype converts the floating-point tensors after loading.  staged=True
    loads CPU tensors through the staging ring too (staged=None: for CUDA
    only)."""
    checkpoint = _checkpoint.resolve(path)
    where = checkpoint.index or checkpoint.files[0]
    # An int is a CUDA device, as for safetensors and torch.
    device = _torch.device("cuda", device) if isinstance(device, int) else _torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device}: cpu or cuda")
    if device.type == "cuda":
        device = _common.cuda_device(device, where)
    shards = _open_shards(checkpoint)
    try:
        outputs = {}
        for _, header, f in shards:
            for e in header.entries:
                kind, shape = _common.torch_dtype(e, f)
                outputs[e.name] = _torch.empty(shape, dtype=kind, device=device)
        if device.type == "cuda":
            with _torch.cuda.device(device):
                _load_staged(shards, outputs, threads, context, staging_bytes, chunk_bytes,
                             cuda=True)
        elif staged:
            _load_staged(shards, outputs, threads, context, staging_bytes, chunk_bytes,
                         cuda=False)
        else:
            for fd, header, f in shards:
                _load_cpu(fd, header, outputs, f, threads, context)
    finally:
        for fd, _, _ in shards:
            _os.close(fd)
    if dtype is not None:
        # Packed float4 pairs have no elementwise conversion.
        outputs = {k: (v.to(dtype) if v.is_floating_point() and v.dtype not in _common.PACKED
                       else v) for k, v in outputs.items()}
    return outputs
