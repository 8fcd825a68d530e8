# SPDX-License-Identifier: MIT
"""load_safetensors / save_safetensors against files written by a minimal
writer of this test (not ours, not the safetensors package's) and against
the safetensors package itself; every kind of hostile file."""

import errno
import json
import os
import re
import struct

import pytest

# torch is required (make check: Debian's python3-torch): an import
# failure is a collection error, never a skip of the whole file.
import torch  # noqa: E402
import svmbatch  # noqa: E402
import svmbatch.torch as sbt  # noqa: E402
from conftest import has_cuda, needs_cuda  # noqa: E402
from svmbatch.safetensors_format import FormatError  # noqa: E402

# The minimal writer: names, dtypes and raw bytes, laid out in the given order.
CODES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
         torch.float64: "F64", torch.int64: "I64", torch.int32: "I32", torch.int16: "I16",
         torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


def raw_bytes(t):
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def write_minimal(path, tensors, header_override=None, pad=True):
    header, data = {}, b""
    for name, t in tensors.items():
        b = raw_bytes(t)
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    if header_override is not None:
        header = header_override
    text = json.dumps(header).encode() if not isinstance(header, bytes) else header
    if pad:
        text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def sample():
    g = torch.Generator().manual_seed(7)
    return {
        "embed.weight": torch.randn(300, 64, generator=g),
        "layer.0.bias": torch.randn(64, generator=g).to(torch.float16),
        "layer.0.w": torch.randn(64, 64, generator=g).to(torch.bfloat16),
        "ids": torch.arange(1000, dtype=torch.int64),
        "mask": torch.rand(33, generator=g) > 0.5,
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "empty": torch.zeros(0, 4),
        "small": torch.tensor([1, -2, 3], dtype=torch.int8),
        "u8": torch.arange(200, dtype=torch.uint8),
        "i16": torch.arange(-50, 50, dtype=torch.int16),
        "i32": torch.arange(77, dtype=torch.int32),
    }


def assert_same(got, want):
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        assert got[k].shape == want[k].shape, k
        assert raw_bytes(got[k].cpu()) == raw_bytes(want[k]), k


def test_load_a_minimal_writer_file(tmp_path, baseline):
    path = tmp_path / "m.safetensors"
    write_minimal(path, sample())
    assert_same(sbt.load_safetensors(str(path), device="cpu"), sample())


def test_the_device_defaults_to_the_cpu_as_in_safetensors(tmp_path, baseline):
    path = tmp_path / "d.safetensors"
    write_minimal(path, sample())
    got = sbt.load_safetensors(str(path))
    assert all(t.device.type == "cpu" for t in got.values())
    assert_same(got, sample())


@pytest.mark.parametrize("device", ["cuda", "cuda:0", 0, "cuda:99"], ids=str)
def test_cuda_where_torch_has_none_is_an_svmbatch_error(tmp_path, baseline, device):
    if has_cuda() and device != "cuda:99":
        pytest.skip("torch has a CUDA device here: only a missing one is tested")
    path = tmp_path / "d.safetensors"
    write_minimal(path, sample())
    with pytest.raises(svmbatch.Error) as e:
        sbt.load_safetensors(str(path), device=device)
    assert e.value.errno == errno.ENODEV and e.value.step == "gpu-open"
    assert str(path) in str(e.value)
    assert ("torch sees" if has_cuda() else "CUDA is absent") in str(e.value)


def test_save_then_load_and_dtype_conversion(tmp_path, baseline):
    path = str(tmp_path / "s.safetensors")
    sbt.save_safetensors(sample(), path, metadata={"format": "pt"}, fsync=True)
    assert_same(sbt.load_safetensors(path, device="cpu"), sample())
    half = sbt.load_safetensors(path, device="cpu", dtype=torch.float16)
    assert half["embed.weight"].dtype == torch.float16
    assert half["ids"].dtype == torch.int64, "integers are not converted"
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f]


def test_large_tensors_through_several_threads(tmp_path, baseline):
    big = {f"t{i}": torch.randn(1 << 18) for i in range(12)}  # 12 MiB
    path = str(tmp_path / "big.safetensors")
    sbt.save_safetensors(big, path, threads=4)
    assert_same(sbt.load_safetensors(path, device="cpu", threads=4), big)


@pytest.mark.parametrize("staging,chunk", [(2 << 20, 1 << 20), (8 << 20, 1 << 20),
                                           (64 << 20, 8 << 20)])
def test_the_staging_ring_copies_every_byte_once(tmp_path, baseline, staging, chunk):
    """The CUDA path's ring on the CPU: tensors across chunk edges, chunks
    holding many small tensors, the ring wrapping around many times."""
    tensors = sample()
    tensors.update({f"big{i}": torch.randn((3 << 18) + i) for i in range(4)})
    tensors.update({f"tiny{i}": torch.full((i + 1,), i, dtype=torch.int16) for i in range(50)})
    path = str(tmp_path / "ring.safetensors")
    write_minimal(path, tensors)
    got = sbt.load_safetensors(path, device="cpu", staged=True, staging_bytes=staging,
                               chunk_bytes=chunk, threads=3)
    assert_same(got, tensors)


def test_the_reference_reads_ours_and_we_read_the_reference(tmp_path):
    import safetensors.torch as st  # required: tools/python-deps.sh
    ours = str(tmp_path / "ours.safetensors")
    theirs = str(tmp_path / "theirs.safetensors")
    sbt.save_safetensors(sample(), ours, metadata={"a": "b"})
    assert_same(st.load_file(ours), sample())
    st.save_file(sample(), theirs, metadata={"a": "b"})
    assert_same(sbt.load_safetensors(theirs, device="cpu"), st.load_file(theirs))


# Every dtype of the format as safetensors 0.8 names it, and the torch
# dtype it maps it to (None: none in any torch).
ST_TORCH = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16",
    "BF16": "bfloat16", "F32": "float32", "F64": "float64", "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu", "F4": "float4_e2m1fn_x2",
    "F6_E2M3": None, "F6_E3M2": None,
}
# The torch release that brought each dtype newer than Debian's 1.13 (read
# off the wheels of PyPI).  A torch before it lacks the dtype and its test
# skips, saying so; a torch at or past it must have it: there the test
# fails, so no dtype test can skip under the venv's torch 2.x.
TORCH_SINCE = {"float8_e4m3fn": (2, 1), "float8_e5m2": (2, 1), "float8_e4m3fnuz": (2, 2),
               "float8_e5m2fnuz": (2, 2), "uint16": (2, 3), "uint32": (2, 3), "uint64": (2, 3),
               "float8_e8m0fnu": (2, 7), "float4_e2m1fn_x2": (2, 8)}
TORCH_RELEASE = tuple(int(n) for n in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())


def torch_dtype(code):
    """The torch dtype of a safetensors code; a skip where this torch
    predates it, a failure where it should have it and has not."""
    name = ST_TORCH[code]
    dtype = getattr(torch, name, None)
    since = TORCH_SINCE.get(name, (1, 13))
    if dtype is None and TORCH_RELEASE < since:
        pytest.skip(f"torch {torch.__version__} has no torch.{name} for {code} "
                    f"(it came in torch {since[0]}.{since[1]})")
    assert dtype is not None, (f"torch {torch.__version__} has no torch.{name} for {code}, "
                               f"though it came in torch {since[0]}.{since[1]}")
    return dtype


def patterned(dtype, shape):
    """A tensor of dtype whose bytes are all different-ish (bool: 0 and 1)."""
    item = torch.empty((), dtype=dtype).element_size()
    n = item
    for d in shape:
        n *= d
    raw = (torch.arange(n, dtype=torch.int64) * 37 + 11) % 251
    raw = (raw % 2 if dtype == torch.bool else raw).to(torch.uint8)
    return raw.view(dtype).reshape(shape) if n else torch.empty(shape, dtype=dtype)


def header_of(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        doc = json.loads(f.read(n))
    doc.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"]) for k, v in doc.items()}


def test_the_dtype_table_is_the_format_s():
    from svmbatch.safetensors_format import ITEM_BITS
    assert set(ITEM_BITS) == set(ST_TORCH)


@pytest.mark.parametrize("staged", [False, True], ids=["direct", "staged"])
@pytest.mark.parametrize("code", [c for c, n in ST_TORCH.items() if n])
def test_every_dtype_round_trips_with_safetensors(tmp_path, baseline, code, staged):
    import safetensors.torch as st  # required: tools/python-deps.sh
    dtype = torch_dtype(code)
    tensors = {"m": patterned(dtype, (5, 6)), "v": patterned(dtype, (10,)),
               "e": patterned(dtype, (0, 2))}
    if code != "F4":  # a scalar has no last dimension to pack two F4 into
        tensors["s"] = patterned(dtype, ())
    theirs, ours = str(tmp_path / "theirs.safetensors"), str(tmp_path / "ours.safetensors")
    st.save_file(tensors, theirs)
    assert {v[0] for v in header_of(theirs).values()} == {code}
    got = sbt.load_safetensors(theirs, staged=staged, staging_bytes=2 << 20,
                               chunk_bytes=1 << 20)
    assert_same(got, st.load_file(theirs))
    assert_same(got, tensors)
    sbt.save_safetensors(tensors, ours)
    assert header_of(ours) == header_of(theirs)
    assert_same(st.load_file(ours), tensors)


@pytest.mark.parametrize("code", [c for c, n in ST_TORCH.items() if not n])
def test_a_dtype_torch_lacks_is_parsed_then_refused(tmp_path, baseline, code):
    path = tmp_path / "f6.safetensors"
    write_minimal(path, {}, header_override={"a": entry(code, [2, 4], 0, 6)})
    with open(path, "ab") as f:
        f.write(bytes(6))
    with pytest.raises(ValueError, match=f"dtype {code} is not supported by torch"):
        sbt.load_safetensors(str(path))


def test_save_refuses_bad_input(tmp_path):
    with pytest.raises(TypeError):
        sbt.save_safetensors([torch.ones(1)], str(tmp_path / "x"))
    with pytest.raises(ValueError, match="__metadata__"):
        sbt.save_safetensors({"__metadata__": torch.ones(1)}, str(tmp_path / "x"))
    assert not os.listdir(tmp_path)


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


HOSTILE = {
    "empty file": (b"", "truncated"),
    "short length": (b"\x01\x02\x03", "truncated"),
    "length past the end": (struct.pack("<Q", 1000) + b"{}", "past the end"),
    "header over 100 MiB": (struct.pack("<Q", (100 << 20) + 1) + b"{}", "limit"),
    "not UTF-8": (struct.pack("<Q", 8) + b'{"\xff\xfe":1}', "UTF-8"),
    "not JSON": (struct.pack("<Q", 8) + b"{nope:1}", "not JSON"),
    "not an object": (struct.pack("<Q", 8) + b"[1,2,3] ", "not a JSON object"),
}
HOSTILE_HEADERS = {
    "unknown dtype": ({"a": entry("F128", [1], 0, 16)}, 16, "unknown dtype"),
    "out of range": ({"a": entry("F32", [4], 0, 16)}, 8, "past the end"),
    "overlapping": ({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}, 12,
                    "overlaps"),
    "unordered": ({"a": entry("F32", [1], 8, 4)}, 8, "out of order"),
    "a hole": ({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}, 12, "hole"),
    "trailing bytes": ({"a": entry("F32", [1], 0, 4)}, 12, "after the last tensor"),
    "shape x dtype": ({"a": entry("F32", [3], 0, 8)}, 8, "shape"),
    "F4 of half a byte": ({"a": entry("F4", [3], 0, 2)}, 2, "not whole bytes"),
    "negative dim": ({"a": entry("F32", [-1], 0, 4)}, 4, "shape"),
    "bad offsets": ({"a": entry("F32", [1], "0", 4)}, 4, "data_offsets"),
    "missing key": ({"a": {"dtype": "F32", "shape": [1]}}, 4, "expected"),
    "bad metadata": ({"__metadata__": {"a": 1}}, 0, "__metadata__"),
    "duplicate key": (b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                      b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1, "duplicate"),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("case", sorted(HOSTILE) + sorted(HOSTILE_HEADERS))
def test_hostile_files_are_value_errors_and_leak_nothing(tmp_path, baseline, case, device):
    path = tmp_path / "hostile.safetensors"
    if case in HOSTILE:
        blob, message = HOSTILE[case]
        path.write_bytes(blob)
    else:
        header, data_bytes, message = HOSTILE_HEADERS[case]
        write_minimal(path, {}, header_override=header)
        with open(path, "ab") as f:
            f.write(b"\0" * data_bytes)
    if device == "cuda":
        before = torch.cuda.memory_allocated()
    with pytest.raises(ValueError, match=message) as e:
        sbt.load_safetensors(str(path), device=device)
    assert isinstance(e.value, FormatError) and str(path) in str(e.value)
    if device == "cuda":
        assert torch.cuda.memory_allocated() == before


@needs_cuda
@pytest.mark.parametrize("staging", [4 << 20, 256 << 20])
def test_load_to_cuda_equals_the_reference(tmp_path, staging):
    import safetensors.torch as st  # required: tools/python-deps.sh
    tensors = sample()
    tensors.update({f"big{i}": torch.randn(3 << 18) for i in range(5)})  # spans many chunks
    path = str(tmp_path / "gpu.safetensors")
    st.save_file(tensors, path)
    got = sbt.load_safetensors(path, device="cuda", staging_bytes=staging, chunk_bytes=1 << 20)
    want = st.load_file(path, device="cuda")
    assert all(v.is_cuda for v in got.values())
    assert_same({k: v.cpu() for k, v in got.items()}, {k: v.cpu() for k, v in want.items()})
