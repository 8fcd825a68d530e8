# SPDX-License-Identifier: MIT
"""What the torch modules share: the default Context, the CUDA backend,
a tensor's storage, errors renamed after the tensor, the dtype tables.
Private: svmbatch.torch re-exports the public names."""

import errno as _errno

import torch as _torch

from . import _svmbatch
from ._errors import Error, error_class

_context = None
_backends = {}


def default_context():
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


def cuda_backend(device=None):
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


def storage_span(t):
    """(address, bytes) of the whole storage under tensor t."""
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr(), s.nbytes()


def renamed(e, index, what):
    """e (an svmbatch.Error about buffer k) as an error about item index."""
    return error_class(e.errno)(e.errno, f"{what} {index}: {e.strerror}", e.step, index,
                                e.driver_status)


# safetensors dtype -> torch dtype (None where this torch lacks it)
ST_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32",
    "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
    "F64": "float64", "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
TORCH_TO_ST = {}
for _st, _name in ST_DTYPES.items():
    if hasattr(_torch, _name):
        TORCH_TO_ST[getattr(_torch, _name)] = _st


def torch_dtype(entry, path):
    dtype = getattr(_torch, ST_DTYPES[entry.dtype], None)
    if dtype is None:
        raise ValueError(f"{path}: tensor {entry.name!r}: dtype {entry.dtype} is not "
                         f"supported by torch {_torch.__version__}")
    return dtype


def bytes_of(t):
    """t (contiguous) as a flat uint8 tensor over the same memory."""
    return t.reshape(-1).view(_torch.uint8) if t.numel() else t.reshape(0).view(_torch.uint8)
