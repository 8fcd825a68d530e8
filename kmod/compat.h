/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The differences between the kernels svmbatch builds against (Debian's
 * 6.1 and 6.12, and newer trees in-tree) live here and nowhere else.
 */
#ifndef SVMBATCH_COMPAT_H
#define SVMBATCH_COMPAT_H

#include <linux/backing-dev.h>
#include <linux/eventfd.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/version.h>

/*
 * Does writing to this mapping need the filesystem to track dirty pages?
 * A long-term writable pin of such a mapping lets a device dirty page-cache
 * pages behind the filesystem's back.  Since 6.5 GUP refuses those pins with
 * EFAULT (vma_needs_dirty_tracking() in mm/mmap.c, not exported); 6.1 takes
 * them silently.  svmbatch refuses them itself with EOPNOTSUPP on every
 * kernel, so the contract does not depend on the kernel version.
 */
static inline bool svmbatch_vma_needs_dirty_tracking(struct vm_area_struct *vma)
{
	const struct vm_operations_struct *ops = vma->vm_ops;

	if ((vma->vm_flags & (VM_SHARED | VM_WRITE)) != (VM_SHARED | VM_WRITE))
		return false;
	if (ops && (ops->page_mkwrite || ops->pfn_mkwrite))
		return true;
	return vma->vm_file && mapping_can_writeback(vma->vm_file->f_mapping);
}

/*
 * Since 6.5 GUP itself refuses long-term writable pins of page-cache pages
 * that need dirty tracking, also when mprotect races the pin.  Before, the
 * module checks each pinned folio (svmbatch_folio_pin_allowed()).
 */
#define SVMBATCH_GUP_REFUSES_DIRTY_TRACKED_PINS \
	(KERNEL_VERSION(6, 5, 0) <= LINUX_VERSION_CODE)

/*
 * Since 6.2 (commit 84209e87c696) a read-only long-term pin in a private
 * ("COW") mapping first breaks COW of anything that is not an exclusive
 * anonymous page, so that the next CPU write cannot replace the pinned
 * page.  6.1 pins the shared zero page or page-cache page as it is; the
 * module then pins read-only ranges of private writable mappings with
 * FOLL_WRITE, which breaks COW the same way (SVMBATCH_REC_UNSHARE).
 */
#define SVMBATCH_GUP_UNSHARES_RO_LONGTERM \
	(KERNEL_VERSION(6, 2, 0) <= LINUX_VERSION_CODE)

/* eventfd_signal() lost its count argument in 6.8. */

static inline void svmbatch_eventfd_signal(struct eventfd_ctx *ctx)
{
#if KERNEL_VERSION(6, 8, 0) <= LINUX_VERSION_CODE
	eventfd_signal(ctx);
#else
	eventfd_signal(ctx, 1);
#endif
}

/* vm_flags became read-only behind helpers in 6.3. */
static inline void svmbatch_vm_flags_set(struct vm_area_struct *vma,
					 unsigned long flags)
{
#if KERNEL_VERSION(6, 3, 0) <= LINUX_VERSION_CODE
	vm_flags_set(vma, flags);
#else
	vma->vm_flags |= flags;
#endif
}

static inline void svmbatch_vm_flags_clear(struct vm_area_struct *vma,
					   unsigned long flags)
{
#if KERNEL_VERSION(6, 3, 0) <= LINUX_VERSION_CODE
	vm_flags_clear(vma, flags);
#else
	vma->vm_flags &= ~flags;
#endif
}

/* Symbol namespaces are strings from 6.13. */
#if KERNEL_VERSION(6, 13, 0) <= LINUX_VERSION_CODE
#define SVMBATCH_IMPORT_DMA_BUF_NS() MODULE_IMPORT_NS("DMA_BUF")
#else
#define SVMBATCH_IMPORT_DMA_BUF_NS() MODULE_IMPORT_NS(DMA_BUF)
#endif

#endif /* SVMBATCH_COMPAT_H */
