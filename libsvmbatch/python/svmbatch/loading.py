# SPDX-License-Identifier: MIT
"""load_safetensors: a safetensors checkpoint (one file or its shards)
read with READ_FIXED on several cores, for CUDA through a ring of
registered staging memory whose copies to the GPU overlap the reads (one
ring for every shard, the next shard's reads overlapping the current
one's copies), for the CPU straight into the tensors."""

import contextlib as _contextlib
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

__all__ = ["iter_safetensors", "load_safetensors", "release_staging"]


def _check_read(results, names, path):
    for r, name in zip(results, names):
        if r.err:
            raise _io_error(r.err, f"{path}: reading tensor {name!r} after {r.bytes} bytes")


def _load_cpu(fd, entries, header, outputs, path, threads, context):
    """Read entries straight into their output tensors, registered for the read."""
    entries = [e for e in entries if e.nbytes]
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


# The ring kept between loads (a sharded checkpoint, the next model): a
# load takes it out of here and puts it back when done, so that no lock is
# held while an iterator waits for its caller; a second load at the same
# time makes a ring of its own, freed when it is done.
_staging = None
_staging_lock = _threading.Lock()


def release_staging() -> None:
    """Free the staging ring that load_safetensors keeps between loads."""
    global _staging
    with _staging_lock:
        ring, _staging = _staging, None
    if ring is not None:
        ring.close()


def _take_ring(key, nbytes, context, cuda, threads):
    global _staging
    with _staging_lock:
        ring, _staging = _staging, None
    if ring is not None and ring.key != key:
        ring.close()
        ring = None
    return ring if ring is not None else _Staging(key, nbytes, context, cuda, threads)


def _give_back(ring):
    global _staging
    with _staging_lock:
        if _staging is None:
            _staging, ring = ring, None
    if ring is not None:
        ring.close()


def _chunks(wanted, chunk_bytes):
    """(shard, offset, length) pieces of at most chunk_bytes covering the
    bytes of the wanted tensors (per shard, in file order), adjacent
    tensors' bytes read together, the bytes of others skipped."""
    out = []
    for s, entries in enumerate(wanted):
        runs = []
        for e in entries:
            if not e.nbytes:
                continue
            if runs and runs[-1][1] == e.begin:
                runs[-1][1] = e.end
            else:
                runs.append([e.begin, e.end])
        for begin, end in runs:
            out.extend((s, off, min(chunk_bytes, end - off))
                       for off in range(begin, end, chunk_bytes))
    return out


def _stream_staged(shards, wanted, make, device, dtype, threads, context, staging_bytes,
                   chunk_bytes):
    """Yield (name, tensor) of the wanted entries (per shard of shards,
    (fd, header, path) each, the entries in file order), in file order.
    The bytes are read into a ring of registered (and, for CUDA, mapped)
    staging slots on several cores; each slot is copied to the tensors it
    covers (on the device's current stream) as soon as its read completes,
    and read into again once its copies are done.  groups batches are in
    flight at once, and a batch may hold the end of one shard and the start
    of the next.  A tensor is made (make(entry)) when its first bytes
    arrive and handed out once its last copy is queued: memory holds the
    ring and the tensors the caller keeps, never the checkpoint: nothing
    here refers to a tensor once it is handed out.  dtype converts each
    floating-point tensor on its device as it is handed out."""
    cuda = device.type == "cuda"
    chunk_bytes = max(1 << 20, chunk_bytes // 4096 * 4096)
    slots = max(2, staging_bytes // chunk_bytes)
    groups = 4 if slots >= 8 else 2
    per_group = slots // groups
    slots = per_group * groups
    if cuda:
        backend, reason = _common.cuda_backend()
        if backend is None:
            raise _common.no_cuda(f"{shards[0][2]}: device cuda: {reason}")
        stream = _torch.cuda.current_stream(device)
        key = (slots * chunk_bytes, True, device.index, threads, id(context))
        with _torch.cuda.device(device):  # the ring is mapped for this GPU
            ring = _take_ring(key, slots * chunk_bytes, context, True, threads)
    else:
        stream = None
        key = (slots * chunk_bytes, False, -1, threads, id(context))
        ring = _take_ring(key, slots * chunk_bytes, context, False, threads)
    staging, base, reader = ring.tensor, ring.offset, ring.reader
    orders = [[e for e in entries if e.nbytes] for entries in wanted]
    chunks = _chunks(wanted, chunk_bytes)
    # What is handed out next: (shard, index in wanted[shard]).
    ready = [(s, e) for s, entries in enumerate(wanted) for e in entries]
    handed = 0
    flat = {}
    made = {}
    pending = _deque()
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
                dst = flat.get(e.name)
                if dst is None:
                    made[e.name] = make(e)
                    dst = flat[e.name] = _common.bytes_of(made[e.name])
                a = max(e.begin, c_off)
                b = min(e.end, c_off + c_len)
                dst[a - e.begin:b - e.begin].copy_(slot[a - c_off:b - c_off], non_blocking=True)
                k += 1
        if cuda:
            events[group] = _torch.cuda.Event()
            events[group].record(stream)
        last_s, last_off, last_len = chunks[first + len(results) - 1]
        return last_s, last_off + last_len

    def take(e):
        flat.pop(e.name, None)
        t = made.pop(e.name, None)
        return _converted(t if t is not None else make(e), dtype)

    def complete(frontier):
        """The tensors whose bytes are all copied, in file order."""
        nonlocal handed
        while handed < len(ready):
            s, e = ready[handed]
            if frontier is not None and (s, e.end) > frontier:
                return
            handed += 1
            yield e.name, take(e)

    try:
        for n, first in enumerate(range(0, len(chunks), per_group)):
            group = n % groups
            if len(pending) == groups:
                yield from complete(copy_out(*pending.popleft()))
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
            yield from complete(copy_out(*pending.popleft()))
        yield from complete(None)
    finally:
        # Every batch waited for or cancelled before the ring is reused.
        for _, _, batch in pending:
            batch.cancel()
            batch.wait()
        if cuda:
            stream.synchronize()  # no copy from the ring still in flight
        _give_back(ring)


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


_Names = _typing.Union[_typing.Iterable[str], _typing.Callable[[str], bool], None]
_Path = _typing.Union[str, _os.PathLike, _typing.Sequence[_typing.Union[str, _os.PathLike]]]


def _device_of(device, where):
    # An int is a CUDA device, as for safetensors and torch.
    device = _torch.device("cuda", device) if isinstance(device, int) else _torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device}: cpu or cuda")
    if device.type == "cuda":
        device = _common.cuda_device(device, where)
    return device


def _wanted(shards, names, where):
    """Per shard, the entries to load; names: None (all), a predicate, or
    names that must all be in the checkpoint."""
    if names is None:
        return [list(header.entries) for _, header, _ in shards]
    if callable(names):
        return [[e for e in header.entries if names(e.name)] for _, header, _ in shards]
    names = set(names)
    wanted = [[e for e in header.entries if e.name in names] for _, header, _ in shards]
    missing = names - {e.name for entries in wanted for e in entries}
    if missing:
        raise KeyError(f"{where}: no tensor {', '.join(repr(n) for n in sorted(missing))}")
    return wanted


def _maker(shards, wanted, device):
    """The torch dtype and shape of every wanted entry, checked before
    anything is read; make(entry) allocates its tensor."""
    specs = {}
    for (_, _, f), entries in zip(shards, wanted):
        for e in entries:
            specs[e.name] = _common.torch_dtype(e, f)

    def make(e):
        kind, shape = specs[e.name]
        return _torch.empty(shape, dtype=kind, device=device)
    return make


@_contextlib.contextmanager
def _opened(path, device, names):
    """The checkpoint at path, opened and checked for a load to device:
    (shards, the wanted entries per shard, their maker, the device); the
    device is checked before any file is opened, every fd closed after."""
    checkpoint = _checkpoint.resolve(path)
    where = checkpoint.index or checkpoint.files[0]
    device = _device_of(device, where)
    shards = _open_shards(checkpoint)
    try:
        wanted = _wanted(shards, names, where)
        yield shards, wanted, _maker(shards, wanted, device), device
    finally:
        for fd, _, _ in shards:
            _os.close(fd)


def _converted(t, dtype):
    # Packed float4 pairs have no elementwise conversion.
    if dtype is None or not t.is_floating_point() or t.dtype in _common.PACKED:
        return t
    return t.to(dtype)


def iter_safetensors(path: _Path, device: _typing.Union[_torch.device, str, int] = "cpu",
                     dtype: _typing.Optional[_torch.dtype] = None, *, names: _Names = None,
                     threads: int = 0, context: _typing.Optional[_svmbatch.Context] = None,
                     staging_bytes: int = 256 << 20, chunk_bytes: int = 8 << 20
                     ) -> _typing.Iterator[tuple[str, _torch.Tensor]]:
    """(name, tensor) of a safetensors checkpoint, one tensor at a time in
    file order, for a serving engine's load_weights(): what
    load_safetensors returns, without holding the model.  path is what
    load_safetensors takes.  The bytes go through the staging ring
    (staging_bytes, also for the CPU) into each tensor, made when its
    first bytes arrive and handed out when its copy is queued (on the
    device's current stream, so the caller's use of it comes after);
    memory holds the ring and what the caller keeps.  names selects the
    tensors: a collection of names (each must exist, else KeyError) or a
    predicate; the others' bytes are not read.  dtype converts the
    floating-point tensors, on the device, as each is handed out.
    Stopping early (break, close()) cancels the reads in flight."""
    with _opened(path, device, names) as (shards, wanted, make, device):
        yield from _stream_staged(shards, wanted, make, device, dtype, threads, context,
                                  staging_bytes, chunk_bytes)


def load_safetensors(path: _Path, device: _typing.Union[_torch.device, str, int] = "cpu",
                     dtype: _typing.Optional[_torch.dtype] = None, *, names: _Names = None,
                     threads: int = 0, context: _typing.Optional[_svmbatch.Context] = None,
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
    copies overlap the reads (the stream of iter_safetensors, into tensors
    all made before the first read); for the CPU
    straight into the tensors.  names loads only some tensors (as
    iter_safetensors).  dtype converts the floating-point tensors.
    staged=True loads CPU tensors through the staging ring too (staged=None:
    for CUDA only)."""
    with _opened(path, device, names) as (shards, wanted, make, device):
        # Every tensor made before the first read: no allocation in the
        # loop that keeps the reads going.
        outputs = {e.name: make(e) for entries in wanted for e in entries}
        if device.type == "cuda" or staged:
            return dict(_stream_staged(shards, wanted, lambda e: outputs[e.name], device, dtype,
                                       threads, context, staging_bytes, chunk_bytes))
        for (fd, header, f), entries in zip(shards, wanted):
            _load_cpu(fd, entries, header, outputs, f, threads, context)
    return {k: _converted(v, dtype) for k, v in outputs.items()}
