# SPDX-License-Identifier: MIT
"""What the torch modules share: the default Context, the CUDA backend,
a tensor's storage, errors renamed after the tensor, the dtype tables.
Private: svmbatch.torch re-exports the public names."""

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


def resolve_cuda(cuda):
    if cuda is False:
        return None, "CUDA not asked for (cuda=False)"
    backend, reason = cuda_backend()
    if backend is None and cuda:
        raise error_class(19)(19, reason, "gpu-open", None, 0)  # ENODEV
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
