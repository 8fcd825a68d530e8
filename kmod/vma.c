// SPDX-License-Identifier: GPL-2.0-only
/*
 * Which memory may be pinned: the mappings a registration's ranges lie in,
 * checked before pinning, and on kernels whose GUP does not check it
 * itself, each pinned page after pinning.
 *
 * The mapping checks run under the mmap lock but the pin does not, so a
 * thread could swap a range's mapping between the check and the pin.  Such
 * a swap unmaps the old mapping, which the registration's interval notifier
 * sees; REGISTER then checks and pins again (pin.c).  A change of
 * protection alone (mprotect) is no invalidation, so what it can let
 * through, a writable pin of page-cache pages, is refused page by page.
 */
#include <linux/backing-dev.h>
#include <linux/mm.h>
#include <linux/pagemap.h>

#include "compat.h"
#include "svmbatch_priv.h"

/*
 * Mappings that are not ordinary process memory: the vDSO and vvar pages,
 * I/O and PFN maps, mixed maps of drivers, and other special mappings that
 * have operations but no file.  GUP would pin the kernel's own vDSO pages
 * (and on 6.1 with movablecore= loop forever trying to migrate them).
 */
static bool svmbatch_vma_is_special(const struct vm_area_struct *vma)
{
	if (vma->vm_flags & (VM_IO | VM_PFNMAP | VM_MIXEDMAP))
		return true;
	return vma->vm_ops && !vma->vm_file;
}

/*
 * Private writable mappings, whose read-only long-term pins must not keep
 * a shared page (the zero page, a page-cache page) that the next CPU write
 * replaces.  See SVMBATCH_GUP_UNSHARES_RO_LONGTERM in compat.h.
 */
static bool svmbatch_vma_private_writable(const struct vm_area_struct *vma)
{
	return is_cow_mapping(vma->vm_flags) && (vma->vm_flags & VM_WRITE);
}

/* Check the mappings of one range; 0 or the errno for this range. */
static int svmbatch_check_range_vmas(struct mm_struct *mm,
				     struct svmbatch_range_rec *rec)
{
	unsigned long addr = rec->addr_flags & PAGE_MASK;
	unsigned long end = addr + rec->len;
	bool read_only = rec->addr_flags & SVMBATCH_RANGE_READ_ONLY;
	bool unshare = read_only && !SVMBATCH_GUP_UNSHARES_RO_LONGTERM;

	rec->addr_flags &= ~SVMBATCH_REC_UNSHARE;
	while (addr < end) {
		struct vm_area_struct *vma = find_vma(mm, addr);

		/* Holes are left to GUP, which reports them. */
		if (!vma || vma->vm_start >= end)
			return 0;
		if (vma->vm_start > addr)
			unshare = false;
		if (svmbatch_vma_is_special(vma))
			return -EFAULT;
		if (!read_only && svmbatch_vma_needs_dirty_tracking(vma))
			return -EOPNOTSUPP;
		if (!svmbatch_vma_private_writable(vma))
			unshare = false;
		addr = vma->vm_end;
	}
	if (unshare)
		rec->addr_flags |= SVMBATCH_REC_UNSHARE;
	return 0;
}

/**
 * svmbatch_check_vmas() - check the mappings under every range
 * @reg: registration whose ranges are copied in and validated
 * @error_index: output, the first range (in array order) that failed
 *
 * Refuses special mappings (-EFAULT) and writable ranges over file
 * mappings that need dirty tracking (-EOPNOTSUPP, see compat.h).  Marks
 * read-only ranges that must be pinned as if for writing to stay coherent
 * (SVMBATCH_REC_UNSHARE).
 *
 * Return: 0, -EFAULT, -EOPNOTSUPP, or -EINTR on a fatal signal.
 */
int svmbatch_check_vmas(struct svmbatch_reg *reg, u32 *error_index)
{
	struct mm_struct *mm = reg->mm;
	int ret = 0;
	u32 i;

	if (mmap_read_lock_killable(mm))
		return -EINTR;
	for (i = 0; i < reg->nr_ranges; i++) {
		ret = svmbatch_check_range_vmas(mm, &reg->ranges[i]);
		if (ret) {
			*error_index = i;
			break;
		}
	}
	mmap_read_unlock(mm);
	return ret;
}

/**
 * svmbatch_folio_pin_allowed() - may a writable pin keep this folio?
 * @folio: a folio just pinned with FOLL_WRITE
 *
 * A page-cache page of a filesystem that tracks dirty pages must not be
 * written by a device behind the filesystem's back.  Kernels since 6.5
 * refuse such pins in GUP; on older ones the mapping check before pinning
 * can be raced by mprotect, so the pinned folio itself is checked.  The
 * folio lock keeps its mapping (and so the inode) from going away while
 * it is looked at; anonymous and hugetlb folios need no look.
 *
 * Return: true when the pin may be kept.
 */
bool svmbatch_folio_pin_allowed(struct folio *folio)
{
	struct address_space *mapping;
	bool allowed;

	if (SVMBATCH_GUP_REFUSES_DIRTY_TRACKED_PINS)
		return true;
	if (folio_test_anon(folio) || folio_test_hugetlb(folio))
		return true;
	folio_lock(folio);
	mapping = folio->mapping;
	allowed = !mapping || !mapping_can_writeback(mapping);
	folio_unlock(folio);
	return allowed;
}
