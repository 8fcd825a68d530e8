# SPDX-License-Identifier: MIT
"""What the loaders share: the ExtentReader kept between loads (its
staging ring registered and mapped once), the plan of a load (the wanted
tensors of each shard as extents, laid out in device blocks or one tensor
each) and the one call that reads it.  Private: loading and distributed
use it."""

import threading as _threading
import time as _time
import typing as _typing

import torch as _torch

from . import _svmbatch
from . import _torch_common as _common
from ._errors import io_error as _io_error

# The reader kept between loads (a sharded checkpoint, the next model): a
# load takes it out of here and puts it back when done, so that no lock is
# held while an iterator waits for its caller; a second load at the same
# time makes a reader of its own, freed when it is done.
_kept = None
_kept_lock = _threading.Lock()

# A tensor's offset in a device block keeps its offset in the file modulo
# this: the alignment safetensors gives, and every dtype's.
_BLOCK_ALIGN = 256


# What the last load in this process spent, step by step (seconds; the
# reader's own set-up steps and counters where it made or used one): for
# the benchmarks' first-load breakdown.
last_profile: dict = {}


class Timer:
    """Steps of one load, timed one after the other into a profile."""

    def __init__(self):
        self.profile = {}
        self.t = _time.perf_counter()

    def step(self, name):
        now = _time.perf_counter()
        self.profile[name] = self.profile.get(name, 0.0) + now - self.t
        self.t = now

    def done(self, reader):
        """The profile is the process's last from now on (later steps
        still go into it)."""
        global last_profile
        if reader.fresh:
            self.profile["reader_setup"] = {n: ns / 1e9 for n, ns in reader.reader.setup}
        self.profile["last_read"] = reader.reader.last_read
        last_profile = self.profile


class Reader:
    """An ExtentReader for one device, with the key it was made for."""

    def __init__(self, key, device, context, threads, staging_bytes, chunk_bytes):
        self.key = key
        self.device = device
        self.fresh = True  # made by this load
        backend = None
        if device.type == "cuda":
            backend, reason = _common.cuda_backend(device)
            if backend is None:
                raise _common.no_cuda(f"device {device}: {reason}")
        self.reader = _svmbatch.ExtentReader(context or _common.default_context(), backend,
                                             staging_bytes=staging_bytes,
                                             chunk_bytes=chunk_bytes, threads=threads)

    def read(self, extents):
        """Read (fd, file_offset, length, dst) extents; for CUDA on the
        device's current stream, every copy ended on return."""
        if self.device.type == "cuda":
            stream = _torch.cuda.current_stream(self.device).cuda_stream
            return self.reader.read(extents, stream)
        return self.reader.read(extents)

    def close(self):
        self.reader.close()


def release() -> None:
    """Free the reader (and its staging ring) kept between loads."""
    global _kept
    with _kept_lock:
        r, _kept = _kept, None
    if r is not None:
        r.close()


def take(device, context, threads, staging_bytes, chunk_bytes):
    """The kept reader if it was made for the same device and options,
    else a new one (the kept one freed)."""
    global _kept
    chunk_bytes = max(4096, chunk_bytes // 4096 * 4096)
    staging_bytes = max(staging_bytes, 2 * chunk_bytes)
    key = (device, threads, staging_bytes, chunk_bytes, id(context))
    with _kept_lock:
        r, _kept = _kept, None
    if r is not None and r.key != key:
        r.close()
        r = None
    if r is not None:
        r.fresh = False
        return r
    return Reader(key, device, context, threads, staging_bytes, chunk_bytes)


def give_back(r):
    global _kept
    with _kept_lock:
        if _kept is None:
            _kept, r = r, None
    if r is not None:
        r.close()


class Item:
    """One wanted tensor: its shard, entry, and where it goes."""
    __slots__ = ("s", "entry", "offset")

    def __init__(self, s, entry):
        self.s = s
        self.entry = entry
        self.offset = 0  # in its block


def layout(items):
    """Place items (in file order per shard) in one block: each run of
    tensors adjacent in a file stays adjacent (one extent), its offset in
    the block the file offset's modulo _BLOCK_ALIGN.  Returns the block's
    size."""
    size = 0
    prev = None
    for it in items:
        e = it.entry
        if prev is not None and prev.s == it.s and prev.entry.end == e.begin:
            it.offset = prev.offset + prev.entry.nbytes
        else:
            base = -(-size // _BLOCK_ALIGN) * _BLOCK_ALIGN
            it.offset = base + e.begin % _BLOCK_ALIGN
        size = max(size, it.offset + e.nbytes)
        prev = it
    return size


def extents_of(items, starts, fds, address):
    """The extents of items placed at address + offset, runs merged, and
    per extent its items."""
    extents = []
    owners = []
    for it in items:
        e = it.entry
        n = e.nbytes
        if not n:
            continue
        if owners and owners[-1][-1].s == it.s and owners[-1][-1].entry.end == e.begin and \
                owners[-1][-1].offset + owners[-1][-1].entry.nbytes == it.offset:
            fd, off, length, dst = extents[-1]
            extents[-1] = (fd, off, length + n, dst)
            owners[-1].append(it)
            continue
        extents.append((fds[it.s], starts[it.s] + e.begin, n, address + it.offset))
        owners.append([it])
    return extents, owners


def check(results, extents, owners, paths):
    """Raise the first failure, naming the tensor whose bytes are missing."""
    for r, x, its in zip(results, extents, owners):
        err, got, copy = r
        if not err:
            continue
        done = 0
        name = its[-1].entry.name
        for it in its:
            done += it.entry.nbytes
            if done > got:
                name = it.entry.name
                break
        path = paths[its[0].s]
        what = "copying to the device" if copy else "reading"
        raise _io_error(err, f"{path}: {what} tensor {name!r} after {got} bytes of the "
                             f"{x[2]} read with it")


def contiguous_strides(shape):
    strides = []
    s = 1
    for d in reversed(shape):
        strides.append(s)
        s *= d
    return tuple(reversed(strides))


def views(block, items, specs):
    """(name, tensor) of items, views of block (uint8) at their offsets."""
    typed = {}
    out = []
    for it in items:
        dtype, shape, strides, size = specs[it.entry.name]
        if it.offset % size:
            # A tensor the file does not align: a copy of its own.
            t = block[it.offset:it.offset + it.entry.nbytes].clone().view(dtype).view(shape)
        else:
            base = typed.get(dtype)
            if base is None:
                base = typed[dtype] = block[:block.numel() // size * size].view(dtype)
            t = base.as_strided(shape, strides, it.offset // size)
        out.append((it.entry.name, t))
    return out


def specs_of(shards, wanted):
    """name -> (torch dtype, shape, strides, item size), checked before
    anything is read."""
    specs = {}
    sizes = {}
    for (_, _, f), entries in zip(shards, wanted):
        for e in entries:
            dtype, shape = _common.torch_dtype(e, f)
            size = sizes.get(dtype)
            if size is None:  # torch 1.13's dtypes have no itemsize
                size = sizes[dtype] = _torch.empty((), dtype=dtype).element_size()
            specs[e.name] = (dtype, shape, contiguous_strides(shape), size)
    return specs


def rounds(items, round_bytes):
    """items cut in consecutive rounds of at most round_bytes (a larger
    tensor is a round of its own)."""
    out = []
    cur = []
    size = 0
    for it in items:
        n = it.entry.nbytes
        if cur and size + n > round_bytes:
            out.append(cur)
            cur = []
            size = 0
        cur.append(it)
        size += n
    if cur:
        out.append(cur)
    return out


Stream = _typing.Iterator[tuple[str, _torch.Tensor]]
