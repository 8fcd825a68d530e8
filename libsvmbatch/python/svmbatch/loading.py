# SPDX-License-Identifier: MIT
"""load_safetensors: a safetensors checkpoint (one file or its shards)
planned here and read by one call of the ExtentReader (READ_FIXED on
several cores into its staging ring, each chunk copied to the device as
it arrives), into one block per shard carved into the tensors or into
tensors of their own; for the CPU straight into the tensors.  A shard the
page cache does not hold is read with O_DIRECT (io="auto")."""

import contextlib as _contextlib
import errno as _errno
import os as _os
import typing as _typing

import torch as _torch

from . import _checkpoint
from . import _staging
from . import _svmbatch
from . import _torch_common as _common
from ._errors import Error as _svmbatch_error
from ._errors import io_error as _io_error
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


def release_staging() -> None:
    """Free the staging ring (and the reader around it) that the loaders
    keep between loads."""
    _staging.release()


def _fds(shards, direct):
    """Per shard, the fd its bytes are read with (its O_DIRECT one where
    it has one: the reader aligns those reads itself)."""
    return [fd if d is None else d for (fd, _, _), d in zip(shards, direct)]


def _targets(items, make):
    """(tensor, extent address) of items, each made by make(entry)."""
    out = []
    for it in items:
        t = make(it.entry)
        n = it.entry.nbytes
        if n and (not t.is_contiguous() or t.numel() * t.element_size() != n):
            raise ValueError(f"tensor {it.entry.name!r}: its target is not {n} contiguous "
                             "bytes")
        out.append(t)
    return out


def _read_rounds(shards, wanted, make, device, dtype, threads, context, staging_bytes,
                 chunk_bytes, direct, round_bytes, specs=None):
    """Yield (name, tensor) of the wanted entries (per shard of shards,
    (fd, header, path) each, in file order), in file order, read a round
    at a time (round_bytes of tensors, a larger tensor a round of its own)
    by one call of the reader: each round's tensors either made by make
    (one extent each; tensors adjacent in the file are still read
    together) or, make None, views of one block allocated for the round,
    whose runs of adjacent tensors are one extent each.  On CUDA the
    copies run on the device's current stream and have ended when a
    round's tensors are handed out.  dtype converts each floating-point
    tensor as it is handed out."""
    starts = [h.data_start for _, h, _ in shards]
    paths = [p for _, _, p in shards]
    fds = _fds(shards, direct)
    items = [_staging.Item(s, e) for s, entries in enumerate(wanted) for e in entries]
    if make is None and specs is None:
        specs = _staging.specs_of(shards, wanted)
    reader = _staging.take(device, context, threads, staging_bytes, chunk_bytes)
    try:
        for batch in _staging.rounds(items, round_bytes):
            with _staging.no_gc():
                if make is None:
                    size = _staging.layout(batch)
                    block = _torch.empty(size, dtype=_torch.uint8, device=device)
                    extents, owners = _staging.extents_of(batch, starts, fds, block.data_ptr())
                    _staging.check(reader.read(extents), extents, owners, paths)
                    out = _staging.views(block, batch, specs)
                    del block
                else:
                    tensors = _targets(batch, make)
                    extents = [(fds[it.s], starts[it.s] + it.entry.begin, it.entry.nbytes,
                                t.data_ptr()) for it, t in zip(batch, tensors) if it.entry.nbytes]
                    owners = [[it] for it in batch if it.entry.nbytes]
                    _staging.check(reader.read(extents), extents, owners, paths)
                    out = [(it.entry.name, t) for it, t in zip(batch, tensors)]
                    del tensors
                # Handed out from the end of a reversed list, so that the
                # generator's frame refers to no tensor it handed out.
                out = [(name, _converted(t, dtype)) for name, t in reversed(out)]
            while out:
                yield out.pop()
    finally:
        _staging.give_back(reader)


def _load_blocks(shards, wanted, specs, device, reader, direct, timer):
    """dict name -> tensor of the wanted entries: one block per shard,
    every shard's extents read in one call (the next shard's reads overlap
    this one's copies), the tensors views of the blocks."""
    try:
        starts = [h.data_start for _, h, _ in shards]
        paths = [p for _, _, p in shards]
        fds = _fds(shards, direct)
        per_shard = [[_staging.Item(s, e) for e in entries] for s, entries in enumerate(wanted)]
        sizes = [_staging.layout(batch) for batch in per_shard]
        timer.step("plan")
        blocks = [_torch.empty(n, dtype=_torch.uint8, device=device) for n in sizes]
        timer.step("allocate")
        extents = []
        owners = []
        for block, batch in zip(blocks, per_shard):
            x, o = _staging.extents_of(batch, starts, fds, block.data_ptr())
            extents += x
            owners += o
        timer.step("plan")
    except BaseException:
        reader.give_back()
        raise
    reader = reader.get()
    timer.step("reader")
    try:
        _staging.check(reader.read(extents), extents, owners, paths)
        timer.step("read")
        timer.done(reader)
    finally:
        _staging.give_back(reader)
    out = {}
    for block, batch in zip(blocks, per_shard):
        out.update(_staging.views(block, batch, specs))
    timer.step("views")
    return out


def _open_shards(checkpoint):
    """(fd, header, path) of every shard, checked against the index and
    against each other (a tensor name in two shards); closes what it
    opened if anything is wrong."""
    with _staging.no_gc():
        shards = []
        try:
            for f in checkpoint.files:
                fd = _os.open(f, _os.O_RDONLY | _os.O_CLOEXEC)
                shards.append((fd, None, f))
                shards[-1] = (fd, _read_header(fd, f), f)
            _checkpoint.check_index(checkpoint,
                                    [[e.name for e in h.entries] for _, h, _ in shards])
            if len({e.name for _, h, _ in shards for e in h.entries}) != \
                    sum(len(h.entries) for _, h, _ in shards):
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
    anything is read (make.specs); make(entry) allocates its tensor."""
    specs = _staging.specs_of(shards, wanted)

    def make(e):
        kind, shape = specs[e.name][:2]
        return _torch.empty(shape, dtype=kind, device=device)
    make.specs = specs
    return make


_IO_MODES = ("auto", "buffered", "direct")


def _check_io(io):
    if io not in _IO_MODES:
        raise ValueError(f"io={io!r}: one of {', '.join(repr(m) for m in _IO_MODES)}")


# A shard larger than _SAMPLES * _SAMPLE_BYTES * 2 has its residency
# sampled: cachestat() walks every page of its range (about 14 ms for a
# 3 GB file on the H200), a few windows tell cached from cold as well.
_SAMPLES = 16
_SAMPLE_BYTES = 2 << 20


def _cold(fd, header):
    """Whether less than half of a shard's data is in the page cache (one
    query, or one per sampled window of a large shard); a file whose
    residency cannot be told is read buffered."""
    start, n = header.data_start, header.data_bytes
    if n <= _SAMPLES * _SAMPLE_BYTES * 2:
        windows = [(start, n)]
    else:
        step = (n - _SAMPLE_BYTES) // (_SAMPLES - 1)
        windows = [(start + k * step, _SAMPLE_BYTES) for k in range(_SAMPLES)]
    resident = total = 0
    try:
        for offset, length in windows:
            r = _svmbatch.page_cache_residency(fd, offset, length)
            resident += r.resident_pages
            total += r.total_pages
    except _svmbatch_error:
        return False
    return resident * 2 < total


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


_ALLOCATE = ("block", "tensor")


def _check_allocate(allocate):
    if allocate not in _ALLOCATE:
        raise ValueError(f"allocate={allocate!r}: one of "
                         f"{', '.join(repr(m) for m in _ALLOCATE)}")


def _round_bytes(round_bytes, staging_bytes):
    if round_bytes < 0:
        raise ValueError(f"round_bytes={round_bytes}: 0 (the default) or more")
    return round_bytes or max(256 << 20, 4 * staging_bytes)


def iter_safetensors(path: _Path, device: _typing.Union[_torch.device, str, int] = "cpu",
                     dtype: _typing.Optional[_torch.dtype] = None, *, names: _Names = None,
                     threads: int = 0, context: _typing.Optional[_svmbatch.Context] = None,
                     staging_bytes: int = 64 << 20, chunk_bytes: int = 4 << 20,
                     io: str = "auto", allocate: str = "block",
                     round_bytes: int = 0) -> _typing.Iterator[tuple[str, _torch.Tensor]]:
    """(name, tensor) of a safetensors checkpoint in file order, for a
    serving engine's load_weights(): what load_safetensors returns,
    without holding the model.  path is what load_safetensors takes.  The
    tensors are read a round at a time (round_bytes of them, 0: the larger
    of 256 MiB and four times staging_bytes; a larger tensor is a round of
    its own) in one call of the reader through its staging ring
    (staging_bytes, also for the CPU), and handed out once the round's
    copies ended (on the device's current stream).  allocate="block"
    makes each round's tensors views of one block of the round's size,
    freed once the caller dropped every tensor of the round;
    allocate="tensor" makes each tensor on its own.  Memory holds the
    ring, the round being read and what the caller keeps.  names selects
    the tensors: a collection of names (each must exist, else KeyError) or
    a predicate; the others' bytes are not read.  dtype converts the
    floating-point tensors, on the device, as each is handed out.  io is
    how the files are read, as for load_safetensors."""
    _check_allocate(allocate)
    round_bytes = _round_bytes(round_bytes, staging_bytes)
    with _opened(path, device, names, io) as (shards, wanted, make, device, direct):
        yield from _read_rounds(shards, wanted, make if allocate == "tensor" else None, device,
                                dtype, threads, context, staging_bytes, chunk_bytes, direct,
                                round_bytes, make.specs)


def load_safetensors(path: _Path, device: _typing.Union[_torch.device, str, int] = "cpu",
                     dtype: _typing.Optional[_torch.dtype] = None, *, names: _Names = None,
                     threads: int = 0, context: _typing.Optional[_svmbatch.Context] = None,
                     staging_bytes: int = 64 << 20, chunk_bytes: int = 4 << 20,
                     staged: _typing.Optional[bool] = None,
                     io: str = "auto", allocate: str = "block") -> dict[str, _torch.Tensor]:
    """Load a safetensors checkpoint: a dict name -> tensor on device (the
    CPU unless told, as safetensors), equal to
    safetensors.torch.load_file(path, device) for one file and to the union
    of its shards for a sharded one.  path is a .safetensors file, a list
    of them, a Hugging Face index (model.safetensors.index.json, checked
    against the shards' headers) or a directory holding an index or shards.
    The files are parsed here (hostile files and indexes raise
    ValueError), read with READ_FIXED on several cores (threads: 0 = the
    CPUs, at most 16); for CUDA every shard in one call of the reader
    (svmbatch.ExtentReader) through its ring of staging_bytes of
    registered, CUDA-mapped staging chunks, whose copies to the device (on
    its current stream, ended on return) overlap the reads; for the CPU
    straight into the tensors.  allocate="block" (the default) makes the
    tensors of each shard views of one block of the shard's size: no
    per-tensor allocation or copy, and a block is freed once every tensor
    of it is dropped; allocate="tensor" makes each tensor on its own, for
    a caller that frees some of them (load_state_dict(assign=True) of a
    model that later drops tensors).  names loads only some tensors (as
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
    _check_allocate(allocate)
    if staged is False and io == "direct":
        raise ValueError("io='direct' reads through the staging ring: not with staged=False")
    if staged is False and io == "auto":
        io = "buffered"
    timer = _staging.Timer()
    # The reader is made (or the kept one taken) while the files are
    # opened and planned; an invalid device is left to _opened to say.
    try:
        early = _device_of(device, "")
    except Exception:
        early = None
    pending = None
    if early is not None and (early.type == "cuda" or staged):
        pending = _staging.prepare(early, context, threads, staging_bytes, chunk_bytes)
    try:
        with _staging.no_gc():
            with _opened(path, device, names, io) as (shards, wanted, make, device, direct):
                timer.step("open")
                if device.type == "cuda" or staged or any(fd is not None for fd in direct):
                    if allocate == "block":
                        if pending is None:
                            pending = _staging.prepare(device, context, threads, staging_bytes,
                                                       chunk_bytes)
                        reader, pending = pending, None
                        out = _load_blocks(shards, wanted, make.specs, device, reader, direct,
                                           timer)
                        return {k: _converted(v, dtype) for k, v in out.items()}
                    return dict(_read_rounds(shards, wanted, make, device, dtype, threads, context,
                                             staging_bytes, chunk_bytes, direct, 1 << 62))
                outputs = {e.name: make(e) for entries in wanted for e in entries}
                for (fd, header, f), entries in zip(shards, wanted):
                    _load_cpu(fd, entries, header, outputs, f, threads, context)
            return {k: _converted(v, dtype) for k, v in outputs.items()}
    finally:
        if pending is not None:
            pending.give_back()
