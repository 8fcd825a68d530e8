# SPDX-License-Identifier: MIT
"""What the loaders share: the ExtentReader kept between loads (its
staging ring registered and mapped once), the plan of a load (the wanted
tensors of each shard as extents, laid out in device blocks or one tensor
each) and the one call that reads it.  Private: loading and distributed
use it."""

import contextlib as _contextlib
import gc as _gc
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


@_contextlib.contextmanager
def no_gc():
    """The cyclic garbage collector held off while a load makes its tens
    of thousands of entries, items and views (none of them in a cycle):
    its passes over them cost more than making them."""
    was = _gc.isenabled()
    _gc.disable()
    try:
        yield
    finally:
        if was:
            _gc.enable()


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
    return prepare(device, context, threads, staging_bytes, chunk_bytes).get()


class Pending:
    """A reader being made on a thread of its own (its set-up releases
    the GIL), while the load parses and plans."""

    def __init__(self, ready=None, make=None):
        self.result = ready
        self.error = None
        self.thread = None
        if make is not None:
            def run():
                try:
                    self.result = make()
                except BaseException as e:  # raised by get()
                    self.error = e
            self.thread = _threading.Thread(target=run, name="svmbatch-setup", daemon=True)
            self.thread.start()

    def get(self):
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            raise self.error
        return self.result

    def give_back(self):
        """For a load that ends without using it: kept for the next."""
        try:
            r = self.get()
        except Exception:  # the load's own error says what went wrong
            return
        give_back(r)


def prepare(device, context, threads, staging_bytes, chunk_bytes):
    """take(), the making of a new reader started on a thread."""
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
        return Pending(ready=r)
    if device.type == "cuda":
        # The backend (and CUDA's context) first, on this thread.
        backend, reason = _common.cuda_backend(device)
        if backend is None:
            raise _common.no_cuda(f"device {device}: {reason}")
    return Pending(make=lambda: Reader(key, device, context, threads, staging_bytes,
                                       chunk_bytes))


def give_back(r):
    global _kept
    with _kept_lock:
        if _kept is None:
            _kept, r = r, None
    if r is not None:
        r.close()


class Item:
    """One wanted tensor: its shard, entry, its bytes in the file's data
    section, and where it goes in its block."""
    __slots__ = ("s", "entry", "begin", "end", "offset")

    def __init__(self, s, entry):
        self.s = s
        self.entry = entry
        self.begin = entry.begin
        self.end = entry.end
        self.offset = 0


def layout(items):
    """Place items (in file order per shard) in one block: each run of
    tensors adjacent in a file stays adjacent (one extent), its offset in
    the block the file offset's modulo _BLOCK_ALIGN.  Returns the block's
    size."""
    size = 0
    prev_s = prev_end = None
    at = 0
    for it in items:
        if it.s == prev_s and it.begin == prev_end:
            it.offset = at
        else:
            it.offset = at = -(-size // _BLOCK_ALIGN) * _BLOCK_ALIGN + it.begin % _BLOCK_ALIGN
        at += it.end - it.begin
        size = max(size, at)
        prev_s, prev_end = it.s, it.end
    return size


def extents_of(items, starts, fds, address):
    """The extents of items placed at address + offset (runs of items
    adjacent in the file and the block merged), and per extent its items."""
    extents = []
    owners = []
    prev = None
    for it in items:
        n = it.end - it.begin
        if not n:
            continue
        if prev is not None and prev.s == it.s and prev.end == it.begin and \
                prev.offset + (prev.end - prev.begin) == it.offset:
            owners[-1].append(it)
        else:
            extents.append([fds[it.s], starts[it.s] + it.begin, 0, address + it.offset])
            owners.append([it])
        extents[-1][2] += n
        prev = it
    return [tuple(x) for x in extents], owners


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


# The longest repeating unit views() looks for: the tensors of an MoE
# expert, a transformer layer.
_MAX_PERIOD = 32


def views(block, items, specs):
    """(name, tensor) of items (in block order), views of block (uint8)
    at their offsets.  Where a unit of tensors repeats at an even spacing
    (an MoE layer's experts, a model's layers: the same dtypes and
    shapes, in the same order) each tensor of the unit is cut for every
    repetition by one as_strided and unbind, so a tensor costs no Python
    call of its own."""
    n = len(items)
    spec = [specs[it.entry.name] for it in items]
    offset = [it.offset for it in items]
    out = [None] * n
    typed = {}

    def base_of(dtype, size):
        t = typed.get(dtype)
        if t is None:
            t = typed[dtype] = block[:block.numel() // size * size].view(dtype)
        return t

    i = 0
    while i < n:
        period = reps = 0
        for p in range(1, min(_MAX_PERIOD, (n - i) // 2) + 1):
            step = offset[i + p] - offset[i]
            if spec[i + p] is not spec[i] or step <= 0:
                continue
            if all(spec[i + p + q] is spec[i + q] and offset[i + p + q] - offset[i + q] == step
                   and offset[i + q] % spec[i + q][3] == 0 and step % spec[i + q][3] == 0
                   for q in range(p)):
                period, reps = p, 2
                end = i + 3 * p
                while end <= n and all(spec[end - p + q] is spec[i + q] and
                                       offset[end - p + q] - offset[end - 2 * p + q] == step
                                       for q in range(p)):
                    reps += 1
                    end += p
                break
        if period:
            for q in range(period):
                dtype, shape, strides, size = spec[i + q]
                run = base_of(dtype, size).as_strided(
                    (reps,) + shape, (step // size,) + strides, offset[i + q] // size)
                out[i + q:i + period * reps:period] = run.unbind(0)
            i += period * reps
            continue
        dtype, shape, strides, size = spec[i]
        if offset[i] % size:
            # A tensor the file does not align: a copy of its own.
            out[i] = block[offset[i]:offset[i] + items[i].entry.nbytes].clone().view(
                dtype).view(shape)
        else:
            out[i] = base_of(dtype, size).as_strided(shape, strides, offset[i] // size)
        i += 1
    return [(it.entry.name, t) for it, t in zip(items, out)]


def specs_of(shards, wanted):
    """name -> (torch dtype, shape, strides, item size), checked before
    anything is read; one tuple per distinct dtype and shape."""
    specs = {}
    known = {}
    sizes = {}
    for (_, _, f), entries in zip(shards, wanted):
        for e in entries:
            key = (e.dtype, e.shape)
            spec = known.get(key)
            if spec is None:
                dtype, shape = _common.torch_dtype(e, f)
                size = sizes.get(dtype)
                if size is None:  # torch 1.13's dtypes have no itemsize
                    size = sizes[dtype] = _torch.empty((), dtype=dtype).element_size()
                spec = known[key] = (dtype, shape, contiguous_strides(shape), size)
            specs[e.name] = spec
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
