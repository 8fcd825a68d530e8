# SPDX-License-Identifier: MIT
"""svmbatch.ExtentReader from Python, into host memory: what the loaders
call once per load.  Its device copies are tested in C++ against the
fake CUDA driver and on the H200 through the loaders."""

import ctypes
import errno
import os

import pytest

import svmbatch


def pattern(n, seed=7):
    return bytes((i * 2654435761 + seed) >> 13 & 0xFF for i in range(n))


def address(buf):
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.bin"
    want = pattern(3 << 20)
    path.write_bytes(want)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    yield fd, want
    os.close(fd)


def test_extents_land_byte_for_byte_through_a_small_ring(ctx, baseline, data):
    fd, want = data
    out = bytearray(len(want) + 64)
    base = address(out)
    # Adjacent extents (read together), a gap, one out of file order.
    extents = [(fd, 0, 1000, base), (fd, 1000, 300000, base + 1000),
               (fd, 2 << 20, 500000, base + (2 << 20)), (fd, 400000, 1000000, base + 400000)]
    with svmbatch.ExtentReader(ctx, staging_bytes=256 << 10, chunk_bytes=64 << 10,
                               threads=3) as reader:
        results = reader.read(extents)
        assert results == [(0, n, False) for _, _, n, _ in extents]
        for _, off, n, dst in extents:
            assert bytes(out[dst - base:dst - base + n]) == want[off:off + n]
        assert bytes(out[301000:400000]) == bytes(99000), "the gap was not written"
        stats = reader.last_read
        assert stats["bytes_read"] >= sum(n for _, _, n, _ in extents)
        assert stats["reads"] >= stats["bytes_read"] // (64 << 10)
        names = [name for name, _ in reader.setup]
        assert names == ["staging", "register", "ring", "fixed", "reader"]
        assert reader.chunk_bytes == 64 << 10 and reader.chunks == 4
    assert reader.closed


def test_the_end_of_the_file_fails_its_extent_alone(ctx, baseline, data):
    fd, want = data
    out = bytearray(8192)
    base = address(out)
    with svmbatch.ExtentReader(ctx, staging_bytes=256 << 10, chunk_bytes=64 << 10) as reader:
        results = reader.read([(fd, 0, 4096, base), (fd, len(want) - 10, 4096, base + 4096)])
    assert results[0] == (0, 4096, False)
    assert results[1][0] == errno.ENODATA and results[1][1] == 0 and not results[1][2]
    assert bytes(out[:4096]) == want[:4096]


def test_bad_extents_are_refused_with_their_index(ctx, baseline, data):
    fd, _ = data
    out = bytearray(4096)
    with svmbatch.ExtentReader(ctx, staging_bytes=256 << 10, chunk_bytes=64 << 10) as reader:
        with pytest.raises(svmbatch.Error) as e:
            reader.read([(fd, 0, 10, address(out)), (fd, 0, 10, 0)])
        assert e.value.errno == errno.EINVAL and e.value.step == "validate"
        assert e.value.buffer_index == 1
        with pytest.raises(ValueError):
            reader.read([(fd, 0, 10)])
        with pytest.raises(svmbatch.Error) as e:
            reader.read([(fd, 0, 10, address(out))], stream=0)
        assert e.value.errno in (errno.EINVAL, errno.ENOTSUP)
        assert bytes(out) == bytes(4096), "nothing was read"


def test_bad_sizes_are_einval(ctx, baseline):
    with pytest.raises(svmbatch.Error) as e:
        svmbatch.ExtentReader(ctx, chunk_bytes=1000)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(svmbatch.Error) as e:
        svmbatch.ExtentReader(ctx, staging_bytes=4096, chunk_bytes=4096)
    assert e.value.errno == errno.EINVAL
