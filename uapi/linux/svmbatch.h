/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * svmbatch: transactional batch pinning of scattered user memory.
 *
 * Every command is _IO(SVMBATCH_TYPE, SVMBATCH_CMD_*) on /dev/svmbatch and
 * takes a pointer to a struct whose first member is "__u32 size", the size
 * of the struct as the caller knows it.  The kernel zero-extends a smaller
 * (older) struct, refuses a larger (newer) one whose unknown tail is not zero
 * with E2BIG, and never writes more than "size" bytes back.  Unknown flag
 * bits give EOPNOTSUPP so callers can probe features; non-zero reserved
 * members give EINVAL.  Layouts are identical on 32- and 64-bit ABIs.
 *
 * Documentation/uapi.rst describes every command, field and errno.
 */
#ifndef _UAPI_LINUX_SVMBATCH_H
#define _UAPI_LINUX_SVMBATCH_H

#include <linux/const.h>
#include <linux/ioctl.h>
#include <linux/types.h>

/* 0xB9 is unused in Documentation/userspace-api/ioctl/ioctl-number.rst. */
#define SVMBATCH_TYPE 0xB9

/* ABI version reported by GET_INFO; bumped only for incompatible changes. */
#define SVMBATCH_ABI_VERSION 1

/* error_index value when no single range is to blame. */
#define SVMBATCH_NO_INDEX 0xffffffffU

enum {
	SVMBATCH_CMD_BASE = 0x40,
	SVMBATCH_CMD_GET_INFO = SVMBATCH_CMD_BASE,
	SVMBATCH_CMD_REGISTER,
	SVMBATCH_CMD_UNREGISTER,
	SVMBATCH_CMD_QUERY,
	SVMBATCH_CMD_EXPORT_DMABUF,
};

/* Feature bits reported in svmbatch_info.features. */
#define SVMBATCH_FEATURE_DMABUF		 _BITULL(0) /* EXPORT_DMABUF works */
#define SVMBATCH_FEATURE_STALE_NOTIFY	 _BITULL(1) /* QUERY reports STALE */
#define SVMBATCH_FEATURE_FAULT_INJECTION _BITULL(2) /* debugfs fail_nth */

/*
 * QUERY out_flags.  STALE: since REGISTER, some registered address was
 * unmapped or had its pages dropped or moved (munmap, MADV_DONTNEED,
 * mremap, a new mapping over it).  The pinned pages stay valid and pinned
 * until UNREGISTER, but they are no longer what the process sees there.
 */
#define SVMBATCH_QUERY_STALE _BITUL(0)

/**
 * struct svmbatch_info - ioctl(SVMBATCH_GET_INFO)
 * @size: sizeof(struct svmbatch_info)
 * @flags: must be 0
 * @abi_version: output, SVMBATCH_ABI_VERSION of the module
 * @page_size: output, granularity of addr and len (PAGE_SIZE)
 * @features: output, SVMBATCH_FEATURE_* bits
 * @max_ranges: output, most ranges accepted by one REGISTER
 * @max_registrations: output, most live handles per open file
 * @max_range_bytes: output, longest single range in bytes
 */
struct svmbatch_info {
	__u32 size;
	__u32 flags;
	__u32 abi_version;
	__u32 page_size;
	__aligned_u64 features;
	__u32 max_ranges;
	__u32 max_registrations;
	__aligned_u64 max_range_bytes;
};

#define SVMBATCH_GET_INFO _IO(SVMBATCH_TYPE, SVMBATCH_CMD_GET_INFO)

/* Range flags */
#define SVMBATCH_RANGE_READ_ONLY _BITUL(0) /* pin without FOLL_WRITE */

/**
 * struct svmbatch_range - one user virtual address range
 * @addr: start, page aligned
 * @len: length in bytes, page aligned, non-zero
 * @flags: SVMBATCH_RANGE_* bits
 * @reserved: must be 0
 */
struct svmbatch_range {
	__aligned_u64 addr;
	__aligned_u64 len;
	__u32 flags;
	__u32 reserved;
};

/* REGISTER flags */
#define SVMBATCH_REGISTER_EVENTFD _BITUL(0) /* signal @eventfd on STALE */

/**
 * struct svmbatch_register - ioctl(SVMBATCH_REGISTER)
 * @size: sizeof(struct svmbatch_register)
 * @flags: SVMBATCH_REGISTER_* bits
 * @ranges: user pointer to an array of @nr_ranges range structs
 * @nr_ranges: number of ranges, 1 .. max_ranges
 * @range_size: sizeof(struct svmbatch_range) as the caller knows it
 * @handle: output, non-zero handle of the new registration
 * @error_index: output, on failure the index of the offending range or
 *	SVMBATCH_NO_INDEX; written back on success and failure
 * @nr_pages: output, number of pages pinned
 * @eventfd: with SVMBATCH_REGISTER_EVENTFD, an eventfd signalled (once)
 *	when the registration becomes STALE; ignored otherwise
 * @reserved: must be 0
 *
 * Either every range is pinned and one handle is returned, or nothing is
 * pinned, nothing is charged to RLIMIT_MEMLOCK and no handle exists.
 * Callers built against the first ABI pass a 40-byte struct (no @eventfd).
 */
struct svmbatch_register {
	__u32 size;
	__u32 flags;
	__aligned_u64 ranges;
	__u32 nr_ranges;
	__u32 range_size;
	__u32 handle;
	__u32 error_index;
	__aligned_u64 nr_pages;
	__s32 eventfd;
	__u32 reserved;
};

#define SVMBATCH_REGISTER _IO(SVMBATCH_TYPE, SVMBATCH_CMD_REGISTER)

/**
 * struct svmbatch_unregister - ioctl(SVMBATCH_UNREGISTER)
 * @size: sizeof(struct svmbatch_unregister)
 * @handle: handle returned by REGISTER
 */
struct svmbatch_unregister {
	__u32 size;
	__u32 handle;
};

#define SVMBATCH_UNREGISTER _IO(SVMBATCH_TYPE, SVMBATCH_CMD_UNREGISTER)

/**
 * struct svmbatch_query - ioctl(SVMBATCH_QUERY)
 * @size: sizeof(struct svmbatch_query)
 * @handle: handle returned by REGISTER
 * @flags: must be 0
 * @nr_ranges: output, number of ranges in the registration
 * @ranges: optional user pointer receiving the ranges in the order given
 *	to REGISTER, @range_size bytes apart; 0 to skip
 * @ranges_cap: number of entries @ranges can hold; if it is smaller than
 *	@nr_ranges nothing is copied and the call fails with EMSGSIZE after
 *	filling @nr_ranges
 * @range_size: sizeof(struct svmbatch_range) as the caller knows it
 * @nr_pages: output, pages pinned
 * @nr_segments: output, physically contiguous runs of pinned pages
 * @nr_folios: output, distinct folios pinned
 * @meta_bytes: output, kernel memory used to describe the registration
 * @out_flags: output, SVMBATCH_QUERY_* bits
 * @reserved: must be 0
 */
struct svmbatch_query {
	__u32 size;
	__u32 handle;
	__u32 flags;
	__u32 nr_ranges;
	__aligned_u64 ranges;
	__u32 ranges_cap;
	__u32 range_size;
	__aligned_u64 nr_pages;
	__aligned_u64 nr_segments;
	__aligned_u64 nr_folios;
	__aligned_u64 meta_bytes;
	__u32 out_flags;
	__u32 reserved;
};

#define SVMBATCH_QUERY _IO(SVMBATCH_TYPE, SVMBATCH_CMD_QUERY)

/**
 * struct svmbatch_export_dmabuf - ioctl(SVMBATCH_EXPORT_DMABUF)
 * @size: sizeof(struct svmbatch_export_dmabuf)
 * @flags: O_CLOEXEC and O_RDWR (as for DRM PRIME); without O_RDWR the
 *	dma-buf file is read-only.  O_RDWR needs a registration without
 *	read-only ranges (else EACCES); any other bit gives EOPNOTSUPP
 * @handle: the registration to export
 * @fd: output, the new dma-buf file descriptor
 *
 * The dma-buf is the registration's pages, range after range in the order
 * REGISTER was given them, nr_pages pages long.  It holds the registration:
 * the pages stay pinned and charged until both the handle and every dma-buf
 * are gone, in any order, even after the registering process has exited.
 */
struct svmbatch_export_dmabuf {
	__u32 size;
	__u32 flags;
	__u32 handle;
	__s32 fd;
};

#define SVMBATCH_EXPORT_DMABUF _IO(SVMBATCH_TYPE, SVMBATCH_CMD_EXPORT_DMABUF)

#endif /* _UAPI_LINUX_SVMBATCH_H */
