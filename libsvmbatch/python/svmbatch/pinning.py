# SPDX-License-Identifier: MIT
"""Pin tensors in one call: one registration of their storages (each
storage once), CUDA-mapped in one call where CUDA is present."""

import typing as _typing
from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping

import torch as _torch

from . import _svmbatch
from . import _torch_common as _common
from ._errors import Error as _Error

__all__ = ["Pinned", "pin", "storage_buffers"]


class Pinned:
    """Tensors whose storages are registered (and CUDA-mapped) as one set.

    The tensors are kept alive while pinned.  close() (or leaving the
    ``with`` block) unmaps and unregisters; the tensors stay valid, no
    longer pinned."""

    def __init__(self, tensors: tuple[_torch.Tensor, ...],
                 registration: _svmbatch.Registration,
                 mapping: _typing.Optional[_svmbatch.GpuMapping],
                 cuda_reason: _typing.Optional[str]) -> None:
        self.tensors = tensors
        self.registration = registration
        self.mapping = mapping
        self.cuda_reason = cuda_reason

    @property
    def cuda(self) -> bool:
        """Mapped for CUDA (t.is_pinned() is True, copies are asynchronous)."""
        return self.mapping is not None and not self.mapping.closed

    @property
    def ranges(self) -> int:
        """How many page ranges the storages merged into."""
        return len(self.registration.ranges)

    def close(self) -> None:
        if self.mapping is not None:
            self.mapping.close()
        self.registration.close()

    def __enter__(self) -> "Pinned":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def storage_buffers(tensors: _typing.Sequence[_torch.Tensor], read_only: bool = False
                    ) -> tuple[list[tuple[int, int, bool]], list[int],
                               list[_typing.Optional[int]]]:
    """The library's walk over the tensors' storages (each storage once):
    (buffers as (address, length, read_only), owner tensor per buffer,
    buffer per tensor or None).  One pass in Python, the walk in C++: pin()
    of thousands of tensors spends little of its time here."""
    storages = []
    append = storages.append
    tensor_type, strided, storage_of = _torch.Tensor, _torch.strided, _common.storage_of
    for i, t in enumerate(tensors):
        if not isinstance(t, tensor_type):
            raise TypeError(f"tensor {i}: a {type(t).__name__}, not a torch.Tensor")
        if not t.is_cpu or t.layout is not strided:
            raise ValueError(f"tensor {i}: {t.device.type} {t.layout}: only strided CPU "
                             "tensors can be pinned")
        # The whole storage under t: (address, bytes).
        s = storage_of(t)
        append((s.data_ptr(), s.nbytes()))
    return _svmbatch.storage_buffers(storages, read_only)


def _register_tensors(tensors, context, read_only=False, prefault=True):
    """One registration of the tensors' storages (each storage once).
    Returns (registration, storage index per tensor or None, storage spans).
    prefault=False: see Context.register()."""
    spans, owner, which = storage_buffers(tensors, read_only)
    try:
        registration = (context or _common.default_context()).register(spans, prefault=prefault)
    except _Error as e:
        if e.buffer_index is None:
            raise
        raise _common.renamed(e, owner[e.buffer_index], "tensor") from e
    return registration, which, spans, owner


def pin(tensors: _typing.Union[_Iterable[_torch.Tensor], _Mapping[str, _torch.Tensor]], *,
        context: _typing.Optional[_svmbatch.Context] = None,
        cuda: _typing.Optional[bool] = None) -> Pinned:
    """Pin the storages of tensors (CPU tensors) in one registration,
    mapped for CUDA in one call where CUDA is present (cuda=None: if
    present; True: required; False: not).  All or nothing: an error names
    the tensor (its buffer_index)."""
    tensors = tuple(tensors.values() if isinstance(tensors, dict) else tensors)
    backend, reason = _common.resolve_cuda(cuda)
    # Mapped at once: CUDA faults the pages in as it pins them, so
    # userspace mode only checks them rather than faulting them in first.
    registration, _, _, owner = _register_tensors(tensors, context,
                                                  prefault=backend is None)
    mapping = None
    if backend is not None:
        try:
            mapping = _svmbatch.map(registration, backend)
        except _Error as e:
            registration.close()
            if e.buffer_index is None:
                raise
            raise _common.renamed(e, owner[e.buffer_index], "tensor") from e
        reason = None
    return Pinned(tensors, registration, mapping, reason)
