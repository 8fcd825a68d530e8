# SPDX-License-Identifier: MIT
"""The safetensors file format, read and written without the safetensors
package: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
(``{"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
..., "__metadata__": {"key": "value"}}``), then the data, every tensor's
bytes at [begin, end) of it, row-major, little-endian.  The tensors cover
the data exactly: no holes, no overlaps, nothing after the last one.

Everything a hostile file can get wrong is a :class:`FormatError` (a
ValueError) naming the file and what is wrong with it.
"""

import json as _json
import operator as _operator
import os as _os
import struct as _struct
import typing as _typing
from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from collections.abc import Sequence as _Sequence
from dataclasses import dataclass as _dataclass

__all__ = ["ITEM_BITS", "ITEM_BYTES", "MAX_HEADER_BYTES", "Entry", "FormatError", "Header",
           "encode_header", "read_header"]

#: Largest header accepted (the safetensors package's own limit).
MAX_HEADER_BYTES = 100 << 20

#: dtype string -> bits per element: every dtype of the format as the
#: safetensors package 0.8 reads and writes it.  F4 and the F6 types pack
#: elements into bytes; a tensor of them must fill whole bytes.
ITEM_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8,
    "F8_E4M3": 8, "F8_E5M2": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F8_E8M0": 8,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}

#: dtype string -> bytes per element, for the dtypes of whole bytes.
ITEM_BYTES = {name: bits // 8 for name, bits in ITEM_BITS.items() if bits % 8 == 0}


class FormatError(ValueError):
    """A file that is not valid safetensors."""


class Entry(_typing.NamedTuple):
    """One tensor of the file: [begin, end) of the data section.  A named
    tuple: a checkpoint has tens of thousands of them."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@_dataclass(frozen=True)
class Header:
    """A parsed, validated header: entries sorted by offset."""

    entries: tuple[Entry, ...]
    metadata: dict[str, str]
    data_start: int  # file offset of the data section
    data_bytes: int


def _pread_exact(fd, n, offset, path):
    out = _os.pread(fd, n, offset)
    if len(out) != n:
        raise FormatError(f"{path}: truncated: {len(out)} of {n} bytes at offset {offset}")
    return out


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise FormatError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _entry(path, name, spec):
    """The Entry of a valid spec, on a path with no per-tensor string or
    set; any doubt goes to _checked_entry, which says what is wrong."""
    try:
        if type(spec) is dict and len(spec) == 3:
            dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
            bits = ITEM_BITS[dtype]
            if type(shape) is list and type(offsets) is list and len(offsets) == 2:
                begin, end = offsets
                # type() is int: no bool, no float.
                if type(begin) is int and type(end) is int and 0 <= begin <= end:
                    elements = 1
                    for d in shape:
                        if type(d) is not int or d < 0:
                            break
                        elements *= d
                    else:
                        if elements * bits == (end - begin) * 8:
                            return Entry(name, dtype, tuple(shape), begin, end)
    except (KeyError, TypeError):
        pass
    return _checked_entry(path, name, spec)


def _checked_entry(path, name, spec):
    where = f"{path}: tensor {name!r}"
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
        raise FormatError(f"{where}: expected dtype, shape and data_offsets, got {spec!r:.200}")
    dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
    if dtype not in ITEM_BITS:
        raise FormatError(f"{where}: unknown dtype {dtype!r}")
    if (not isinstance(shape, list) or
            not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise FormatError(f"{where}: shape {shape!r:.200} is not a list of sizes")
    if (not isinstance(offsets, list) or len(offsets) != 2 or
            not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)):
        raise FormatError(f"{where}: data_offsets {offsets!r:.200} are not [begin, end]")
    begin, end = offsets
    if end < begin:
        raise FormatError(f"{where}: data_offsets [{begin}, {end}] are out of order")
    elements = 1
    for d in shape:
        elements *= d
    bits = elements * ITEM_BITS[dtype]
    if bits % 8:
        raise FormatError(f"{where}: shape {shape} x {dtype} is {bits} bits, not whole bytes")
    if bits // 8 != end - begin:
        raise FormatError(f"{where}: shape {shape} x {dtype} is {bits // 8} "
                          f"bytes, data_offsets span {end - begin}")
    return Entry(name, dtype, tuple(shape), begin, end)


_by_offsets = _operator.itemgetter(3, 4)  # an Entry's (begin, end)


def read_header(fd: int, path: _typing.Union[str, _os.PathLike] = "<fd>") -> Header:
    """Parse and validate the header of the safetensors file open at fd."""
    size = _os.fstat(fd).st_size
    if size < 8:
        raise FormatError(f"{path}: truncated: {size} bytes, no 8-byte header length")
    (n,) = _struct.unpack("<Q", _pread_exact(fd, 8, 0, path))
    if n > MAX_HEADER_BYTES:
        raise FormatError(f"{path}: header of {n} bytes is over the {MAX_HEADER_BYTES} limit")
    if 8 + n > size:
        raise FormatError(f"{path}: header length {n} reaches past the end of the file "
                          f"({size} bytes)")
    raw = _pread_exact(fd, n, 8, path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"{path}: header is not UTF-8: {e}") from None
    try:
        doc = _json.loads(text, object_pairs_hook=_no_duplicates)
    except FormatError as e:
        raise FormatError(f"{path}: header: {e}") from None
    except ValueError as e:
        raise FormatError(f"{path}: header is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{path}: header is not a JSON object")
    metadata = doc.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise FormatError(f"{path}: __metadata__ is not an object of strings")
    entries = sorted([_entry(path, name, spec) for name, spec in doc.items()],
                     key=_by_offsets)
    data_bytes = size - 8 - n
    at = 0
    for e in entries:
        if e.begin < at:
            raise FormatError(f"{path}: tensor {e.name!r} at [{e.begin}, {e.end}) overlaps "
                              f"the tensor before it (which ends at {at})")
        if e.begin > at:
            raise FormatError(f"{path}: a hole of {e.begin - at} bytes before tensor "
                              f"{e.name!r}")
        at = e.end
    if at > data_bytes:
        raise FormatError(f"{path}: the tensors end at data offset {at}, past the end of "
                          f"the file ({data_bytes} bytes of data): truncated or out of range")
    if at < data_bytes:
        raise FormatError(f"{path}: {data_bytes - at} bytes after the last tensor")
    return Header(tuple(entries), metadata, 8 + n, data_bytes)


def encode_header(entries: _Iterable[tuple[str, str, _Sequence[int], int]],
                  metadata: _typing.Optional[_Mapping[str, str]] = None
                  ) -> tuple[bytes, list[tuple[str, int, int]]]:
    """The header bytes (length and JSON, padded with spaces to 8 bytes)
    for entries, a list of (name, dtype, shape, nbytes) laid out in order.
    Returns (header bytes, [(name, begin, end)])."""
    doc = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ValueError("metadata must map strings to strings")
        doc["__metadata__"] = dict(metadata)
    spans = []
    at = 0
    for name, dtype, shape, nbytes in entries:
        if name == "__metadata__":
            raise ValueError("a tensor cannot be named __metadata__")
        doc[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + nbytes]}
        spans.append((name, at, at + nbytes))
        at += nbytes
    text = _json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return _struct.pack("<Q", len(text)) + text, spans
