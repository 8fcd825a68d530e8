# SPDX-License-Identifier: MIT
"""The package's public namespace: one module per job, each with __all__
naming what it exports and nothing of the standard library besides."""
import importlib
import inspect
import typing

import pytest

# torch is required (make check: Debian's python3-torch): an import
# failure is a collection error, never a skip.
import torch  # noqa: F401

PUBLIC = {
    "svmbatch.pinning": {"Pinned", "pin", "storage_buffers"},
    "svmbatch.arena": {"Arena"},
    "svmbatch.loading": {"iter_safetensors", "load_safetensors", "release_staging"},
    "svmbatch.saving": {"save_safetensors"},
    "svmbatch.safetensors_format": {"Entry", "FormatError", "Header", "ITEM_BITS", "ITEM_BYTES",
                                    "MAX_HEADER_BYTES", "encode_header", "read_header"},
    "svmbatch.distributed": {"DistributedLoadError", "Slice", "iter_safetensors_distributed",
                             "load_safetensors_distributed"},
    "svmbatch.torch": {"Arena", "DistributedLoadError", "Pinned", "Slice", "cuda_backend",
                       "default_context", "iter_safetensors", "iter_safetensors_distributed",
                       "load_safetensors", "load_safetensors_distributed", "pin",
                       "release_staging", "save_safetensors"},
}


# The package's own modules, which import svmbatch.torch binds on svmbatch.
MODULES = {"arena", "distributed", "loading", "pinning", "safetensors_format", "saving", "torch"}
STANDARD = {"os", "threading", "json", "struct", "deque", "dataclass", "torch", "typing",
            "errno", "operator", "collections", "builtins", "Sequence", "Any", "Optional"}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_module_exports_its_all_and_no_standard_modules(name):
    module = importlib.import_module(name)
    assert set(module.__all__) == PUBLIC[name]
    for attr in module.__all__:
        assert hasattr(module, attr), f"{name}.{attr} is in __all__ but missing"
    public = {a for a in dir(module) if not a.startswith("_")}
    assert public == PUBLIC[name], f"{name} shows {sorted(public - PUBLIC[name])}"


def test_the_package_shows_its_all_and_its_modules_only():
    import svmbatch
    import svmbatch.torch  # noqa: F401 - binds the job modules on svmbatch

    public = {a for a in dir(svmbatch) if not a.startswith("_")}
    assert public - MODULES == set(svmbatch.__all__)
    assert not (public & STANDARD) - MODULES
    assert all(hasattr(svmbatch, a) for a in svmbatch.__all__)


def test_svmbatch_torch_reexports_the_job_modules():
    import svmbatch.arena
    import svmbatch.distributed
    import svmbatch.loading
    import svmbatch.pinning
    import svmbatch.saving
    import svmbatch.torch as sbt

    assert sbt.pin is svmbatch.pinning.pin
    assert sbt.Arena is svmbatch.arena.Arena
    assert sbt.load_safetensors is svmbatch.loading.load_safetensors
    assert sbt.release_staging is svmbatch.loading.release_staging
    assert sbt.save_safetensors is svmbatch.saving.save_safetensors
    assert sbt.load_safetensors_distributed is svmbatch.distributed.load_safetensors_distributed


def _python_callables(module):
    """The functions and classes of module's __all__ written in Python (the
    extension's classes carry pybind11's own signatures)."""
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj):
            yield f"{module.__name__}.{name}", obj
        elif inspect.isclass(obj) and not obj.__module__.startswith("svmbatch._svmbatch"):
            for attr, member in vars(obj).items():
                if attr == "__init__" or not attr.startswith("_"):
                    if isinstance(member, property):
                        member = member.fget
                    if inspect.isfunction(member):
                        yield f"{module.__name__}.{name}.{attr}", member


@pytest.mark.parametrize("name", sorted(PUBLIC) + ["svmbatch"])
def test_the_public_api_has_type_hints(name):
    module = importlib.import_module(name)
    missing = []
    for where, fn in _python_callables(module):
        hints = typing.get_type_hints(fn)
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) \
                    and p.name not in hints:
                missing.append(f"{where}({p.name})")
        if "return" not in hints:
            missing.append(f"{where} -> ?")
    assert not missing, f"no type hint: {missing}"
