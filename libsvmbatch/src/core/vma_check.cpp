// SPDX-License-Identifier: MIT
#include "core/vma_check.hpp"

#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ  22
#define MADV_POPULATE_WRITE 23
#endif

namespace svmbatch::detail {

namespace {

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

std::vector<Vma> read_maps()
{
	std::ifstream maps("/proc/self/maps");
	std::vector<Vma> vmas;
	std::string line;

	while (std::getline(maps, line)) {
		std::uintptr_t start, end;
		char perms[5] = {};
		unsigned long long offset;
		unsigned dev_major, dev_minor;
		unsigned long inode;
		int path_at = 0;

		if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " %4s %llx %x:%x %lu %n",
				&start, &end, perms, &offset, &dev_major, &dev_minor, &inode,
				&path_at) < 7)
			continue;
		bool shared_write = perms[1] == 'w' && perms[3] == 's';
		std::string path = path_at > 0 ? line.substr(path_at) : "";

		vmas.push_back(
			{start, end, perms[0] == 'r', perms[1] == 'w',
			 shared_write && shared_file_needs_dirty_tracking(dev_major, inode, path)});
	}
	return vmas;
}

} // namespace

VmaFault check_vmas(std::span<const KernelRange> ranges)
{
	std::vector<Vma> vmas = read_maps();
	auto first_vma = [&vmas](std::uintptr_t addr) {
		return std::upper_bound(vmas.begin(), vmas.end(), addr,
					[](std::uintptr_t a, const Vma &v) { return a < v.end; });
	};

	/* The module's order: the VMA check of every range, then GUP. */
	for (std::size_t i = 0; i < ranges.size(); i++) {
		const KernelRange &r = ranges[i];

		if (r.access != Access::ReadWrite)
			continue;
		for (auto v = first_vma(r.addr); v != vmas.end() && v->start < r.addr + r.len; ++v)
			if (v->needs_dirty_tracking)
				return {EOPNOTSUPP, i, std::max(r.addr, v->start)};
	}
	for (std::size_t i = 0; i < ranges.size(); i++) {
		const KernelRange &r = ranges[i];
		bool write = r.access == Access::ReadWrite;
		std::uintptr_t addr = r.addr, end = r.addr + r.len;

		for (auto v = first_vma(addr); addr < end; ++v) {
			if (v == vmas.end() || v->start > addr)
				return {EFAULT, i, addr}; /* a hole */
			if (!v->read || (write && !v->write))
				return {EFAULT, i, addr};
			addr = v->end;
		}
	}
	return {};
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
