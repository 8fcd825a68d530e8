# SPDX-License-Identifier: MIT
"""svmbatch.torch.pin: one registration of many tensors' storages."""

import errno
import mmap
import warnings

import pytest

# torch is required (make check: Debian's python3-torch): an import
# failure is a collection error, never a skip of the whole file.
import torch  # noqa: E402
import svmbatch  # noqa: E402
import svmbatch.torch as sbt  # noqa: E402
from conftest import (has_cuda, needs_cuda, page_ranges, registered_ranges,  # noqa: E402
                      resident_pages)


def test_pin_registers_every_storage_once(baseline):
    tensors = [torch.empty(16384) for _ in range(200)]
    views = [tensors[0][:10], tensors[0][5:]]  # the same storage again
    with sbt.pin(tensors + views) as pinned:
        reg = pinned.registration
        assert len(reg) == 200, "one buffer per storage"
        # Wherever the allocator put them: the ranges their pages make.
        expected = page_ranges((t.data_ptr(), t.numel() * t.element_size()) for t in tensors)
        assert registered_ranges(reg) == expected
        assert pinned.ranges == len(expected)
        spans = {b[0] for b in reg.buffers}
        assert all(t.data_ptr() in spans for t in tensors)
        if not has_cuda():
            assert not pinned.cuda and "CUDA is absent" in pinned.cuda_reason
    assert reg.closed


def test_pin_merges_touching_storages(baseline):
    # Storages of our own layout, in pages of one mapping: [0, 2), [2, 3)
    # and [3, 5) touch (one range); page 5 is a gap; [6, 8) and the 100
    # bytes at 8 share their pages' edge (one range); the two pieces of
    # page 10 overlap once rounded to pages (one range).  7 storages, 3
    # ranges.
    page = mmap.PAGESIZE
    mem = mmap.mmap(-1, 12 * page)
    layout = [(0, 2 * page), (2 * page, page), (3 * page, 2 * page), (6 * page, 2 * page),
              (8 * page, 100), (10 * page + 200, 100), (10 * page + 1000, 1000)]
    storages = [torch.frombuffer(mem, dtype=torch.uint8, count=n, offset=off)
                for off, n in layout]
    base = storages[0].data_ptr()
    assert [t.data_ptr() - base for t in storages] == [off for off, _ in layout]
    with sbt.pin(storages) as pinned:
        assert len(pinned.registration) == 7, "one buffer per storage"
        assert pinned.ranges == 3
        assert registered_ranges(pinned.registration) == \
            [(base, 5 * page), (base + 6 * page, 3 * page), (base + 10 * page, page)]
        assert page_ranges((base + off, n) for off, n in layout) == \
            registered_ranges(pinned.registration)
    del storages


def test_pin_keeps_the_storages_alive(baseline):
    t = torch.ones(100000)
    addr = t.data_ptr()
    pinned = sbt.pin([t])
    del t
    assert pinned.tensors[0].data_ptr() == addr
    assert float(pinned.tensors[0].sum()) == 100000.0
    pinned.close()


def test_pin_failure_names_the_tensor_and_leaves_nothing(baseline):
    ro = mmap.mmap(-1, 2 * mmap.PAGESIZE, prot=mmap.PROT_READ)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "non-writable buffer"
        read_only = torch.frombuffer(ro, dtype=torch.uint8)
    good = [torch.empty(1000) for _ in range(3)]
    with pytest.raises(svmbatch.Error) as e:
        sbt.pin(good + [read_only])
    assert e.value.errno == errno.EFAULT
    assert e.value.buffer_index == 3 and "tensor 3" in str(e.value)
    del read_only


def test_pin_leaves_faulting_in_to_cuda_when_it_maps(monkeypatch, baseline):
    """Mapped for CUDA, the pages are faulted in by CUDA's pinning, not
    first by the registration; without CUDA they are (userspace mode)."""
    import svmbatch.pinning as pinning

    class Mapping:
        closed = False

        def close(self):
            self.closed = True

    ctx = svmbatch.Context()
    memory = [mmap.mmap(-1, 4 * mmap.PAGESIZE) for _ in range(2)]
    tensors = [torch.frombuffer(m, dtype=torch.uint8) for m in memory]
    want = 4 if ctx.mode == svmbatch.Mode.Kernel else 0  # kernel mode pins
    with sbt.pin(tensors[:1], context=ctx, cuda=False):
        assert resident_pages(tensors[0].data_ptr(), 4 * mmap.PAGESIZE) == 4
    monkeypatch.setattr(pinning._common, "resolve_cuda", lambda cuda: ("backend", None))
    monkeypatch.setattr(pinning._svmbatch, "map", lambda registration, backend: Mapping())
    with sbt.pin(tensors[1:], context=ctx) as pinned:
        assert pinned.cuda
        assert resident_pages(tensors[1].data_ptr(), 4 * mmap.PAGESIZE) == want
    del tensors, pinned
    for m in memory:
        m.close()


def test_pin_refuses_what_is_not_a_cpu_tensor():
    with pytest.raises(ValueError, match="tensor 1: meta"):
        sbt.pin([torch.empty(4), torch.empty(4, device="meta")])
    with pytest.raises(TypeError, match="tensor 0"):
        sbt.pin([bytearray(10)])


def test_pin_without_cuda_when_required_is_enodev():
    if has_cuda():
        pytest.skip("CUDA is present")
    with pytest.raises(svmbatch.Error) as e:
        sbt.pin([torch.empty(4)], cuda=True)
    assert e.value.errno == errno.ENODEV


def test_pinned_tensors_feed_the_reader(tmp_path, baseline):
    data = torch.arange(1 << 18, dtype=torch.int32)
    path = tmp_path / "ints"
    path.write_bytes(data.numpy().tobytes())
    dst = [torch.zeros(1 << 16, dtype=torch.int32) for _ in range(4)]
    import os
    fd = os.open(path, os.O_RDONLY)
    with sbt.pin(dst, cuda=False) as pinned, svmbatch.Reader(pinned.registration) as reader:
        svmbatch.check(reader.read([(fd, i << 18, 1 << 18, i) for i in range(4)]))
    os.close(fd)
    assert torch.equal(torch.cat(dst), data)


@needs_cuda
def test_pinned_tensors_are_pinned_for_cuda(baseline):
    tensors = [torch.randn(1 << 16) for _ in range(64)]
    assert not tensors[0].is_pinned()
    with sbt.pin(tensors) as pinned:
        assert pinned.cuda and pinned.cuda_reason is None
        assert all(t.is_pinned() for t in tensors)
        gpu = [t.to("cuda", non_blocking=True) for t in tensors]
        torch.cuda.synchronize()
        assert all(torch.equal(g.cpu(), t) for g, t in zip(gpu, tensors))
    assert not tensors[0].is_pinned()


@needs_cuda
def test_copy_from_pinned_tensor_is_asynchronous():
    t = torch.randn(64 << 20 >> 2)
    with sbt.pin([t]):
        stream = torch.cuda.current_stream()
        torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU time queued first
        g = t.to("cuda", non_blocking=True)
        # The copy is queued behind the sleep: to() returned without it.
        assert not stream.query()
        stream.synchronize()
        assert torch.equal(g.cpu(), t)
