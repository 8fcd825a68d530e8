# SPDX-License-Identifier: MIT
"""load_safetensors: a safetensors checkpoint (one file or its shards)
read with READ_FIXED on several cores, for CUDA through a ring of
registered staging memory whose copies to the GPU overlap the reads (one
ring for every shard, the next shard's reads overlapping the current
one's copies), for the CPU straight into the tensors.  A shard the page
cache does not hold is read with O_DIRECT (io="auto")."""

import contextlib as _contextlib
import errno as _errno
import os as _os
import threading as _threading
import typing as _typing
from collections import deque as _deque

import torch as _torch

from . import _checkpoint
from . import _svmbatch
from . import _torch_common as _common
from ._errors import Error as _svmbatch_error
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
        # Page-aligned slots: O_DIRECT reads land in them.
        self.arena = _Arena(nbytes, context=context, cuda=cuda, alignment=_DIRECT_ALIGN)
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


# File offsets, lengths and memory of O_DIRECT reads are multiples of
# this: every logical block size up to 4 KiB, and the page size.
_DIRECT_ALIGN = 4096


def _chunks(wanted, chunk_bytes, starts, direct):
    """(shard, offset, length, file offset, read length) pieces, each read
    of at most chunk_bytes, covering the bytes of the wanted tensors (per
    shard, in file order; offsets into the data section, which begins at
    file offset starts[shard]), adjacent tensors' bytes read together, the
    bytes of others skipped.  A read of a buffered shard is its piece; one
    of an O_DIRECT shard (direct[shard]) begins and ends on _DIRECT_ALIGN
    file offsets around it (the last one may reach past the end of the
    file), and the piece is the wanted bytes inside it."""
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
        start = starts[s]
        for begin, end in runs:
            if direct[s] is None:
                out.extend((s, off, min(chunk_bytes, end - off), start + off,
                            min(chunk_bytes, end - off))
                           for off in range(begin, end, chunk_bytes))
                continue
            low = (start + begin) // _DIRECT_ALIGN * _DIRECT_ALIGN
            high = -(-(start + end) // _DIRECT_ALIGN) * _DIRECT_ALIGN
            for at in range(low, high, chunk_bytes):
                n = min(chunk_bytes, high - at)
                a = max(at, start + begin)
                b = min(at + n, start + end)
                out.append((s, a - start, b - a, at, n))
    return out


def _check_direct(r, s, shards, piece):
    """A read of an O_DIRECT shard may stop at the end of the file (short,
    ENODATA): fine if it has every byte the piece wants."""
    _, c_off, c_len, r_off, _ = piece
    _, header, path = shards[s]
    needed = header.data_start + c_off + c_len - r_off
    if r.bytes < needed:
        err = r.err if r.err not in (0, _errno.ENODATA) else _errno.EIO
        raise _io_error(err, f"{path}: O_DIRECT read at file offset {r_off}: {r.bytes} of "
                             f"the {needed} bytes that hold data bytes [{c_off}, "
                             f"{c_off + c_len})")


def _stream_staged(shards, wanted, make, device, dtype, threads, context, staging_bytes,
                   chunk_bytes, direct):
    """Yield (name, tensor) of the wanted entries (per shard of shards,
    (fd, header, path) each, the entries in file order), in file order.
    direct: per shard, its O_DIRECT fd to read it with, or None.
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
    chunks = _chunks(wanted, chunk_bytes, [h.data_start for _, h, _ in shards], direct)
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
            s, c_off = chunks[first + j][:2]
            if direct[s] is not None:
                _check_direct(r, s, shards, chunks[first + j])
            elif r.err:
                raise _io_error(r.err, f"{shards[s][2]}: reading data bytes at {c_off}")
        for j in range(len(results)):
            s, c_off, c_len, r_off, _ = chunks[first + j]
            order = orders[s]
            # Where the piece's first byte is in the slot (0 unless O_DIRECT).
            skew = shards[s][1].data_start + c_off - r_off
            slot = staging[(group * per_group + j) * chunk_bytes + skew:][:c_len]
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
        last_s, last_off, last_len = chunks[first + len(results) - 1][:3]
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
                s, _, _, r_off, r_len = chunks[first + j]
                fd = shards[s][0] if direct[s] is None else direct[s]
                requests.append((fd, r_off, r_len, 0,
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


_IO_MODES = ("auto", "buffered", "direct")


def _check_io(io):
    if io not in _IO_MODES:
        raise ValueError(f"io={io!r}: one of {', '.join(repr(m) for m in _IO_MODES)}")


def _cold(fd, header):
    """Whether less than half of a shard's data is in the page cache (one
    query); a file whose residency cannot be told is read buffered."""
    try:
        r = _svmbatch.page_cache_residency(fd, header.data_start, header.data_bytes)
    except _svmbatch_error:
        return False
    return r.resident_pages * 2 < r.total_pages


def _open_direct(shards, wanted, io, direct):
    """Append to direct, per shard, an O_DIRECT fd of it or None: for
    io="direct" every shard with bytes to read, for "auto" those the page
    cache holds less than half of.  A file system that refuses O_DIRECT
    (tmpfs: EINVAL) is an error for "direct", the buffered path for "auto"."""
    for (fd, header, f), entries in zip(shards, wanted):
        if io == "buffered" or not any(e.nbytes for e in entries) or \
                (io == "auto" and not _cold(fd, header)):
            direct.append(None)
            continue
        try:
            direct.append(_os.open(f, _os.O_RDONLY | _os.O_CLOEXEC | _os.O_DIRECT))
        except OSError as e:
            if io == "auto" and e.errno in (_errno.EINVAL, _errno.EOPNOTSUPP):
                direct.append(None)
                continue
            hint = "" if e.errno != _errno.EINVAL else \
                " (its file system may have no O_DIRECT: io='auto' then reads it buffered)"
            raise _io_error(e.errno, f"{f}: open with O_DIRECT for io={io!r}{hint}") from None


@_contextlib.contextmanager
def _opened(path, device, names, io="buffered"):
    """The checkpoint at path, opened and checked for a load to device:
    (shards, the wanted entries per shard, their maker, the device, the
    O_DIRECT fd of each shard or None, as io says); io and the device are
    checked before any file is opened, every fd closed after."""
    _check_io(io)
    checkpoint = _checkpoint.resolve(path)
    where = checkpoint.index or checkpoint.files[0]
    device = _device_of(device, where)
    shards = _open_shards(checkpoint)
    direct = []
    try:
        wanted = _wanted(shards, names, where)
        make = _maker(shards, wanted, device)
        _open_direct(shards, wanted, io, direct)
        yield shards, wanted, make, device, direct
    finally:
        for fd in direct:
            if fd is not None:
                _os.close(fd)
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
                     staging_bytes: int = 64 << 20, chunk_bytes: int = 4 << 20,
                     io: str = "auto") -> _typing.Iterator[tuple[str, _torch.Tensor]]:
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
    Stopping early (break, close()) cancels the reads in flight.  io is
    how the files are read, as for load_safetensors."""
    with _opened(path, device, names, io) as (shards, wanted, make, device, direct):
        yield from _stream_staged(shards, wanted, make, device, dtype, threads, context,
                                  staging_bytes, chunk_bytes, direct)


def load_safetensors(path: _Path, device: _typing.Union[_torch.device, str, int] = "cpu",
                     dtype: _typing.Optional[_torch.dtype] = None, *, names: _Names = None,
                     threads: int = 0, context: _typing.Optional[_svmbatch.Context] = None,
                     staging_bytes: int = 64 << 20, chunk_bytes: int = 4 << 20,
                     staged: _typing.Optional[bool] = None,
                     io: str = "auto") -> dict[str, _torch.Tensor]:
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
    for CUDA, and for the CPU where a shard is read with O_DIRECT).

    io says how each file is read: "buffered" through the page cache,
    "direct" with O_DIRECT (4096-aligned reads into the staging ring,
    around the page cache: for a checkpoint that is not in it; a file
    system without O_DIRECT, such as tmpfs, is an svmbatch.Error EINVAL
    naming the file), "auto" (the default) O_DIRECT for each shard the page
    cache holds less than half of (svmbatch.page_cache_residency()), else,
    and where the file system has no O_DIRECT, buffered.  staged=False
    reads buffered: O_DIRECT needs the ring's aligned memory."""
    _check_io(io)
    if staged is False and io == "direct":
        raise ValueError("io='direct' reads through the staging ring: not with staged=False")
    if staged is False and io == "auto":
        io = "buffered"
    with _opened(path, device, names, io) as (shards, wanted, make, device, direct):
        # Every tensor made before the first read: no allocation in the
        # loop that keeps the reads going.
        outputs = {e.name: make(e) for entries in wanted for e in entries}
        if device.type == "cuda" or staged or any(fd is not None for fd in direct):
            return dict(_stream_staged(shards, wanted, lambda e: outputs[e.name], device, dtype,
                                       threads, context, staging_bytes, chunk_bytes, direct))
        for (fd, header, f), entries in zip(shards, wanted):
            _load_cpu(fd, entries, header, outputs, f, threads, context)
    return {k: _converted(v, dtype) for k, v in outputs.items()}
