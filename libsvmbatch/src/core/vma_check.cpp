// SPDX-License-Identifier: MIT
#include "core/vma_check.hpp"

#include <svmbatch/detail/unique_fd.hpp>

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ  22
#define MADV_POPULATE_WRITE 23
#endif

#ifndef PROCMAP_QUERY
/* Linux 6.11's include/uapi/linux/fs.h, for older headers (Debian 12's). */
struct procmap_query {
	__u64 size;
	__u64 query_flags;
	__u64 query_addr;
	__u64 vma_start;
	__u64 vma_end;
	__u64 vma_flags;
	__u64 vma_page_size;
	__u64 vma_offset;
	__u64 inode;
	__u32 dev_major;
	__u32 dev_minor;
	__u32 vma_name_size;
	__u32 build_id_size;
	__u64 vma_name_addr;
	__u64 build_id_addr;
};
#define PROCMAP_QUERY _IOWR('f', 17, struct procmap_query)
#endif

/* The layout of the ABI, whichever header defined it. */
static_assert(sizeof(struct procmap_query) == 104);
static_assert(offsetof(struct procmap_query, inode) == 64);
static_assert(offsetof(struct procmap_query, vma_name_size) == 80);
static_assert(offsetof(struct procmap_query, vma_name_addr) == 88);
static_assert(PROCMAP_QUERY == 0xc0686611);

namespace svmbatch::detail {

namespace {

/* enum procmap_query_flags, the uapi's values. */
constexpr std::uint64_t query_vma_readable = 0x01;
constexpr std::uint64_t query_vma_writable = 0x02;
constexpr std::uint64_t query_vma_shared = 0x08;
constexpr std::uint64_t query_covering_or_next_vma = 0x10;

struct Vma {
	std::uintptr_t start;
	std::uintptr_t end;
	bool read;
	bool write;
	bool needs_dirty_tracking;
};

/*
 * What the module's svmbatch_vma_needs_dirty_tracking() sees, as far as
 * /proc/self/maps tells it: a shared writable mapping of a file whose
 * filesystem writes back.  Files on a block device do; on an anonymous
 * device (major 0) only tmpfs, hugetlbfs and ramfs files (and deleted
 * memfds, whose path cannot be looked up) do not.
 */
bool shared_file_needs_dirty_tracking(unsigned dev_major, unsigned long inode,
				      const std::string &path)
{
	struct statfs fs {};

	if (!inode || path.empty() || path[0] != '/')
		return false;
	if (dev_major)
		return true;
	if (path.ends_with(" (deleted)") || ::statfs(path.c_str(), &fs))
		return false;
	return fs.f_type != TMPFS_MAGIC && fs.f_type != HUGETLBFS_MAGIC && fs.f_type != RAMFS_MAGIC;
}

/* The text of /proc/self/maps, every mapping of the process. */
class MapsText {
public:
	MapsText()
	{
		std::ifstream maps("/proc/self/maps");
		std::string line;

		while (std::getline(maps, line)) {
			std::uintptr_t start, end;
			char perms[5] = {};
			unsigned long long offset;
			unsigned dev_major, dev_minor;
			unsigned long inode;
			int path_at = 0;

			if (std::sscanf(line.c_str(),
					"%" SCNxPTR "-%" SCNxPTR " %4s %llx %x:%x %lu %n", &start,
					&end, perms, &offset, &dev_major, &dev_minor, &inode,
					&path_at) < 7)
				continue;
			bool shared_write = perms[1] == 'w' && perms[3] == 's';
			std::string path = path_at > 0 ? line.substr(path_at) : "";

			vmas_.push_back(
				{start, end, perms[0] == 'r', perms[1] == 'w',
				 shared_write &&
					 shared_file_needs_dirty_tracking(dev_major, inode, path)});
		}
	}

	/* The first mapping that ends above addr, if any. */
	std::optional<Vma> find(std::uintptr_t addr, bool /* dirty_tracking */) const
	{
		auto v = std::upper_bound(vmas_.begin(), vmas_.end(), addr,
					  [](std::uintptr_t a, const Vma &m) { return a < m.end; });
		if (v == vmas_.end())
			return std::nullopt;
		return *v;
	}

private:
	std::vector<Vma> vmas_;
};

/* PROCMAP_QUERY failed for another reason than "no such mapping". */
struct QueryFailed {
	int err;
};

/*
 * One PROCMAP_QUERY per lookup, the last answer kept: the ranges of one
 * registration mostly lie in one mapping (the heap).  The path, which the
 * kernel builds with d_path(), is asked for only when the dirty-tracking
 * check needs it: for a shared writable file mapping.
 */
class MapsQuery {
public:
	MapsQuery() : fd_(::open("/proc/self/maps", O_RDONLY | O_CLOEXEC))
	{
		if (!fd_.valid())
			throw QueryFailed{errno};
	}

	/* As MapsText::find; dirty_tracking: fill needs_dirty_tracking in. */
	std::optional<Vma> find(std::uintptr_t addr, bool dirty_tracking)
	{
		if (last_ && last_->start <= addr && addr < last_->end &&
		    (!dirty_tracking || last_dirty_known_))
			return last_;
		procmap_query q = query(addr, query_covering_or_next_vma, nullptr);
		if (!q.size)
			return std::nullopt;
		bool shared_write = (q.vma_flags & query_vma_writable) &&
				    (q.vma_flags & query_vma_shared);
		bool needs = false;
		if (dirty_tracking && shared_write && q.inode) {
			std::string path;

			q = query(q.vma_start, 0, &path);
			if (!q.size) /* unmapped in between: look again */
				return find(addr, dirty_tracking);
			needs = shared_file_needs_dirty_tracking(q.dev_major, q.inode, path);
		}
		last_ = Vma{q.vma_start, q.vma_end, (q.vma_flags & query_vma_readable) != 0,
			    (q.vma_flags & query_vma_writable) != 0, needs};
		last_dirty_known_ = dirty_tracking || !shared_write || !q.inode;
		return last_;
	}

private:
	/* q.size is 0 when no mapping matches (ENOENT). */
	procmap_query query(std::uintptr_t addr, std::uint64_t flags, std::string *path) const
	{
		/* PATH_MAX: the most the kernel writes back. */
		std::array<char, 4096> name{};
		procmap_query q{};

		q.size = sizeof(q);
		q.query_flags = flags;
		q.query_addr = addr;
		if (path) {
			q.vma_name_size = name.size();
			q.vma_name_addr = reinterpret_cast<std::uintptr_t>(name.data());
		}
		int ret;
		do {
			ret = ::ioctl(fd_.get(), PROCMAP_QUERY, &q);
		} while (ret && errno == EINTR);
		if (ret && errno == ENOENT)
			return procmap_query{};
		/*
		 * ENAMETOOLONG: a path longer than PATH_MAX, which statfs()
		 * could not look up either; on a block device it is a file.
		 */
		if (ret && errno == ENAMETOOLONG && path) {
			/* Not *path = "/": GCC 12's -Wrestrict misfires on it. */
			path->assign(1, '/');
			q = query(addr, flags, nullptr);
			if (q.size && !q.dev_major)
				path->clear();
			return q;
		}
		if (ret)
			throw QueryFailed{errno};
		if (path && q.vma_name_size)
			path->assign(name.data(), q.vma_name_size - 1);
		return q;
	}

	UniqueFd fd_;
	std::optional<Vma> last_;
	bool last_dirty_known_ = false;
};

/* The module's order: the VMA check of every range, then GUP. */
template <typename Maps> VmaFault check_with(Maps &maps, std::span<const KernelRange> ranges)
{
	for (std::size_t i = 0; i < ranges.size(); i++) {
		const KernelRange &r = ranges[i];

		if (r.access != Access::ReadWrite)
			continue;
		for (auto v = maps.find(r.addr, true); v && v->start < r.addr + r.len;
		     v = maps.find(v->end, true))
			if (v->needs_dirty_tracking)
				return {EOPNOTSUPP, i, std::max(r.addr, v->start)};
	}
	for (std::size_t i = 0; i < ranges.size(); i++) {
		const KernelRange &r = ranges[i];
		bool write = r.access == Access::ReadWrite;
		std::uintptr_t addr = r.addr, end = r.addr + r.len;

		while (addr < end) {
			std::optional<Vma> v = maps.find(addr, false);

			if (!v || v->start > addr)
				return {EFAULT, i, addr}; /* a hole */
			if (!v->read || (write && !v->write))
				return {EFAULT, i, addr};
			addr = v->end;
		}
	}
	return {};
}

std::atomic<VmaLookup> lookup{VmaLookup::Auto};
/* Cleared once the kernel says it has no PROCMAP_QUERY. */
std::atomic<bool> query_usable{true};

bool lacks_query(int err)
{
	return err == ENOTTY || err == EINVAL;
}

} // namespace

void set_vma_lookup(VmaLookup l) noexcept
{
	lookup.store(l, std::memory_order_relaxed);
}

bool vma_query_supported()
{
	try {
		MapsQuery maps;

		maps.find(0, false);
		return true;
	} catch (const QueryFailed &f) {
		return !lacks_query(f.err);
	}
}

VmaFault check_vmas(std::span<const KernelRange> ranges)
{
	if (lookup.load(std::memory_order_relaxed) == VmaLookup::Auto &&
	    query_usable.load(std::memory_order_relaxed)) {
		try {
			MapsQuery maps;

			return check_with(maps, ranges);
		} catch (const QueryFailed &f) {
			/* Older kernels (ENOTTY); anything else: the text says. */
			if (lacks_query(f.err))
				query_usable.store(false, std::memory_order_relaxed);
		}
	}
	MapsText maps;
	return check_with(maps, ranges);
}

VmaFault prefault(std::span<const KernelRange> ranges)
{
	for (std::size_t i = 0; i < ranges.size(); i++) {
		const KernelRange &r = ranges[i];
		int advice = r.access == Access::ReadWrite ? MADV_POPULATE_WRITE :
							     MADV_POPULATE_READ;
		int ret;

		do {
			/* The address is the caller's: no pointer to keep. */
			// NOLINTNEXTLINE(performance-no-int-to-ptr)
			auto *addr = reinterpret_cast<void *>(r.addr);

			ret = ::madvise(addr, r.len, advice);
		} while (ret && errno == EINTR);
		/*
		 * EINVAL: VM_IO/VM_PFNMAP memory, which GUP refuses with
		 * EFAULT.
		 */
		if (ret)
			return {errno == EINVAL ? EFAULT : errno, i, r.addr};
	}
	return {};
}

} // namespace svmbatch::detail
