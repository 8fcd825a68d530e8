# SPDX-License-Identifier: MIT
"""svmbatch: register scattered buffers for GPUs and io_uring in one step.

    import svmbatch
    ctx = svmbatch.Context()                      # kernel mode if /dev/svmbatch opens
    with ctx.register([buf_a, buf_b, (addr, n)]) as reg:
        with svmbatch.Reader(reg) as reader:
            reader.read([(fd, 0, n, 0)])          # READ_FIXED into buffer 0

Buffers are (address, length[, read_only]) tuples, buffer-protocol objects
(bytearray, mmap, numpy arrays) or DLPack producers of host memory (torch
CPU tensors); the registration keeps them alive.  reg.buffer(i) hands a
buffer back to any framework through DLPack (torch.from_dlpack,
numpy.from_dlpack) or the buffer protocol.  svmbatch.torch has the PyTorch
entry points: pin(), Arena and load_safetensors().
"""

__version__ = "1.1.0"  # libsvmbatch's project(VERSION); tools/check-install.sh

import typing as _typing

from ._errors import ArenaFullError, Error, error_class
from ._errors import io_error as _io_error
from ._svmbatch import (
    Arena,
    BufferSharing,
    Context,
    DmaBuf,
    ExtentReader,
    GpuAddressKind,
    GpuBackend,
    GpuMapping,
    Info,
    IoBatch,
    IoRequest,
    IoResult,
    Mode,
    PageCacheResidency,
    Parallelism,
    Reader,
    RegisteredBuffer,
    Registration,
    SyncMode,
    Writer,
    built_backends,
    map,  # noqa: A004 - the library's name for it
    mode_name,
    page_cache_residency,
    process_pinned_bytes,
    read_module_stats,
)

try:
    from ._svmbatch import CudaBackend, CudaMemory
except ImportError:  # a build without the CUDA backend
    CudaBackend = None
    CudaMemory = None

try:
    from ._svmbatch import ZeBackend, ZeMemory
except ImportError:  # a build without the Level Zero backend
    ZeBackend = None
    ZeMemory = None


def check(results: _typing.Sequence[IoResult],
          what: str = "I/O") -> _typing.Sequence[IoResult]:
    """Raise svmbatch.Error for the first failed IoResult of results."""
    for i, r in enumerate(results):
        if r.err:
            raise _io_error(r.err, f"{what}: request {i}: only {r.bytes} bytes", i)
    return results


__all__ = [
    "Arena", "ArenaFullError", "BufferSharing", "Context", "CudaBackend", "CudaMemory",
    "DmaBuf", "Error", "ExtentReader", "GpuAddressKind", "GpuBackend", "GpuMapping", "Info", "IoBatch",
    "IoRequest", "IoResult", "Mode", "PageCacheResidency", "Parallelism", "Reader",
    "RegisteredBuffer", "Registration", "SyncMode", "Writer", "ZeBackend", "ZeMemory",
    "built_backends", "check",
    "error_class", "map", "mode_name", "page_cache_residency", "process_pinned_bytes",
    "read_module_stats",
]
