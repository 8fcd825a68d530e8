# SPDX-License-Identifier: MIT
"""An Arena for torch: tensors carved from exact-size pinned memory (the
library's svmbatch::Arena) with no driver call, handed over by DLPack."""

import errno as _errno
import operator as _operator
import typing as _typing
from collections.abc import Sequence as _Sequence

import torch as _torch
from torch.utils.dlpack import from_dlpack as _from_dlpack

from . import _svmbatch
from . import _torch_common as _common
from ._errors import error_class as _error_class

__all__ = ["Arena"]

# torch dtype -> DLPack (type code, bits); others are carved as bytes and viewed.
_DLPACK = {
    _torch.float16: (2, 16), _torch.float32: (2, 32), _torch.float64: (2, 64),
    _torch.bfloat16: (4, 16), _torch.uint8: (1, 8), _torch.int8: (0, 8),
    _torch.int16: (0, 16), _torch.int32: (0, 32), _torch.int64: (0, 64),
}

# memory_format -> the permutation that turns the carved (channels-last
# ordered) shape back into the logical one.
_CHANNELS_LAST = {
    _torch.channels_last: (4, (0, 3, 1, 2)),
    _torch.channels_last_3d: (5, (0, 4, 1, 2, 3)),
}

_DeviceLike = _typing.Union[_torch.device, str, int, None]


def _error(err, step, message):
    return _error_class(err)(err, message, step, None, 0)


def _size(size):
    """torch.empty's size: ints, or one sequence of ints (a torch.Size)."""
    if len(size) == 1 and isinstance(size[0], _Sequence) and not isinstance(size[0], str):
        size = tuple(size[0])
    try:
        return tuple(_operator.index(d) for d in size)
    except TypeError:
        raise TypeError(f"size must be ints or one sequence of ints, not {size!r}") from None


class _CudaView:
    """A block seen from the GPU the arena is mapped for, as
    __cuda_array_interface__: torch keeps this object, and with it the CPU
    tensor that owns the block, until the CUDA tensor dies."""

    def __init__(self, owner, address, nbytes):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (address, False), "version": 2}


class Arena:
    """Exact-size pinned memory from which tensors are carved with no
    driver call: one mapping (huge_pages: True/"thp", "hugetlb" or False),
    bound to numa_node if given, prefaulted by several threads, registered
    once and CUDA-mapped once (cuda as for pin()).  A tensor's block returns
    to the arena when the tensor dies; the arena's memory lives until the
    arena is closed and its last tensor is gone.  A request that does not
    fit raises svmbatch.ArenaFullError (a MemoryError) saying whether the
    arena is full or fragmented.

    wait=False returns once the memory is mapped and prepares it (fault in,
    register, CUDA-map) in chunks on a background thread: the first of
    chunk_bytes (0: 256 MiB), each next twice the one before (at most 64
    GiB); no tensor crosses a chunk's end (a CUDA copy cannot read across
    two registrations), and a tensor waits only for its own chunk.
    ready() says whether every chunk is prepared, wait() blocks until they
    are.  A chunk that fails stops the preparation: wait(), and every
    tensor that would reach that chunk or a later one, raise its error; the
    chunks before it stay usable."""

    def __init__(self, nbytes: int, huge_pages: _typing.Union[bool, str] = True,
                 numa_node: _typing.Optional[int] = None, *,
                 context: _typing.Optional[_svmbatch.Context] = None,
                 cuda: _typing.Optional[bool] = None,
                 alignment: int = 256, threads: int = 0, wait: bool = True,
                 chunk_bytes: int = 0) -> None:
        backend, self.cuda_reason = _common.resolve_cuda(cuda)
        self._gpu = None
        if backend is not None:
            self.cuda_reason = None
            self._gpu = _torch.device("cuda", backend.device)
        self._arena = _svmbatch.Arena(int(nbytes), huge_pages, numa_node, context, backend,
                                      alignment, threads, bool(wait), int(chunk_bytes))

    def ready(self) -> bool:
        """Every chunk prepared: always True for an arena made with wait=True."""
        return self._arena.ready()

    def wait(self) -> None:
        """Block until every chunk is prepared; raises the error of the
        chunk that failed (every call)."""
        self._arena.wait()

    def empty(self, *size: _typing.Union[int, _Sequence[int]],
              dtype: _typing.Optional[_torch.dtype] = None,
              layout: _typing.Optional[_torch.layout] = None, device: _DeviceLike = None,
              requires_grad: bool = False, pin_memory: bool = False,
              memory_format: _typing.Optional[_torch.memory_format] = None
              ) -> _torch.Tensor:
        """An uninitialised tensor in the arena, taking torch.empty's
        arguments: size as ints or one sequence (a torch.Size), dtype
        (torch's default if None), device: the CPU (None, "cpu") gives the
        pinned CPU tensor, the CUDA device the arena is mapped for gives
        the GPU's view of the same memory (no copy); any other device is an
        svmbatch.Error.  memory_format: contiguous or channels_last(_3d)."""
        if size and isinstance(size[-1], _torch.dtype):
            # The first form, empty(shape, dtype), still works.
            if dtype is not None:
                raise TypeError("dtype given twice")
            dtype, size = size[-1], size[:-1]
        if not size:
            raise TypeError("empty() needs a size")
        shape = _size(size)
        dtype = dtype or _torch.get_default_dtype()
        if layout not in (None, _torch.strided):
            raise ValueError(f"layout {layout}: an arena carves strided tensors only")
        device = self._device(device)
        if pin_memory and device.type != "cpu":
            raise ValueError(f"pin_memory=True: only CPU tensors are pinned, not {device}")
        if pin_memory and not self.cuda:
            # Its memory is registered, but CUDA does not know it.
            raise _common.no_cuda(f"arena: pin_memory=True: {self.cuda_reason}")
        order = None
        if memory_format in _CHANNELS_LAST:
            dims, order = _CHANNELS_LAST[memory_format]
            if len(shape) != dims:
                raise ValueError(f"{memory_format} needs {dims} dimensions, not {len(shape)}")
            carved = [0] * dims
            for k, d in enumerate(shape):
                carved[order[k]] = d
            shape = tuple(carved)
        elif memory_format not in (None, _torch.contiguous_format, _torch.preserve_format):
            raise ValueError(f"memory_format {memory_format}: contiguous or channels_last")
        t = self._carve(shape, dtype)
        if device.type == "cuda":
            t = self._on_gpu(t, device)
        if order is not None:
            t = t.permute(order)
        if requires_grad:
            t.requires_grad_()
        return t

    def empty_like(self, t: _torch.Tensor, *, dtype: _typing.Optional[_torch.dtype] = None,
                   layout: _typing.Optional[_torch.layout] = None, device: _DeviceLike = None,
                   requires_grad: bool = False,
                   memory_format: _torch.memory_format = _torch.preserve_format
                   ) -> _torch.Tensor:
        """empty(t.shape) with t's dtype and device unless given, as
        torch.empty_like; preserve_format keeps channels_last, else the
        tensor is contiguous."""
        if memory_format is _torch.preserve_format:
            memory_format = None
            for fmt in _CHANNELS_LAST:
                if (t.dim() == _CHANNELS_LAST[fmt][0] and not t.is_contiguous()
                        and t.is_contiguous(memory_format=fmt)):
                    memory_format = fmt
        return self.empty(t.shape, dtype=dtype or t.dtype, layout=layout,
                          device=t.device if device is None else device,
                          requires_grad=requires_grad, memory_format=memory_format)

    def _device(self, device):
        device = _torch.device("cpu" if device is None else device)
        if device.type == "cpu":
            return device
        if device.type != "cuda":
            raise _error(_errno.EINVAL, "arena",
                         f"arena: device {device}: an arena's tensors are on the CPU or on "
                         "the CUDA device it is mapped for")
        device = _common.cuda_device(device, "arena")
        if self._gpu != device or not self.cuda:
            why = f"it is mapped for {self._gpu}" if self._gpu is not None and self.cuda \
                else f"it is not mapped for a GPU ({self.cuda_reason or 'closed'})"
            raise _error(_errno.EINVAL, "gpu-map", f"arena: device {device}: {why}")
        return device

    def _carve(self, shape, dtype):
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

    def _on_gpu(self, t, device):
        """The CUDA tensor over t's block, through the arena's GPU mapping."""
        address = self._arena.gpu_address(t.data_ptr())
        nbytes = t.numel() * t.element_size()
        with _torch.cuda.device(device):
            raw = _torch.as_tensor(_CudaView(t, address, nbytes), device=device)
        if raw.device != device or (nbytes and raw.data_ptr() != address):
            raise _error(_errno.EINVAL, "gpu-map",
                         f"arena: torch placed the block at {raw.device} "
                         f"{raw.data_ptr():#x}, not {device} {address:#x}")
        return raw.view(t.dtype).view(t.shape)

    @property
    def cuda(self) -> bool:
        """Mapped for CUDA (its CPU tensors are pinned, is_pinned() is True)."""
        return self._arena.gpu_mapped

    @property
    def cuda_device(self) -> _typing.Optional[_torch.device]:
        """The CUDA device the arena is mapped for, or None."""
        return self._gpu if self.cuda else None

    def __getattr__(self, name):
        # capacity, used, free, largest_free, live_blocks, huge_pages,
        # numa_node, base_address, mapped_bytes, registration, rounded,
        # chunks, chunk_bytes
        return getattr(self._arena, name)

    def close(self) -> None:
        self._arena.close()

    def __enter__(self) -> "Arena":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
