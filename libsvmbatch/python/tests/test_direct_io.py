# SPDX-License-Identifier: MIT
"""Cold reads: io="direct" reads each shard with O_DIRECT into the staging
ring (4096-aligned reads around unaligned tensors, the last one past the
end of the file), io="auto" chooses per shard from its page-cache
residency; both equal safetensors' own loader.  A file system that
refuses O_DIRECT is an error for "direct" and the buffered path for
"auto"."""

import errno
import json
import mmap
import os
import pathlib
import shutil
import struct
import tempfile

import pytest

import safetensors.torch as safetensors_torch  # required: tools/python-deps.sh installs it
import torch  # required: an import failure is a collection error
import svmbatch
import svmbatch.loading as loading
import svmbatch.torch as sbt
from conftest import drop_cache, keeps_pages, needs_cuda, open_fds
from test_safetensors import assert_same, raw_bytes, sample, write_minimal
from test_sharded import three_shards, write_checkpoint

DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
RING = {"staging_bytes": 4 << 20, "chunk_bytes": 1 << 20}


def _direct_works(directory):
    """Whether a file in directory opens and reads with O_DIRECT."""
    fd, path = tempfile.mkstemp(dir=directory, prefix="svmbatch-odirect-")
    try:
        os.write(fd, b"\1" * 5000)
        os.close(fd)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, 8192)
        try:
            return os.preadv(fd, [buf], 0) == 5000
        finally:
            buf.close()
    except OSError:
        return False
    finally:
        os.close(fd)
        os.unlink(path)


_CANDIDATES = [os.environ.get("TMPDIR") or tempfile.gettempdir(), "/var/tmp",
               os.path.join(os.path.dirname(__file__), "..", "..", "..", "build")]


@pytest.fixture(scope="session")
def direct_root():
    """A directory on a file system that reads with O_DIRECT and drops
    clean pages (not tmpfs), probed among TMPDIR, /var/tmp and build/."""
    for d in _CANDIDATES:
        if os.path.isdir(d) and os.access(d, os.W_OK) and not keeps_pages(d) and \
                _direct_works(d):
            root = tempfile.mkdtemp(dir=d, prefix="svmbatch-direct-")
            yield root
            shutil.rmtree(root, ignore_errors=True)
            return
    pytest.skip(f"no directory here reads with O_DIRECT off tmpfs (probed: "
                f"{', '.join(_CANDIDATES)})")


@pytest.fixture
def direct_dir(direct_root, request):
    d = tempfile.mkdtemp(dir=direct_root, prefix=request.node.name[:40] + "-")
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def resident_fraction(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        r = svmbatch.page_cache_residency(fd)
    finally:
        os.close(fd)
    return r.resident_pages / r.total_pages if r.total_pages else 1.0


def write_unaligned(path):
    """A file whose data starts off a 4096 boundary, whose tensors sit at
    odd offsets across several 1 MiB chunks and whose size is no multiple
    of 4096; returns the tensors."""
    g = torch.Generator().manual_seed(11)
    tensors = {
        "a": torch.randint(0, 255, (4097,), dtype=torch.uint8, generator=g),
        "b": torch.randn((3 << 18) + 3, generator=g),  # 3 MiB + 12 bytes
        "c": torch.tensor([1, 2, 3], dtype=torch.int8),
        "d": torch.randn(1000, generator=g).to(torch.float16),
        "e": torch.randint(-9, 9, ((1 << 18) + 1,), dtype=torch.int32, generator=g),
    }
    header = {}
    data = b""
    for name, t in tensors.items():
        b = raw_bytes(t)
        header[name] = {"dtype": {torch.uint8: "U8", torch.float32: "F32", torch.int8: "I8",
                                  torch.float16: "F16", torch.int32: "I32"}[t.dtype],
                        "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8 + 8 * 13)  # an 8-aligned length that is not 4096-aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    size = os.path.getsize(path)
    assert (8 + len(text)) % 4096 and size % 4096, "the layout must be unaligned"
    return tensors


class OpenSpy:
    """Records the flags of every os.open the loader makes."""

    def __init__(self, monkeypatch, fail_direct=None):
        self.direct = []
        self.fail_direct = fail_direct
        real = os.open

        def spy(path, flags, *args, **kwargs):
            if flags & os.O_DIRECT:
                self.direct.append(os.fspath(path))
                if self.fail_direct is not None:
                    raise OSError(self.fail_direct, os.strerror(self.fail_direct), path)
            return real(path, flags, *args, **kwargs)
        monkeypatch.setattr(loading._os, "open", spy)


@pytest.mark.parametrize("io", ["direct", "auto"])
@pytest.mark.parametrize("device", DEVICES)
def test_unaligned_tensors_of_a_cold_file_equal_the_reference(direct_dir, baseline, io,
                                                              device, monkeypatch):
    path = str(direct_dir / "m.safetensors")
    tensors = write_unaligned(path)
    drop_cache(path)
    spy = OpenSpy(monkeypatch)
    got = sbt.load_safetensors(path, device, io=io, threads=3, **RING)
    monkeypatch.undo()
    assert_same(got, safetensors_torch.load_file(path))
    assert_same(got, tensors)
    assert spy.direct == [path], "a cold file is read with O_DIRECT"
    # The iterator, on a cold file again.
    drop_cache(path)
    assert_same(dict(sbt.iter_safetensors(path, device, io=io, threads=2, **RING)), tensors)


@pytest.mark.parametrize("io", ["direct", "auto"])
@pytest.mark.parametrize("device", DEVICES)
def test_a_cold_sharded_checkpoint_equals_the_reference(direct_dir, baseline, io, device):
    shards, tensors = three_shards()
    files = write_checkpoint(direct_dir, shards)
    want = {}
    for f in files:
        want.update(safetensors_torch.load_file(f))
    drop_cache(*files)
    assert_same(sbt.load_safetensors(direct_dir, device, io=io, threads=3, **RING), want)
    drop_cache(*files)
    pairs = list(sbt.iter_safetensors(direct_dir, device, io=io, **RING))
    assert [n for n, _ in pairs] == [n for shard in shards for n in shard]
    assert_same(dict(pairs), tensors)
    # Only some tensors: runs with holes between them, each widened to
    # 4096 bytes on its own.
    drop_cache(*files)
    some = {"big1", "ids", "empty", "scalar", "mask", "layer.0.w"}
    assert_same(sbt.load_safetensors(direct_dir, device, io=io, names=some, **RING),
                {k: tensors[k] for k in some})
    drop_cache(*files)
    got = dict(sbt.iter_safetensors(direct_dir, device, io=io, names=lambda n: "big" in n,
                                    **RING))
    assert_same(got, {k: v for k, v in tensors.items() if "big" in k})


@pytest.mark.parametrize("chunk_mib", [1, 2])
def test_direct_reads_every_byte_once_whatever_the_ring(direct_dir, baseline, chunk_mib):
    path = str(direct_dir / "m.safetensors")
    tensors = write_unaligned(path)
    for staging in (2, 3, 8):
        drop_cache(path)
        got = sbt.load_safetensors(path, io="direct", staging_bytes=(staging * chunk_mib) << 20,
                                   chunk_bytes=chunk_mib << 20, threads=2)
        assert_same(got, tensors)


def test_auto_reads_a_cached_file_buffered(direct_dir, baseline, monkeypatch):
    path = str(direct_dir / "m.safetensors")
    tensors = write_unaligned(path)
    with open(path, "rb") as f:
        f.read()  # every page cached
    assert resident_fraction(path) == 1.0
    spy = OpenSpy(monkeypatch)
    assert_same(sbt.load_safetensors(path, io="auto", **RING), tensors)
    assert_same(sbt.load_safetensors(path, io="buffered", **RING), tensors)
    assert spy.direct == []


def test_auto_reads_the_cold_shards_direct_and_the_cached_buffered(direct_dir, baseline,
                                                                    monkeypatch):
    shards, tensors = three_shards()
    files = write_checkpoint(direct_dir, shards)
    drop_cache(*files)
    with open(files[1], "rb") as f:
        f.read()
    if resident_fraction(files[0]) >= 0.5:
        pytest.skip(f"{files[0]}: DONTNEED left {resident_fraction(files[0]):.0%} cached")
    spy = OpenSpy(monkeypatch)
    assert_same(sbt.load_safetensors(direct_dir, io="auto", **RING), tensors)
    assert spy.direct == [files[0], files[2]]


def _tmpfs_dir():
    return "/dev/shm" if os.path.isdir("/dev/shm") and keeps_pages("/dev/shm") else None


def test_a_file_system_without_o_direct(baseline):
    shm = _tmpfs_dir()
    if shm is None:
        pytest.skip("no tmpfs at /dev/shm")
    if _direct_works(shm):
        pytest.skip(f"{shm} (tmpfs) opens files with O_DIRECT on this kernel "
                    f"({os.uname().release}; tmpfs takes it since 6.6): the refusal is "
                    "tested by test_o_direct_refused_is_an_error_for_direct_only")
    d = tempfile.mkdtemp(dir=shm, prefix="svmbatch-nodirect-")
    try:
        path = os.path.join(d, "m.safetensors")
        write_minimal(path, sample())
        with pytest.raises(svmbatch.Error) as e:
            sbt.load_safetensors(path, io="direct")
        assert e.value.errno == errno.EINVAL and path in str(e.value)
        assert_same(sbt.load_safetensors(path, io="auto"), safetensors_torch.load_file(path))
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("device", DEVICES)
def test_o_direct_refused_is_an_error_for_direct_only(tmp_path, baseline, device, monkeypatch):
    """As tmpfs before 6.6 does: open(O_DIRECT) fails with EINVAL."""
    shards, tensors = three_shards()
    files = write_checkpoint(tmp_path, shards)
    spy = OpenSpy(monkeypatch, fail_direct=errno.EINVAL)
    with pytest.raises(svmbatch.Error) as e:
        sbt.load_safetensors(tmp_path, device, io="direct", **RING)
    assert e.value.errno == errno.EINVAL and e.value.step == "io"
    assert files[0] in str(e.value) and "O_DIRECT" in str(e.value)
    with pytest.raises(svmbatch.Error):
        next(sbt.iter_safetensors(tmp_path, device, io="direct", **RING))
    # auto falls back to buffered reads of the shards it would read direct.
    monkeypatch.setattr(loading, "_cold", lambda fd, header: True)
    spy.direct.clear()
    assert_same(sbt.load_safetensors(tmp_path, device, io="auto", **RING), tensors)
    assert spy.direct == files
    # Any other errno is an error for auto too.
    spy.fail_direct = errno.EACCES
    with pytest.raises(PermissionError):
        sbt.load_safetensors(tmp_path, device, io="auto", **RING)


def test_a_short_read_that_misses_wanted_bytes_is_enodata(direct_dir, baseline, monkeypatch):
    """A file cut short after its header was read: the O_DIRECT read stops
    at the new end, before bytes a tensor needs: ENODATA (the file ended
    first, as for a buffered read), naming the file and the tensor."""
    path = str(direct_dir / "m.safetensors")
    write_unaligned(path)
    real = loading._open_shards

    def then_truncate(checkpoint):
        shards = real(checkpoint)
        os.truncate(path, os.path.getsize(path) - 5000)
        return shards
    monkeypatch.setattr(loading, "_open_shards", then_truncate)
    with pytest.raises(svmbatch.Error) as e:
        sbt.load_safetensors(path, io="direct", **RING)
    assert e.value.errno == errno.ENODATA and path in str(e.value)
    assert "reading tensor 'e'" in str(e.value)


def test_io_must_be_one_of_three(tmp_path, baseline):
    write_minimal(tmp_path / "m.safetensors", sample())
    for bad in ("Direct", "odirect", "", None, 1):
        with pytest.raises(ValueError, match="auto"):
            sbt.load_safetensors(tmp_path / "m.safetensors", io=bad)
        with pytest.raises(ValueError, match="auto"):
            next(sbt.iter_safetensors(tmp_path / "m.safetensors", io=bad))
    with pytest.raises(ValueError, match="staged=False"):
        sbt.load_safetensors(tmp_path / "m.safetensors", io="direct", staged=False)


def test_staged_false_reads_buffered_even_when_cold(direct_dir, baseline, monkeypatch):
    path = str(direct_dir / "m.safetensors")
    tensors = write_unaligned(path)
    drop_cache(path)
    spy = OpenSpy(monkeypatch)
    assert_same(sbt.load_safetensors(path, staged=False, io="auto"), tensors)
    assert spy.direct == []


def test_no_fd_is_left_open_on_any_path(direct_dir, monkeypatch):
    before = open_fds()
    shards, tensors = three_shards()
    write_checkpoint(direct_dir, shards)
    drop_cache(*map(str, direct_dir.glob("*.safetensors")))
    sbt.load_safetensors(direct_dir, io="direct", **RING)
    it = sbt.iter_safetensors(direct_dir, io="direct", **RING)
    next(it)
    it.close()
    with pytest.raises(KeyError):
        sbt.load_safetensors(direct_dir, io="direct", names=["nope"])
    OpenSpy(monkeypatch, fail_direct=errno.EINVAL)
    with pytest.raises(svmbatch.Error):
        sbt.load_safetensors(direct_dir, io="direct")
    monkeypatch.undo()
    sbt.release_staging()
    assert open_fds() == before
