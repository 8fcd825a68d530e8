# SPDX-License-Identifier: MIT
"""save_safetensors: tensors written as a safetensors file with
WRITE_FIXED from their registered memory on several cores."""

import os as _os
import typing as _typing
from collections.abc import Mapping as _Mapping

import torch as _torch

from . import _svmbatch
from . import _torch_common as _common
from ._errors import io_error as _io_error
from .safetensors_format import encode_header as _encode_header

__all__ = ["save_safetensors"]


def save_safetensors(tensors: dict[str, _torch.Tensor], path: _typing.Union[str, _os.PathLike],
                     metadata: _typing.Optional[_Mapping[str, str]] = None, *,
                     fsync: bool = False, threads: int = 0,
                     context: _typing.Optional[_svmbatch.Context] = None) -> None:
    """Write tensors (a dict name -> tensor) as a safetensors file that the
    safetensors package reads, with WRITE_FIXED from the registered tensors
    on several cores.  The file appears at path complete (written to a
    temporary name, then renamed); fsync makes it durable first."""
    if not isinstance(tensors, dict):
        raise TypeError("tensors must be a dict of name -> tensor")
    cpu = {}
    kinds = {}
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(name, str) or not isinstance(t, _torch.Tensor):
            raise TypeError(f"{name!r}: expected str -> torch.Tensor")
        kinds[name] = _common.st_dtype(t, name)
        cpu[name] = t.detach().to("cpu").contiguous()
    names = list(cpu)
    head, spans = _encode_header([(n, *kinds[n], cpu[n].numel() * cpu[n].element_size())
                                 for n in names], metadata)
    head = bytearray(head)
    data = [(n, begin, end) for n, begin, end in spans if end > begin]
    buffers = [head] + [(cpu[n].data_ptr(), end - begin, True) for n, begin, end in data]
    tmp = f"{path}.tmp-{_os.getpid()}"
    fd = _os.open(tmp, _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC | _os.O_CLOEXEC, 0o644)
    try:
        with (context or _common.default_context()).register(buffers) as registration, \
                _svmbatch.Writer(registration, threads=threads,
                                 sync=_svmbatch.SyncMode.Fsync if fsync
                                 else _svmbatch.SyncMode.None_) as writer:
            requests = [(fd, 0, len(head), 0)]
            requests += [(fd, len(head) + begin, end - begin, i + 1)
                         for i, (_, begin, end) in enumerate(data)]
            for i, r in enumerate(writer.write(requests)):
                if r.err:
                    what = "the header" if i == 0 else f"tensor {data[i - 1][0]!r}"
                    raise _io_error(r.err, f"{tmp}: writing {what}")
        _os.close(fd)
        fd = -1
        _os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            _os.close(fd)
        _os.unlink(tmp)
        raise
