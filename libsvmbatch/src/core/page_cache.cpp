// SPDX-License-Identifier: MIT
// page_cache_residency(): cachestat() where the kernel has it, else
// mincore() over a shared read-only mapping of the file, a window at a
// time so that a huge file never needs a huge mapping or vector.
#include <svmbatch/error.hpp>
#include <svmbatch/page_cache.hpp>

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <string>
#include <vector>

#include "core/page_cache_count.hpp"

namespace svmbatch {

namespace {

/*
 * cachestat()'s uapi structs (<linux/mman.h> since 6.5), mirrored: the
 * headers of older distributions lack them, and one definition keeps one
 * code path on every set of headers.  The layout is the ABI.
 */
struct CachestatRange {
	std::uint64_t off;
	std::uint64_t len; /* 0: to the end of the file */
};

struct Cachestat {
	std::uint64_t nr_cache;
	std::uint64_t nr_dirty;
	std::uint64_t nr_writeback;
	std::uint64_t nr_evicted;
	std::uint64_t nr_recently_evicted;
};

static_assert(sizeof(CachestatRange) == 16 && offsetof(CachestatRange, len) == 8);
static_assert(sizeof(Cachestat) == 40 && offsetof(Cachestat, nr_recently_evicted) == 32);

#if defined(__NR_cachestat)
constexpr long cachestat_nr = __NR_cachestat;
#elif defined(__alpha__)
constexpr long cachestat_nr = 561;
#else
constexpr long cachestat_nr = 451; /* the number in every other architecture's table */
#endif

std::string fd_name(int fd)
{
	return "page-cache residency of fd " + std::to_string(fd);
}

/* The bytes of a query inside the file, and the pages that hold them. */
struct FileSpan {
	std::uint64_t offset = 0;
	std::uint64_t bytes = 0; /* 0: nothing of the range is in the file */
	std::uint64_t page_size = 0;

	std::uint64_t first_page() const { return offset / page_size; }
	std::uint64_t pages() const
	{
		return bytes ? (offset + bytes - 1) / page_size - first_page() + 1 : 0;
	}
};

FileSpan file_span(int fd, std::uint64_t offset, std::uint64_t length)
{
	struct stat st {};

	if (::fstat(fd, &st) != 0)
		throw Error(errno, Step::Diagnostics, fd_name(fd) + ": fstat");
	if (!S_ISREG(st.st_mode))
		throw Error(EINVAL, Step::Diagnostics, fd_name(fd) + ": not a regular file");
	FileSpan s;
	s.offset = offset;
	s.page_size = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
	const auto size = static_cast<std::uint64_t>(st.st_size);
	if (offset < size)
		s.bytes = length == 0 || length > size - offset ? size - offset : length;
	return s;
}

/* A shared read-only mapping of part of a file, unmapped on destruction. */
class FileWindow {
public:
	FileWindow(int fd, std::uint64_t offset, std::size_t bytes) : bytes_(bytes)
	{
		addr_ = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd,
			       static_cast<off_t>(offset));
		if (addr_ == MAP_FAILED)
			throw Error(errno, Step::Diagnostics,
				    fd_name(fd) + ": mmap at " + std::to_string(offset));
	}
	~FileWindow() { ::munmap(addr_, bytes_); }
	FileWindow(const FileWindow &) = delete;
	FileWindow &operator=(const FileWindow &) = delete;
	FileWindow(FileWindow &&) = delete;
	FileWindow &operator=(FileWindow &&) = delete;
	void *addr() const { return addr_; }

private:
	void *addr_ = nullptr;
	std::size_t bytes_;
};

} // namespace

namespace detail {

std::optional<PageCacheResidency> residency_by_cachestat(int fd, std::uint64_t offset,
							 std::uint64_t length)
{
	const FileSpan s = file_span(fd, offset, length);
	/* An empty range still asks (one page), so that the method is known. */
	CachestatRange range{s.offset, s.bytes ? s.bytes : 1};
	Cachestat stat{};

	if (::syscall(cachestat_nr, fd, &range, &stat, 0) != 0) {
		const int err = errno;

		if (err == ENOSYS || err == EOPNOTSUPP || err == EPERM)
			return std::nullopt;
		throw Error(err, Step::Diagnostics, fd_name(fd) + ": cachestat");
	}
	PageCacheResidency r;
	r.total_pages = s.pages();
	/* Pages of a file truncated meanwhile are not counted twice. */
	r.resident_pages = std::min(stat.nr_cache, r.total_pages);
	r.page_size = s.page_size;
	r.method = ResidencyMethod::Cachestat;
	return r;
}

PageCacheResidency residency_by_mincore(int fd, std::uint64_t offset, std::uint64_t length,
					std::uint64_t window_pages)
{
	const FileSpan s = file_span(fd, offset, length);
	PageCacheResidency r;

	r.total_pages = s.pages();
	r.page_size = s.page_size;
	r.method = ResidencyMethod::Mincore;
	window_pages = std::max<std::uint64_t>(window_pages, 1);
	std::vector<unsigned char> present(std::min(r.total_pages, window_pages));
	for (std::uint64_t done = 0; done < r.total_pages;) {
		const std::uint64_t n = std::min(window_pages, r.total_pages - done);
		const std::uint64_t at = (s.first_page() + done) * s.page_size;
		const auto bytes = static_cast<std::size_t>(n * s.page_size);
		FileWindow window(fd, at, bytes);

		if (::mincore(window.addr(), bytes, present.data()) != 0)
			throw Error(errno, Step::Diagnostics,
				    fd_name(fd) + ": mincore at " + std::to_string(at));
		r.resident_pages += static_cast<std::uint64_t>(
			std::count_if(present.begin(), present.begin() + static_cast<long>(n),
				      [](unsigned char p) { return (p & 1) != 0; }));
		done += n;
	}
	return r;
}

} // namespace detail

const char *residency_method_name(ResidencyMethod method) noexcept
{
	switch (method) {
	case ResidencyMethod::Cachestat:
		return "cachestat";
	case ResidencyMethod::Mincore:
		return "mincore";
	}
	return "unknown";
}

PageCacheResidency page_cache_residency(int fd, std::uint64_t offset, std::uint64_t length)
{
	if (auto r = detail::residency_by_cachestat(fd, offset, length))
		return *r;
	return detail::residency_by_mincore(fd, offset, length);
}

} // namespace svmbatch
