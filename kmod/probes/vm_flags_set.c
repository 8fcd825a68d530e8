// SPDX-License-Identifier: GPL-2.0-only
/*
 * vma->vm_flags is read-only; vm_flags_set() and vm_flags_clear() change
 * it (6.3 and backports).
 */
#include <linux/mm.h>

static void __maybe_unused svmbatch_probe(struct vm_area_struct *vma)
{
	vm_flags_set(vma, VM_DONTDUMP);
	vm_flags_clear(vma, VM_DONTDUMP);
}
