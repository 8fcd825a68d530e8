# SPDX-License-Identifier: MIT
"""svmbatch.page_cache_residency(): the pages of a file range and how many
the page cache holds (the library's cachestat()/mincore() count, tested
in libsvmbatch/tests/page_cache_test.cpp), with errors as svmbatch.Error."""

import errno
import mmap
import os

import pytest

import svmbatch
from conftest import drop_pages, keeps_pages


def test_page_cache_residency_of_a_file(tmp_path):
    path = str(tmp_path / "f")
    page = mmap.PAGESIZE
    with open(path, "wb") as f:
        f.write(b"\7" * (10 * page + 1))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.read(fd, 11 * page)
        r = svmbatch.page_cache_residency(fd)
        assert (r.resident_pages, r.total_pages, r.page_size) == (11, 11, page)
        assert r.method in ("cachestat", "mincore")
        assert "PageCacheResidency(resident_pages=11" in repr(r)
        r = svmbatch.page_cache_residency(fd, page + 1, 2 * page)
        assert (r.resident_pages, r.total_pages) == (3, 3)
        r = svmbatch.page_cache_residency(fd, offset=100 * page)
        assert (r.resident_pages, r.total_pages) == (0, 0)
        drop_pages(fd)
        r = svmbatch.page_cache_residency(fd, length=0)
        assert r.total_pages == 11
        if not keeps_pages(path):
            assert r.resident_pages < 11
    finally:
        os.close(fd)


def test_page_cache_residency_errors_are_svmbatch_errors(tmp_path):
    r, w = os.pipe()
    os.close(w)
    os.close(r)
    with pytest.raises(svmbatch.Error) as e:
        svmbatch.page_cache_residency(r)
    assert e.value.errno == errno.EBADF and e.value.step == "diagnostics"
    with pytest.raises(TypeError):
        svmbatch.page_cache_residency(0, -1)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(svmbatch.Error) as e:
            svmbatch.page_cache_residency(fd)
        assert e.value.errno == errno.EINVAL
    finally:
        os.close(fd)
