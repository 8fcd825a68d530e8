/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The differences between the kernels svmbatch builds against (Debian's
 * 6.1 and 6.12, and newer trees in-tree) live here and nowhere else.
 *
 * Where an API differs, kmod/Kbuild probes the target kernel for it
 * (kmod/probes/, results in the generated svmbatch_probes.h), so that a
 * distribution kernel that backported the new API gets it.  Only
 * behaviours that no declaration reveals are told by the version number.
 */
#ifndef SVMBATCH_COMPAT_H
#define SVMBATCH_COMPAT_H

#include <linux/backing-dev.h>
#include <linux/eventfd.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/version.h>

#include "svmbatch_probes.h"

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
 * module checks each pinned folio (svmbatch_folio_pin_allowed()).  This is
 * a behaviour of GUP, not an API: no declaration changed, so no compile
 * probe can see it, and a kernel that backported it still gets the
 * module's own (redundant, correct) check.
 */
#define SVMBATCH_GUP_REFUSES_DIRTY_TRACKED_PINS \
	(KERNEL_VERSION(6, 5, 0) <= LINUX_VERSION_CODE)

/*
 * Since 6.2 (commit 84209e87c696) a read-only long-term pin in a private
 * ("COW") mapping first breaks COW of anything that is not an exclusive
 * anonymous page, so that the next CPU write cannot replace the pinned
 * page.  6.1 pins the shared zero page or page-cache page as it is; the
 * module then pins read-only ranges of private writable mappings with
 * FOLL_WRITE, which breaks COW the same way (SVMBATCH_REC_UNSHARE).  Also
 * a GUP behaviour that no compile probe can see; a backport only makes
 * the module's unsharing redundant.
 */
#define SVMBATCH_GUP_UNSHARES_RO_LONGTERM \
	(KERNEL_VERSION(6, 2, 0) <= LINUX_VERSION_CODE)

/* eventfd_signal() lost its count argument in 6.8. */
static inline void svmbatch_eventfd_signal(struct eventfd_ctx *ctx)
{
#ifdef SVMBATCH_HAVE_EVENTFD_SIGNAL_WITHOUT_COUNT
	eventfd_signal(ctx);
#else
	eventfd_signal(ctx, 1);
#endif
}

/* vm_flags became read-only behind helpers in 6.3. */
static inline void svmbatch_vm_flags_set(struct vm_area_struct *vma,
					 unsigned long flags)
{
#ifdef SVMBATCH_HAVE_VM_FLAGS_SET
	vm_flags_set(vma, flags);
#else
	vma->vm_flags |= flags;
#endif
}

static inline void svmbatch_vm_flags_clear(struct vm_area_struct *vma,
					   unsigned long flags)
{
#ifdef SVMBATCH_HAVE_VM_FLAGS_SET
	vm_flags_clear(vma, flags);
#else
	vma->vm_flags &= ~flags;
#endif
}

/* Symbol namespaces are strings from 6.13. */
#ifdef SVMBATCH_HAVE_MODULE_IMPORT_NS_STRING
#define SVMBATCH_IMPORT_DMA_BUF_NS() MODULE_IMPORT_NS("DMA_BUF")
#else
#define SVMBATCH_IMPORT_DMA_BUF_NS() MODULE_IMPORT_NS(DMA_BUF)
#endif

#endif /* SVMBATCH_COMPAT_H */
