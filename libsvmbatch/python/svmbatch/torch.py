# SPDX-License-Identifier: MIT
"""svmbatch for PyTorch: pin tensors in one call, a pinned Arena, and a
safetensors loader that reads with the parallel Reader and copies to the
GPU while it reads.

    import svmbatch.torch as sbt
    with sbt.pin(tensors) as pinned:          # one registration, one CUDA mapping
        gpu = [t.to("cuda", non_blocking=True) for t in tensors]
    arena = sbt.Arena(1 << 30)                # exact size, prefaulted, pinned once
    x = arena.empty(1024, 1024, dtype=torch.float16)
    state = sbt.load_safetensors("model.safetensors", device="cuda")
    # every rank of a process group, each reading its share once:
    state = sbt.load_safetensors_distributed("ckpt/", group=group)

Works with any torch that speaks DLPack (1.13 and later).  Without CUDA
(Debian's CPU-only torch) pin() and Arena still register the memory (for
io_uring) and say why CUDA is absent (``cuda_reason``).
"""

from ._torch_common import cuda_backend, default_context
from .arena import Arena
from .distributed import (DistributedLoadError, Slice, iter_safetensors_distributed,
                          load_safetensors_distributed)
from .loading import iter_safetensors, load_safetensors, release_staging
from .pinning import Pinned, pin
from .saving import save_safetensors

__all__ = ["Arena", "DistributedLoadError", "Pinned", "Slice", "cuda_backend", "default_context",
           "iter_safetensors", "iter_safetensors_distributed", "load_safetensors",
           "load_safetensors_distributed", "pin", "release_staging", "save_safetensors"]
