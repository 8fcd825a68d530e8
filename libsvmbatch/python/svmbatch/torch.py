# SPDX-License-Identifier: MIT
"""svmbatch for PyTorch: pin tensors in one call, a pinned Arena, and a
safetensors loader that reads with the parallel Reader and copies to the
GPU while it reads.

    import svmbatch.torch as sbt
    with sbt.pin(tensors) as pinned:          # one registration, one CUDA mapping
        gpu = [t.to("cuda", non_blocking=True) for t in tensors]
    arena = sbt.Arena(1 << 30)                # exact size, prefaulted, pinned once
    x = arena.empty((1024, 1024), torch.float16)
    state = sbt.load_safetensors("model.safetensors", device="cuda")

Works with any torch that speaks DLPack (1.13 and later).  Without CUDA
(Debian's CPU-only torch) pin() and Arena still register the memory (for
io_uring) and say why CUDA is absent (``cuda_reason``).
"""

import os
import threading
from collections import deque

import torch as _torch
from torch.utils.dlpack import from_dlpack as _from_dlpack

from . import _svmbatch
from ._errors import Error, error_class
from .safetensors_format import ITEM_BYTES, encode_header, read_header

__all__ = ["Arena", "Pinned", "cuda_backend", "load_safetensors", "pin", "release_staging",
           "save_safetensors"]

_context = None
_backends = {}


def default_context():
    """The Context pin(), Arena and the loaders use unless given one."""
    global _context
    if _context is None:
        _context = _svmbatch.Context()
    return _context


def cuda_backend(device=None):
    """(CudaBackend, None) for torch's CUDA device, or (None, why not)."""
    if not _torch.cuda.is_available():
        why = "torch has no CUDA" if _torch.version.cuda is None else "no CUDA device"
        return None, f"CUDA is absent: {why} (torch {_torch.__version__})"
    if getattr(_svmbatch, "CudaBackend", None) is None:
        return None, "CUDA is absent: this svmbatch was built without its CUDA backend"
    index = _torch.device("cuda", _torch.cuda.current_device()).index if device is None \
        else _torch.device(device).index or 0
    if index not in _backends:
        try:
            _backends[index] = _svmbatch.CudaBackend(index)
        except Error as e:
            return None, f"CUDA is absent: {e}"
    return _backends[index], None


def _resolve_cuda(cuda):
    if cuda is False:
        return None, "CUDA not asked for (cuda=False)"
    backend, reason = cuda_backend()
    if backend is None and cuda:
        raise error_class(19)(19, reason, "gpu-open", None, 0)  # ENODEV
    return backend, reason


def _storage_span(t):
    """(address, bytes) of the whole storage under tensor t."""
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr(), s.nbytes()


def _renamed(e, index, what):
    """e (an svmbatch.Error about buffer k) as an error about item index."""
    return error_class(e.errno)(e.errno, f"{what} {index}: {e.strerror}", e.step, index,
                                e.driver_status)


class Pinned:
    """Tensors whose storages are registered (and CUDA-mapped) as one set.

    The tensors are kept alive while pinned.  close() (or leaving the
    ``with`` block) unmaps and unregisters; the tensors stay valid, no
    longer pinned."""

    def __init__(self, tensors, registration, mapping, cuda_reason):
        self.tensors = tensors
        self.registration = registration
        self.mapping = mapping
        self.cuda_reason = cuda_reason

    @property
    def cuda(self):
        """Mapped for CUDA (t.is_pinned() is True, copies are asynchronous)."""
        return self.mapping is not None and not self.mapping.closed

    @property
    def ranges(self):
        """How many page ranges the storages merged into."""
        return len(self.registration.ranges)

    def close(self):
        if self.mapping is not None:
            self.mapping.close()
        self.registration.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _register_tensors(tensors, context, read_only=False):
    """One registration of the tensors' storages (each storage once).
    Returns (registration, storage index per tensor or None, storage spans)."""
    storages = []
    for i, t in enumerate(tensors):
        if not isinstance(t, _torch.Tensor):
            raise TypeError(f"tensor {i}: a {type(t).__name__}, not a torch.Tensor")
        if t.device.type != "cpu" or t.layout != _torch.strided:
            raise ValueError(f"tensor {i}: {t.device.type} {t.layout}: only strided CPU "
                             "tensors can be pinned")
        storages.append(_storage_span(t))
    # Each storage once (the library's walk, as <svmbatch/torch.hpp>'s).
    spans, owner, which = _svmbatch.storage_buffers(storages, read_only)
    try:
        registration = (context or default_context()).register(spans)
    except Error as e:
        if e.buffer_index is None:
            raise
        raise _renamed(e, owner[e.buffer_index], "tensor") from e
    return registration, which, spans, owner


def pin(tensors, *, context=None, cuda=None):
    """Pin the storages of tensors (CPU tensors) in one registration,
    mapped for CUDA in one call where CUDA is present (cuda=None: if
    present; True: required; False: not).  All or nothing: an error names
    the tensor (its buffer_index)."""
    tensors = tuple(tensors.values() if isinstance(tensors, dict) else tensors)
    backend, reason = _resolve_cuda(cuda)
    registration, _, _, owner = _register_tensors(tensors, context)
    mapping = None
    if backend is not None:
        try:
            mapping = _svmbatch.map(registration, backend)
        except Error as e:
            registration.close()
            if e.buffer_index is None:
                raise
            raise _renamed(e, owner[e.buffer_index], "tensor") from e
        reason = None
    return Pinned(tensors, registration, mapping, reason)


# torch dtype -> DLPack (type code, bits); others are carved as bytes and viewed.
_DLPACK = {
    _torch.float16: (2, 16), _torch.float32: (2, 32), _torch.float64: (2, 64),
    _torch.bfloat16: (4, 16), _torch.uint8: (1, 8), _torch.int8: (0, 8),
    _torch.int16: (0, 16), _torch.int32: (0, 32), _torch.int64: (0, 64),
}


def _shape(shape):
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(d) for d in shape)


class Arena:
    """Exact-size pinned memory from which tensors are carved with no
    driver call: one mapping (huge_pages: True/"thp", "hugetlb" or False),
    bound to numa_node if given, prefaulted by several threads, registered
    once and CUDA-mapped once (cuda as for pin()).  A tensor's block returns
    to the arena when the tensor dies; the arena's memory lives until the
    arena is closed and its last tensor is gone.  A request that does not
    fit raises svmbatch.ArenaFullError (a MemoryError) saying whether the
    arena is full or fragmented."""

    def __init__(self, nbytes, huge_pages=True, numa_node=None, *, context=None, cuda=None,
                 alignment=256, threads=0):
        backend, self.cuda_reason = _resolve_cuda(cuda)
        if backend is not None:
            self.cuda_reason = None
        self._arena = _svmbatch.Arena(int(nbytes), huge_pages, numa_node, context, backend,
                                      alignment, threads)

    def empty(self, shape, dtype=None):
        """An uninitialised CPU tensor of shape and dtype in the arena."""
        shape = _shape(shape)
        dtype = dtype or _torch.get_default_dtype()
        code = _DLPACK.get(dtype)
        if code is not None:
            return _from_dlpack(self._arena.carve(shape, *code))
        # bool, complex, float8...: bytes viewed as dtype.
        numel = 1
        for d in shape:
            numel *= d
        item = _torch.empty((), dtype=dtype).element_size()
        raw = _from_dlpack(self._arena.carve((numel * item,), 1, 8))
        return raw.view(dtype).view(shape)

    def empty_like(self, t):
        """empty(t.shape, t.dtype)."""
        return self.empty(t.shape, t.dtype)

    @property
    def cuda(self):
        return self._arena.gpu_mapped

    def __getattr__(self, name):
        # capacity, used, free, largest_free, live_blocks, huge_pages,
        # numa_node, base_address, mapped_bytes, registration, rounded
        return getattr(self._arena, name)

    def close(self):
        self._arena.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# safetensors dtype -> torch dtype (None where this torch lacks it)
_ST_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32",
    "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
    "F64": "float64", "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
_TORCH_TO_ST = {}
for _st, _name in _ST_DTYPES.items():
    if hasattr(_torch, _name):
        _TORCH_TO_ST[getattr(_torch, _name)] = _st


def _torch_dtype(entry, path):
    dtype = getattr(_torch, _ST_DTYPES[entry.dtype], None)
    if dtype is None:
        raise ValueError(f"{path}: tensor {entry.name!r}: dtype {entry.dtype} is not "
                         f"supported by torch {_torch.__version__}")
    return dtype


def _bytes_of(t):
    """t (contiguous) as a flat uint8 tensor over the same memory."""
    return t.reshape(-1).view(_torch.uint8) if t.numel() else t.reshape(0).view(_torch.uint8)


def _check_read(results, names, path):
    for r, name in zip(results, names):
        if r.err:
            raise error_class(r.err)(r.err, f"{path}: reading tensor {name!r}: {os.strerror(r.err)}"
                                     f" after {r.bytes} bytes", "io", None, 0)


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
        self.arena = Arena(nbytes, context=context, cuda=cuda)
        self.tensor = self.arena.empty((nbytes,), _torch.uint8)
        self.offset = self.tensor.data_ptr() - self.arena.base_address
        self.reader = _svmbatch.Reader(self.arena.registration, threads=threads)

    def close(self):
        self.reader.close()
        self.arena.close()
        self.tensor = None


_staging = None
_staging_lock = threading.Lock()


def release_staging():
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


def _load_staged(fd, header, outputs, path, threads, context, staging_bytes, chunk_bytes, cuda):
    """Read into a ring of registered (and CUDA-mapped) staging slots on
    several cores; copy each slot to the tensors it covers (on the CUDA
    stream) as soon as its read completes, and read into it again once its
    copies are done.  groups batches are in flight at once.  cuda=False
    copies to CPU tensors the same way (the tests of the ring's logic)."""
    chunk_bytes = max(1 << 20, chunk_bytes // 4096 * 4096)
    slots = max(2, staging_bytes // chunk_bytes)
    groups = 4 if slots >= 8 else 2
    per_group = slots // groups
    slots = per_group * groups
    if cuda:
        backend, reason = cuda_backend()
        if backend is None:
            raise RuntimeError(f"{path}: device cuda: {reason}")
    stream = _torch.cuda.current_stream() if cuda else None
    flat = {e.name: _bytes_of(outputs[e.name]) for e in header.entries if e.nbytes}
    order = [e for e in header.entries if e.nbytes]
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
    pending = deque()
    try:
        # The data section in chunks: (file offset, length).
        chunks = [(off, min(chunk_bytes, header.data_bytes - off))
                  for off in range(0, header.data_bytes, chunk_bytes)]
        events = [None] * groups
        t_index = 0  # first tensor that may overlap the next chunk

        def copy_out(group, first, batch):
            nonlocal t_index
            results = batch.wait()
            for j, r in enumerate(results):
                if r.err:
                    raise error_class(r.err)(
                        r.err, f"{path}: reading data bytes at {chunks[first + j][0]}: "
                        f"{os.strerror(r.err)}", "io", None, 0)
            for j in range(len(results)):
                c_off, c_len = chunks[first + j]
                slot = staging[(group * per_group + j) * chunk_bytes:][:c_len]
                while t_index < len(order) and order[t_index].end <= c_off:
                    t_index += 1
                k = t_index
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
            requests = [(fd, header.data_start + chunks[first + j][0],
                         chunks[first + j][1], 0,
                         base + (group * per_group + j) * chunk_bytes)
                        for j in range(min(per_group, len(chunks) - first))]
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


def load_safetensors(path, device="cuda", dtype=None, *, threads=0, context=None,
                     staging_bytes=256 << 20, chunk_bytes=8 << 20, staged=None):
    """Load a safetensors file: a dict name -> tensor on device, equal to
    safetensors.torch.load_file(path, device).  The file is parsed here
    (hostile files raise ValueError), read with READ_FIXED on several
    cores (threads: 0 = the CPUs, at most 16); for CUDA through a ring of
    staging_bytes of registered, CUDA-mapped staging buffers whose H2D
    copies overlap the reads; for the CPU straight into the tensors.
    dtype converts the floating-point tensors after loading.  staged=True
    loads CPU tensors through the staging ring too (staged=None: for CUDA
    only)."""
    device = _torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = _torch.device("cuda", _torch.cuda.current_device())
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device}: cpu or cuda")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        header = read_header(fd, path)
        outputs = {e.name: _torch.empty(e.shape, dtype=_torch_dtype(e, path), device=device)
                   for e in header.entries}
        if device.type == "cuda":
            with _torch.cuda.device(device):
                _load_staged(fd, header, outputs, path, threads, context, staging_bytes,
                             chunk_bytes, cuda=True)
        elif staged:
            _load_staged(fd, header, outputs, path, threads, context, staging_bytes,
                         chunk_bytes, cuda=False)
        else:
            _load_cpu(fd, header, outputs, path, threads, context)
    finally:
        os.close(fd)
    if dtype is not None:
        outputs = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in outputs.items()}
    return outputs


def save_safetensors(tensors, path, metadata=None, *, fsync=False, threads=0, context=None):
    """Write tensors (a dict name -> tensor) as a safetensors file that the
    safetensors package reads, with WRITE_FIXED from the registered tensors
    on several cores.  The file appears at path complete (written to a
    temporary name, then renamed); fsync makes it durable first."""
    if not isinstance(tensors, dict):
        raise TypeError("tensors must be a dict of name -> tensor")
    cpu = {}
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(name, str) or not isinstance(t, _torch.Tensor):
            raise TypeError(f"{name!r}: expected str -> torch.Tensor")
        if t.dtype not in _TORCH_TO_ST:
            raise ValueError(f"{name!r}: dtype {t.dtype} has no safetensors name")
        cpu[name] = t.detach().to("cpu").contiguous()
    names = list(cpu)
    head, spans = encode_header([(n, _TORCH_TO_ST[cpu[n].dtype], tuple(cpu[n].shape),
                                  cpu[n].numel() * cpu[n].element_size()) for n in names],
                                metadata)
    head = bytearray(head)
    data = [(n, begin, end) for n, begin, end in spans if end > begin]
    buffers = [head] + [(cpu[n].data_ptr(), end - begin, True) for n, begin, end in data]
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        with (context or default_context()).register(buffers) as registration, \
                _svmbatch.Writer(registration, threads=threads,
                                 sync=_svmbatch.SyncMode.Fsync if fsync
                                 else _svmbatch.SyncMode.None_) as writer:
            requests = [(fd, 0, len(head), 0)]
            requests += [(fd, len(head) + begin, end - begin, i + 1)
                         for i, (_, begin, end) in enumerate(data)]
            for i, r in enumerate(writer.write(requests)):
                if r.err:
                    what = "the header" if i == 0 else f"tensor {data[i - 1][0]!r}"
                    raise error_class(r.err)(r.err, f"{tmp}: writing {what}: "
                                             f"{os.strerror(r.err)}", "io", None, 0)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        os.unlink(tmp)
        raise
