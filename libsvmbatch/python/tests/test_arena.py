# SPDX-License-Identifier: MIT
"""svmbatch.torch.Arena: exact-size pinned memory, tensors carved with no
driver call, blocks back when tensors die."""

import errno
import gc
import mmap
import os
import resource
import subprocess
import sys
import threading

import pytest

# torch is required (make check: Debian's python3-torch): an import
# failure is a collection error, never a skip of the whole file.
import torch  # noqa: E402
import svmbatch  # noqa: E402
import svmbatch.torch as sbt  # noqa: E402
from conftest import has_cuda, needs_cuda  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_carved_tensors_have_shape_dtype_and_arena_memory(dtype):
    with sbt.Arena(4 << 20, huge_pages=False, cuda=False) as arena:
        t = arena.empty((7, 9), dtype)
        assert t.shape == (7, 9) and t.dtype == dtype and t.is_contiguous()
        base = arena.base_address
        assert base <= t.data_ptr() < base + arena.capacity
        assert t.data_ptr() % 256 == 0
        t.fill_(1)
        assert bool((t == 1).all())
        like = arena.empty_like(t)
        assert like.shape == t.shape and like.dtype == dtype


def test_memory_returns_when_the_tensor_dies():
    with sbt.Arena(1 << 20, cuda=False) as arena:
        assert arena.capacity == 1 << 20
        a = arena.empty(1000, torch.float32)
        b = arena.empty((10, 10), torch.int64)
        assert arena.live_blocks == 2
        assert arena.used == arena.rounded(4000) + arena.rounded(800)
        view = a[10:20]
        del a
        gc.collect()
        assert arena.live_blocks == 2, "a view keeps the block"
        del view, b
        assert arena.live_blocks == 0 and arena.used == 0
        assert arena.largest_free == 1 << 20, "the free blocks coalesced"


def test_exhaustion_and_fragmentation_are_clear_errors():
    with sbt.Arena(1 << 20, huge_pages=False, cuda=False) as arena:
        with pytest.raises(svmbatch.ArenaFullError) as e:
            arena.empty(2 << 20, torch.uint8)
        assert not e.value.fragmented and "arena full" in str(e.value)
        blocks = [arena.empty(64 << 10, torch.uint8) for _ in range(16)]
        with pytest.raises(MemoryError):
            arena.empty(1, torch.uint8)
        del blocks[::2]  # every other 64 KiB block free: 512 KiB, in pieces
        with pytest.raises(svmbatch.ArenaFullError) as e:
            arena.empty(128 << 10, torch.uint8)
        assert e.value.fragmented and "fragmented" in str(e.value)
        assert e.value.largest_free == 64 << 10
        ok = arena.empty(64 << 10, torch.uint8)  # still serves what fits
        assert ok.numel() == 64 << 10


def test_the_arena_outlives_close_while_tensors_live(baseline):
    arena = sbt.Arena(2 << 20, cuda=False)
    t = arena.empty(1024, torch.float32)
    t.fill_(3)
    arena.close()
    with pytest.raises(ValueError, match="closed"):
        arena.empty(1, torch.uint8)
    assert float(t.sum()) == 3 * 1024, "the memory is still mapped"
    del t


def test_blocks_freed_from_many_threads():
    with sbt.Arena(8 << 20, cuda=False) as arena:
        tensors = [arena.empty(4096, torch.uint8) for _ in range(512)]
        chunks = [tensors[i::8] for i in range(8)]
        del tensors

        def drop(chunk):
            chunk.clear()

        threads = [threading.Thread(target=drop, args=(c,)) for c in chunks]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        del chunks
        assert arena.live_blocks == 0 and arena.used == 0


@pytest.mark.parametrize("huge_pages,kind", [(True, "thp"), ("thp", "thp"), (False, "none")])
def test_page_kinds(huge_pages, kind):
    with sbt.Arena(3 << 20, huge_pages=huge_pages, cuda=False) as arena:
        assert arena.huge_pages == kind
        assert arena.capacity == 3 << 20
        if kind == "thp":
            assert arena.base_address % (2 << 20) == 0
            assert arena.mapped_bytes == 4 << 20


def test_hugetlb_without_reserved_pages_is_a_clean_error(baseline):
    with open("/proc/sys/vm/nr_hugepages") as f:
        reserved = int(f.read())
    if reserved:
        with sbt.Arena(2 << 20, huge_pages="hugetlb", cuda=False) as arena:
            assert arena.huge_pages == "hugetlb"
        return
    with pytest.raises(svmbatch.Error) as e:
        sbt.Arena(2 << 20, huge_pages="hugetlb", cuda=False)
    assert e.value.errno == errno.ENOMEM and "hugetlb" in str(e.value)


def test_userspace_mode_is_not_held_to_the_memlock_limit():
    """Userspace mode pins nothing itself, and the GPU drivers that pin
    there charge no memlock limit: the Arena's memlock check (kernel mode,
    tested in the guests) lets an arena over RLIMIT_MEMLOCK through there,
    in a process without CAP_IPC_LOCK too."""
    page = mmap.PAGESIZE
    code = ("import svmbatch\n"
            "ctx = svmbatch.Context(svmbatch.Mode.Userspace)\n"
            f"a = svmbatch.Arena({64 * page}, huge_pages=False, context=ctx)\n"
            "cap = [l for l in open('/proc/self/status') if l.startswith('CapEff:')]\n"
            "print(a.mapped_bytes, int(cap[0].split()[1], 16))\n")

    def limited_without_cap_ipc_lock():
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (page, page))
        if os.geteuid() == 0:  # root gives its capabilities up with its uid
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         preexec_fn=limited_without_cap_ipc_lock, check=False)
    assert out.returncode == 0, out.stderr
    mapped, cap_eff = (int(w) for w in out.stdout.split())
    assert mapped == 64 * page
    assert not cap_eff & (1 << 14), "CAP_IPC_LOCK still effective"


def test_numa_binding(baseline):
    with sbt.Arena(2 << 20, numa_node=0, cuda=False) as arena:
        assert arena.numa_node == 0
    with pytest.raises(svmbatch.Error) as e:
        sbt.Arena(2 << 20, numa_node=1000, cuda=False)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(ValueError):
        sbt.Arena(2 << 20, numa_node=-1, cuda=False)
    with pytest.raises(ValueError):
        sbt.Arena(2 << 20, huge_pages="giant", cuda=False)


def test_arena_memory_is_registered_for_io(tmp_path):
    data = os.urandom(1 << 20)
    path = tmp_path / "data"
    path.write_bytes(data)
    with sbt.Arena(4 << 20, cuda=False) as arena:
        t = arena.empty(1 << 20, torch.uint8)
        fd = os.open(path, os.O_RDONLY)
        with svmbatch.Reader(arena.registration) as reader:
            off = t.data_ptr() - arena.base_address
            svmbatch.check(reader.read([(fd, 0, 1 << 20, 0, off)]))
        os.close(fd)
        assert bytes(t.numpy()) == data


@needs_cuda
def test_arena_tensors_are_pinned_for_cuda():
    with sbt.Arena(64 << 20) as arena:
        assert arena.cuda
        t = arena.empty((1024, 1024), torch.float32)
        t.copy_(torch.randn(1024, 1024))
        assert t.is_pinned()
        g = t.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        assert torch.equal(g.cpu(), t)


@pytest.mark.parametrize("size", [(6, 10), ((6, 10),), ([6, 10],), (torch.Size([6, 10]),),
                                  (60,), ((),)], ids=str)
def test_empty_takes_what_torch_empty_takes(size):
    with sbt.Arena(4 << 20, huge_pages=False, cuda=False) as arena:
        for kwargs in ({}, {"dtype": torch.float16}, {"dtype": torch.bool, "device": "cpu"},
                       {"dtype": torch.float64, "device": torch.device("cpu"),
                        "layout": torch.strided, "requires_grad": True}):
            want = torch.empty(*size, **kwargs)
            got = arena.empty(*size, **kwargs)
            assert (got.shape, got.dtype, got.device, got.stride(), got.requires_grad) == \
                (want.shape, want.dtype, want.device, want.stride(), want.requires_grad)
            assert arena.base_address <= got.data_ptr() < arena.base_address + arena.capacity


@pytest.mark.parametrize("fmt,shape", [(torch.channels_last, (2, 3, 4, 5)),
                                       (torch.channels_last_3d, (2, 3, 4, 5, 6)),
                                       (torch.contiguous_format, (2, 3, 4, 5))], ids=str)
def test_memory_formats_and_empty_like(fmt, shape):
    with sbt.Arena(4 << 20, huge_pages=False, cuda=False) as arena:
        want = torch.empty(shape, memory_format=fmt)
        got = arena.empty(shape, memory_format=fmt)
        assert got.shape == want.shape and got.stride() == want.stride()
        like = arena.empty_like(got)
        assert like.stride() == torch.empty_like(want).stride()
        like = arena.empty_like(got, dtype=torch.int16, memory_format=torch.contiguous_format)
        assert like.dtype == torch.int16 and like.is_contiguous() and like.device == got.device
        assert arena.empty_like(got, requires_grad=True).requires_grad


def test_empty_refuses_what_it_cannot_carve():
    with sbt.Arena(1 << 20, huge_pages=False, cuda=False) as arena:
        with pytest.raises(TypeError):
            arena.empty()
        with pytest.raises(TypeError):
            arena.empty(2.5)
        with pytest.raises(TypeError, match="twice"):
            arena.empty(4, torch.int8, dtype=torch.int8)
        with pytest.raises(ValueError, match="strided"):
            arena.empty(4, layout=torch.sparse_coo)
        with pytest.raises(ValueError, match="dimensions"):
            arena.empty(4, memory_format=torch.channels_last)
        with pytest.raises(svmbatch.Error) as e:
            arena.empty(4, device="meta")
        assert e.value.errno == errno.EINVAL and e.value.step == "arena"
        assert arena.live_blocks == 0


@pytest.mark.skipif(has_cuda(), reason="torch has a CUDA device here: only a missing one is "
                    "tested")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda", 1), 0], ids=str)
def test_cuda_where_torch_has_none_is_an_svmbatch_error(device, baseline):
    with sbt.Arena(1 << 20, huge_pages=False) as arena:
        assert not arena.cuda and arena.cuda_device is None
        with pytest.raises(svmbatch.Error) as e:
            arena.empty(4, device=device)
        assert e.value.errno == errno.ENODEV and e.value.step == "gpu-open"
        assert "CUDA is absent" in str(e.value)
        with pytest.raises(svmbatch.Error) as e:
            arena.empty(4, pin_memory=True)
        assert e.value.errno == errno.ENODEV and arena.live_blocks == 0
    with pytest.raises(svmbatch.Error) as e:
        sbt.Arena(1 << 20, cuda=True)
    assert e.value.errno == errno.ENODEV and e.value.step == "gpu-open"


@needs_cuda
def test_a_cuda_device_gives_the_gpu_view_of_the_block():
    import ctypes
    with sbt.Arena(8 << 20) as arena:
        assert arena.cuda and arena.cuda_device == torch.device("cuda", 0)
        host = arena.empty(4, 256, device="cpu", pin_memory=True)
        assert host.is_pinned()
        g = arena.empty(1024, 1024, dtype=torch.int32, device="cuda")
        assert g.device == arena.cuda_device and arena.live_blocks == 2
        offset = g.data_ptr() - arena.gpu_base_address
        assert 0 <= offset < arena.capacity
        g.fill_(0x01020304)
        torch.cuda.synchronize()
        data = ctypes.string_at(arena.base_address + offset, 16)
        assert data == bytes.fromhex("04030201") * 4, "the GPU wrote the arena's memory"
        like = arena.empty_like(g, dtype=torch.float16)
        assert like.device == g.device and like.dtype == torch.float16
        del g, like, host
        gc.collect()
        assert arena.live_blocks == 0
        with pytest.raises(svmbatch.Error) as e:
            arena.empty(4, device=f"cuda:{torch.cuda.device_count()}")
        assert e.value.errno == errno.ENODEV
    with sbt.Arena(1 << 20, cuda=False) as arena:
        with pytest.raises(svmbatch.Error) as e:
            arena.empty(4, device="cuda")
        assert e.value.errno == errno.EINVAL and e.value.step == "gpu-map"
        assert "not mapped" in str(e.value)


def test_an_async_arena_keeps_each_block_inside_one_chunk(baseline):
    page = mmap.PAGESIZE
    sync = sbt.Arena(64 * page, huge_pages=False, cuda=False)
    arena = sbt.Arena(64 * page, huge_pages=False, cuda=False, wait=False,
                      chunk_bytes=4 * page)
    assert sync.ready() and sync.chunks == 1
    # Chunks of 4, 8 and 16 pages, then 32 with the 4-page tail; no block
    # crosses a chunk's end (a copy cannot read across two registrations).
    assert arena.chunks == 4 and arena.chunk_bytes == 4 * page
    ends = [4 * page, 12 * page, 28 * page, 64 * page]
    sizes = [1, 3000, 5 * page, 100, 2 * page + 1, 17 * page]
    a = [sync.empty(n, dtype=torch.uint8) for n in sizes]
    b = [arena.empty(n, dtype=torch.uint8) for n in sizes]
    for y, n in zip(b, sizes):
        off = y.data_ptr() - arena.base_address
        assert off + n <= min(e for e in ends if e > off), (off, n)
        y.fill_(7)
        assert int(y.sum()) == 7 * y.numel()
    with pytest.raises(svmbatch.ArenaFullError, match="the largest chunk is"):
        arena.empty(37 * page, dtype=torch.uint8)
    a.append(sync.empty(37 * page, dtype=torch.uint8))  # one chunk
    arena.wait()
    assert arena.ready()
    arena.wait()  # again: no error, nothing to wait for
    with pytest.raises(svmbatch.Error) as e:
        arena.registration  # one per chunk
    assert e.value.errno == errno.EINVAL
    del a, b
    sync.close()
    arena.close()


def test_closing_an_async_arena_while_it_is_prepared_leaves_nothing(baseline):
    for _ in range(3):
        arena = sbt.Arena(256 << 20, huge_pages=False, cuda=False, wait=False,
                          chunk_bytes=1 << 20)
        t = arena.empty(1000, dtype=torch.float32)  # waits for chunk 0 only
        t.fill_(1)
        arena.close()
        assert float(t.sum()) == 1000
        del t  # the last reference: preparation stops, every chunk undone


def test_threads_carve_an_async_arena_while_it_is_prepared():
    page = mmap.PAGESIZE
    arena = sbt.Arena(256 << 20, huge_pages=False, cuda=False, wait=False,
                      chunk_bytes=256 * page, threads=1)
    base, end = arena.base_address, arena.base_address + arena.capacity
    bad, early = [], []

    def carve(k):
        mine = []
        for i in range(40):
            t = arena.empty(1 + (i * 7919 + k) % (64 * page), dtype=torch.uint8)
            if not arena.ready():
                early.append(k)
            if not base <= t.data_ptr() < end or t.data_ptr() % 256:
                bad.append(t.data_ptr())
            t.fill_(k + 1)
            mine.append(t)
        for t in mine:
            if int((t != k + 1).sum()):
                bad.append(t.data_ptr())

    threads = [threading.Thread(target=carve, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    arena.wait()
    assert not bad
    assert early, "no tensor was carved while the arena was being prepared"
    assert arena.live_blocks == 0
    arena.close()
