# SPDX-License-Identifier: MIT
"""The exceptions of svmbatch.

Every failure of the library is a :class:`Error`, an :class:`OSError` whose
``errno`` is the library's errno, with the step that failed, the index of
the caller's buffer to blame (or None) and the GPU driver's own status.
For the errnos Python maps to an OSError subclass, the error is also an
instance of that subclass: ``except PermissionError`` catches EPERM/EACCES.
"""

import builtins
import errno as _errno
import os
import typing as _typing


class Error(OSError):
    """A failure of the svmbatch library."""

    def __init__(self, err: int, message: str, step: _typing.Optional[str] = None,
                 buffer_index: _typing.Optional[int] = None, driver_status: int = 0) -> None:
        super().__init__(err, message)
        self.step = step
        self.buffer_index = buffer_index
        self.driver_status = driver_status

    def __str__(self) -> str:
        return f"[Errno {self.errno}] {self.strerror}"

    def __reduce__(self):
        return (type(self), (self.errno, self.strerror, self.step, self.buffer_index,
                             self.driver_status))


class ArenaFullError(MemoryError):
    """An Arena has no free block large enough (full, or fragmented)."""

    def __init__(self, message: str, requested: int = 0, free: int = 0,
                 largest_free: int = 0) -> None:
        super().__init__(message)
        self.requested = requested
        self.free = free
        self.largest_free = largest_free

    @property
    def fragmented(self) -> bool:
        """True when enough bytes are free, only not in one piece."""
        return self.free >= self.requested


# errno -> the builtin OSError subclass Python itself would raise.
_BUILTIN = {
    _errno.EPERM: builtins.PermissionError,
    _errno.EACCES: builtins.PermissionError,
    _errno.ENOENT: builtins.FileNotFoundError,
    _errno.EEXIST: builtins.FileExistsError,
    _errno.EINTR: builtins.InterruptedError,
    _errno.EAGAIN: builtins.BlockingIOError,
    _errno.ETIMEDOUT: builtins.TimeoutError,
}
_SUBCLASSES = {}


# Shown as svmbatch.Error, svmbatch.ArenaFullError: where users import them.
Error.__module__ = "svmbatch"
ArenaFullError.__module__ = "svmbatch"


def error_class(err: int) -> type[Error]:
    """The svmbatch.Error class for err (a subclass of the builtin one)."""
    base = _BUILTIN.get(err)
    if base is None:
        return Error
    cls = _SUBCLASSES.get(base)
    if cls is None:
        cls = type(base.__name__, (Error, base), {"__module__": "svmbatch"})
        _SUBCLASSES[base] = cls
    return cls


def from_library(err, step, message, buffer_index, driver_status):
    """Called by the extension for every svmbatch::Error."""
    text = message or os.strerror(err)
    return error_class(err)(err, text, step, buffer_index, driver_status)


def io_error(err, message, index=None):
    """The svmbatch.Error of a failed read or write (step "io"): message,
    then the errno's text."""
    return error_class(err)(err, f"{message}: {os.strerror(err)}", "io", index, 0)


def arena_full(message, requested, free, largest_free):
    """Called by the extension when an Arena cannot carve a block."""
    return ArenaFullError(message, requested, free, largest_free)
