# SPDX-License-Identifier: MIT
"""The plain binding: Context, Registration, buffers in and out through the
buffer protocol and DLPack, Reader/Writer, errors, the CUDA backend's
no-device path.  Needs no GPU; numpy and torch (required by make
check) for the DLPack tests."""

import errno
import mmap
import os

import pytest

import svmbatch
from conftest import page_ranges, registered_ranges, resident_pages


def test_context_reports_its_mode(ctx):
    assert ctx.mode in (svmbatch.Mode.Kernel, svmbatch.Mode.Userspace)
    assert ctx.info.page_size == mmap.PAGESIZE
    assert ctx.info.reason
    assert svmbatch.mode_name(ctx.mode) in ("kernel", "userspace")


def test_register_every_kind_of_buffer(ctx, baseline):
    a = bytearray(10000)
    m = mmap.mmap(-1, 3 * mmap.PAGESIZE)
    ro = bytes(5000)
    raw = mmap.mmap(-1, mmap.PAGESIZE)
    import ctypes
    raw_addr = ctypes.addressof(ctypes.c_char.from_buffer(raw))
    with ctx.register([a, m, ro, (raw_addr, 100)]) as reg:
        assert len(reg) == 4
        bufs = reg.buffers
        assert bufs[0][1] == 10000 and not bufs[0][2]
        assert bufs[1][1] == 3 * mmap.PAGESIZE
        assert bufs[2][2], "bytes are read-only"
        assert bufs[3] == (raw_addr, 100, False)
        # The bytearray and the bytes: wherever Python's allocator put them.
        expected = page_ranges((b[0], b[1]) for b in bufs)
        assert registered_ranges(reg) == expected
        assert reg.pages == sum(n for _, n in expected) // mmap.PAGESIZE
        for i in range(4):
            r, off = reg.location(i)
            assert reg.ranges[r][0] + off == bufs[i][0]
        if ctx.mode == svmbatch.Mode.Kernel:
            assert reg.pinned_pages == reg.pages
        else:
            assert reg.pinned_pages == 0
        del raw_addr
    assert reg.closed
    with pytest.raises(ValueError, match="closed"):
        reg.pages
    with pytest.raises(BufferError):
        m.close()  # the registration object still holds the mmap's buffer
    del reg
    m.close()


def test_registered_buffer_goes_to_frameworks(ctx):
    import numpy as np  # required: Debian's python3-numpy
    a = bytearray(b"\x01\x02\x03\x04" * 1024)
    with ctx.register([a]) as reg:
        view = reg.buffer(0)
        assert view.nbytes == 4096 and view.address == reg.buffers[0][0]
        assert bytes(memoryview(view)[:4]) == b"\x01\x02\x03\x04"
        arr = np.from_dlpack(view)
        assert arr.dtype == np.uint8 and arr.shape == (4096,)
        memoryview(view)[0] = 9
        assert a[0] == 9 and arr[0] == 9, "the same memory, no copy"
        with pytest.raises(IndexError):
            reg.buffer(1)
    # The array keeps the registration object (and the bytearray) alive.
    del reg, view
    assert arr[0] == 9


def test_registered_buffer_to_torch(ctx):
    import torch  # required: Debian's python3-torch
    a = bytearray(64)
    with ctx.register([a]) as reg:
        t = torch.from_dlpack(reg.buffer(0))
        t[:4] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
        assert a[:4] == b"\x01\x02\x03\x04"


def test_torch_tensor_registered_through_dlpack(ctx):
    import torch  # required: Debian's python3-torch
    t = torch.arange(1000, dtype=torch.int32)
    with ctx.register([t]) as reg:
        assert reg.buffers[0][:2] == (t.data_ptr(), 4000)
    with pytest.raises(ValueError, match="buffer 0: .*not contiguous"):
        ctx.register([torch.arange(100).view(10, 10).t()])


def test_bad_buffers_name_their_index(ctx, baseline):
    ok = bytearray(8192)
    with pytest.raises(TypeError, match="buffer 1: "):
        ctx.register([ok, 42])
    with pytest.raises(svmbatch.Error) as e:
        ctx.register([ok, (0, 4096)])
    assert e.value.errno == errno.EINVAL and e.value.buffer_index == 1
    assert e.value.step == "validate"
    unmapped = mmap.mmap(-1, mmap.PAGESIZE)
    import ctypes
    addr = ctypes.addressof(ctypes.c_char.from_buffer(unmapped))
    unmapped.close()
    with pytest.raises(svmbatch.Error) as e:
        ctx.register([ok, ok, (addr, 100)])
    assert e.value.errno == errno.EFAULT and e.value.buffer_index == 2
    assert isinstance(e.value, OSError)


def test_register_without_prefault_checks_but_leaves_the_pages_out(ctx, baseline):
    import ctypes
    fresh = mmap.mmap(-1, 4 * mmap.PAGESIZE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(fresh))
    assert resident_pages(addr, 4 * mmap.PAGESIZE) == 0
    unmapped = mmap.mmap(-1, mmap.PAGESIZE)
    hole = ctypes.addressof(ctypes.c_char.from_buffer(unmapped))
    unmapped.close()
    with pytest.raises(svmbatch.Error) as e:
        ctx.register([(addr, 100), (hole, 100)], prefault=False)
    assert e.value.errno == errno.EFAULT and e.value.buffer_index == 1
    with ctx.register([(addr, 3 * mmap.PAGESIZE)], prefault=False):
        # Kernel mode pins, which faults the pages in.
        want = 3 if ctx.mode == svmbatch.Mode.Kernel else 0
        assert resident_pages(addr, 4 * mmap.PAGESIZE) == want
    with ctx.register([(addr, 3 * mmap.PAGESIZE)]):
        assert resident_pages(addr, 4 * mmap.PAGESIZE) == 3
    fresh.close()


def test_storage_walk_takes_each_storage_once():
    from svmbatch import _svmbatch
    page = mmap.PAGESIZE
    storages = [(page, 10), (page, 20), (0, 0), [2 * page, 5], (page, 15)]
    assert _svmbatch.storage_buffers(storages, True) == (
        [(page, 20, True), (2 * page, 5, True)], [0, 3], [0, 0, None, 1, 0])
    assert _svmbatch.storage_buffers(iter(storages[:1])) == ([(page, 10, False)], [0], [0])
    for bad in ([(page, 1), (page,)], [(page, 1), 5], [(page, 1), (page, 1, 2)],
                [(page, 1), (-1, 1)], [(page, 1), (page, "1")]):
        with pytest.raises(TypeError, match="storage 1: expected"):
            _svmbatch.storage_buffers(bad)
    with pytest.raises(TypeError):
        _svmbatch.storage_buffers(7)


def test_read_only_buffer_is_refused_as_read_target(ctx, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 4096)
    with ctx.register([bytes(4096)]) as reg, svmbatch.Reader(reg, threads=1) as reader:
        fd = os.open(path, os.O_RDONLY)
        try:
            with pytest.raises(svmbatch.Error) as e:
                reader.read([(fd, 0, 4096, 0)])
            assert e.value.errno == errno.EACCES and e.value.buffer_index == 0
        finally:
            os.close(fd)


def test_errno_subclasses():
    cls = svmbatch.error_class(errno.EACCES)
    assert issubclass(cls, svmbatch.Error) and issubclass(cls, PermissionError)
    e = cls(errno.EACCES, "denied", "register", 3, 0)
    assert e.errno == errno.EACCES and e.buffer_index == 3 and e.step == "register"
    assert svmbatch.error_class(errno.EINVAL) is svmbatch.Error


@pytest.mark.parametrize("threads", [1, 4])
def test_reader_and_writer_round_trip(ctx, tmp_path, baseline, threads):
    data = os.urandom(3 << 20)
    src = tmp_path / "src"
    src.write_bytes(data)
    bufs = [bytearray(1 << 20) for _ in range(3)]
    with ctx.register(bufs) as reg:
        fd = os.open(src, os.O_RDONLY)
        with svmbatch.Reader(reg, threads=threads, max_io_bytes=256 << 10) as reader:
            results = reader.read([(fd, i << 20, 1 << 20, i) for i in range(3)])
        os.close(fd)
        assert [r.bytes for r in svmbatch.check(results)] == [1 << 20] * 3
        assert b"".join(bufs) == data
        out = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT, 0o600)
        with svmbatch.Writer(reg, threads=threads, sync=svmbatch.SyncMode.Fdatasync) as w:
            batch = w.start([svmbatch.IoRequest(out, (2 - i) << 20, 1 << 20, i)
                             for i in range(3)])
            svmbatch.check(batch.wait())
            assert batch.done()
            with pytest.raises(ValueError):
                batch.wait()
        os.close(out)
    got = (tmp_path / "dst").read_bytes()
    assert got == data[2 << 20:] + data[1 << 20:2 << 20] + data[:1 << 20]


def test_reader_reports_eof_and_bad_fd(ctx, tmp_path):
    (tmp_path / "short").write_bytes(b"abc")
    buf = bytearray(4096)
    with ctx.register([buf]) as reg, svmbatch.Reader(reg, threads=1) as reader:
        fd = os.open(tmp_path / "short", os.O_RDONLY)
        r = reader.read([(fd, 0, 100, 0), (9999, 0, 10, 0)])
        os.close(fd)
    assert (r[0].err, r[0].bytes) == (errno.ENODATA, 3)
    assert r[1].err == errno.EBADF and not r[1].ok
    with pytest.raises(svmbatch.Error) as e:
        svmbatch.check(r)
    assert e.value.buffer_index == 0 and e.value.errno == errno.ENODATA


def test_reader_options_are_checked(ctx):
    with ctx.register([bytearray(4096)]) as reg:
        with pytest.raises(TypeError, match="unexpected option 'bogus'"):
            svmbatch.Reader(reg, bogus=1)
        with svmbatch.Reader(reg, threads=2, parallelism=svmbatch.Parallelism.AsyncWorkers) as r:
            assert r.parallelism == svmbatch.Parallelism.AsyncWorkers
            assert r.buffer_sharing == svmbatch.BufferSharing.None_


def test_dmabuf_needs_kernel_mode(ctx, baseline):
    with ctx.register([bytearray(8192)]) as reg:
        if ctx.mode == svmbatch.Mode.Kernel:
            with reg.export_dmabuf() as d:
                assert d.size == reg.pages * mmap.PAGESIZE
                assert os.fstat(d.fileno())
            assert d.closed
        else:
            with pytest.raises(svmbatch.Error) as e:
                reg.export_dmabuf()
            assert e.value.errno == errno.EOPNOTSUPP


@pytest.mark.skipif(svmbatch.CudaBackend is None, reason="built without the CUDA backend")
def test_cuda_backend_without_a_driver_is_enodev(baseline):
    with pytest.raises(svmbatch.Error) as e:
        svmbatch.CudaBackend(library="libsvmbatch-no-such-cuda.so.1")
    assert e.value.errno == errno.ENODEV and e.value.step == "gpu-open"
    assert "cuda" in svmbatch.built_backends()


@pytest.mark.skipif(svmbatch.ZeBackend is None, reason="built without the Level Zero backend")
def test_ze_backend_without_a_loader_or_driver_is_enodev(baseline):
    with pytest.raises(svmbatch.Error) as e:
        svmbatch.ZeBackend(library="libsvmbatch-no-such-ze.so.1")
    assert e.value.errno == errno.ENODEV and e.value.step == "gpu-open"
    assert "no Level Zero loader" in str(e.value)
    assert "ze" in svmbatch.built_backends()
    # Debian's loader, where installed: without an Intel GPU, zeInit's
    # answer; with one, a backend on it.
    try:
        ze = svmbatch.ZeBackend()
    except svmbatch.Error as err:
        assert err.errno == errno.ENODEV and err.step == "gpu-open"
        assert "zeInit" in str(err) or "no Level Zero loader" in str(err)
    else:
        assert ze.name == "ze" and ze.library == "libze_loader.so.1"


def test_arena_registration_is_the_arena_s(ctx):
    with svmbatch.Arena(1 << 20, huge_pages=False, context=ctx) as arena:
        reg = arena.registration
        assert reg.buffers[0][0] == arena.base_address
        with pytest.raises(ValueError, match="Arena"):
            reg.close()
