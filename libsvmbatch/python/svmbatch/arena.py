# SPDX-License-Identifier: MIT
"""An Arena for torch: tensors carved from exact-size pinned memory (the
library's svmbatch::Arena) with no driver call, handed over by DLPack."""

import torch as _torch
from torch.utils.dlpack import from_dlpack as _from_dlpack

from . import _svmbatch
from ._torch_common import resolve_cuda

__all__ = ["Arena"]

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
        backend, self.cuda_reason = resolve_cuda(cuda)
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
