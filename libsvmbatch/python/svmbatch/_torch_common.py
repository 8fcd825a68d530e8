# SPDX-License-Identifier: MIT
"""What the torch modules share: the default Context, the CUDA backend,
a tensor's storage, errors renamed after the tensor, the dtype tables.
Private: svmbatch.torch re-exports the public names."""

import errno as _errno
import typing as _typing

import torch as _torch

from . import _svmbatch
from ._errors import Error, error_class

_context = None
_backends = {}


def default_context() -> _svmbatch.Context:
    """The Context pin(), Arena and the loaders use unless given one."""
    global _context
    if _context is None:
        _context = _svmbatch.Context()
    return _context


def _cuda_absent():
    """Why torch cannot use CUDA here, or None where it can."""
    if _torch.cuda.is_available():
        return None
    why = "torch has no CUDA" if _torch.version.cuda is None else "no CUDA device"
    return f"CUDA is absent: {why} (torch {_torch.__version__})"


def no_cuda(message):
    """The svmbatch.Error of a CUDA device asked for where there is none."""
    return error_class(_errno.ENODEV)(_errno.ENODEV, message, "gpu-open", None, 0)


def cuda_device(device, what):
    """device (a CUDA torch.device) with its index, where torch reaches it;
    else svmbatch.Error ENODEV (step "gpu-open") saying why, not torch's
    AssertionError or RuntimeError."""
    reason = _cuda_absent()
    if reason is not None:
        raise no_cuda(f"{what}: device {device}: {reason}")
    count = _torch.cuda.device_count()
    index = _torch.cuda.current_device() if device.index is None else device.index
    if index >= count:
        raise no_cuda(f"{what}: device {device}: torch sees {count} CUDA device"
                      f"{'' if count == 1 else 's'}")
    return _torch.device("cuda", index)


def cuda_backend(device: _typing.Union[_torch.device, str, int, None] = None
                 ) -> tuple[_typing.Optional[_svmbatch.GpuBackend], _typing.Optional[str]]:
    """(CudaBackend, None) for torch's CUDA device, or (None, why not)."""
    reason = _cuda_absent()
    if reason is not None:
        return None, reason
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


def resolve_cuda(cuda):
    if cuda is False:
        return None, "CUDA not asked for (cuda=False)"
    backend, reason = cuda_backend()
    if backend is None and cuda:
        raise no_cuda(reason)
    return backend, reason


# The untyped storage under a tensor, as an unbound method (a loop over
# thousands of tensors calls it without a Python frame of its own); torch
# < 2: the untyped storage without storage()'s Python wrapper.
storage_of = getattr(_torch.Tensor, "untyped_storage", None) or _torch.Tensor._storage


def renamed(e, index, what):
    """e (an svmbatch.Error about buffer k) as an error about item index."""
    return error_class(e.errno)(e.errno, f"{what} {index}: {e.strerror}", e.step, index,
                                e.driver_status)


# safetensors dtype -> the name of the torch dtype safetensors 0.8 maps it
# to (None: torch has none).  A torch that lacks a name lacks the dtype
# (float8 came in 2.1, uint16/32/64 in 2.3, float4 in 2.8).
ST_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64",
    "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
    "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu",
    "F4": "float4_e2m1fn_x2",  # two F4 per byte: the last dimension is halved
    "F6_E2M3": None, "F6_E3M2": None,
}
TORCH_TO_ST = {}
for _st, _name in ST_DTYPES.items():
    if _name is not None and hasattr(_torch, _name):
        TORCH_TO_ST[getattr(_torch, _name)] = _st
# torch dtypes that hold two of the file's elements in each element.
PACKED = {d for d, st in TORCH_TO_ST.items() if st == "F4"}


def torch_dtype(entry, path):
    """The torch dtype and shape of entry (a safetensors_format.Entry)."""
    name = ST_DTYPES[entry.dtype]
    dtype = getattr(_torch, name, None) if name is not None else None
    where = f"{path}: tensor {entry.name!r}: dtype {entry.dtype}"
    if dtype is None:
        raise ValueError(f"{where} is not supported by torch {_torch.__version__}")
    shape = entry.shape
    if dtype in PACKED:
        if not shape or shape[-1] % 2:
            raise ValueError(f"{where}: shape {list(shape)} has no even last dimension to "
                             f"pack as {dtype}")
        shape = shape[:-1] + (shape[-1] // 2,)
    return dtype, shape


def st_dtype(t, name):
    """(safetensors dtype, header shape) of tensor t."""
    st = TORCH_TO_ST.get(t.dtype)
    if st is None:
        raise ValueError(f"{name!r}: dtype {t.dtype} has no safetensors name")
    shape = tuple(t.shape)
    if t.dtype in PACKED:
        if not shape:
            raise ValueError(f"{name!r}: a {t.dtype} scalar has no last dimension to unpack")
        shape = shape[:-1] + (shape[-1] * 2,)
    return st, shape


def bytes_of(t):
    """t (contiguous) as a flat uint8 tensor over the same memory."""
    return t.reshape(-1).view(_torch.uint8) if t.numel() else t.reshape(0).view(_torch.uint8)
