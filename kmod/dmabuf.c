// SPDX-License-Identifier: GPL-2.0-only
/*
 * SVMBATCH_EXPORT_DMABUF: a registration's pinned pages as one dma-buf,
 * range after range.  The dma-buf holds a reference on the registration,
 * so the pages stay pinned and charged until the handle and every dma-buf
 * are gone, in any order.
 *
 * The dma-buf's bytes are the ranges concatenated in REGISTER order.  That
 * is the order of reg->runs: pin.c pins range after range in the caller's
 * order and only ever appends to the last run, so a run never holds pages
 * of two ranges out of order (it may span a range boundary when the next
 * range's first page physically follows the previous range's last one,
 * which changes nothing for the concatenation).
 *
 * The CPU mapping of the dma-buf maps page frames from a fault handler
 * (VM_PFNMAP, as 6.12's udmabuf does), never remap_pfn_range() and
 * never struct pages.  Anonymous pages cannot be inserted into a second
 * mapping (vm_insert_page() refuses them: they belong to their anon_vma).
 * Page-cache and shmem pages could be, but then a truncate or hole punch
 * of their file would delete pages still mapped here from the page cache
 * ("Bad page cache", a VM_BUG_ON on debug kernels): user-triggerable.  The
 * price: GUP, hence io_uring fixed buffers, refuses the alias (EFAULT).
 */
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/fcntl.h>
#include <linux/file.h>
#include <linux/iosys-map.h>
#include <linux/mm.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#include "compat.h"
#include "svmbatch_priv.h"

/* Longest scatterlist segment: far below sg->length's limit. */
#define SVMBATCH_SEG_MAX_PAGES (SZ_1G >> PAGE_SHIFT)

/**
 * struct svmbatch_dmabuf - exporter state of one dma-buf
 * @reg: the registration (a reference)
 * @run_start: page offset of each run in the dma-buf, for faults
 * @writable: every run is writable (no read-only range)
 * @lock: protects @attachments
 * @attachments: struct svmbatch_attachment of the importers
 */
struct svmbatch_dmabuf {
	struct svmbatch_reg *reg;
	u64 *run_start;
	bool writable;
	struct mutex lock; /* protects attachments */
	struct list_head attachments;
};

struct svmbatch_attachment {
	struct list_head node;
	struct device *dev;
	struct sg_table *sgt; /* while mapped */
	enum dma_data_direction dir;
};

static int svmbatch_dmabuf_attach(struct dma_buf *dmabuf,
				  struct dma_buf_attachment *attach)
{
	struct svmbatch_dmabuf *priv = dmabuf->priv;
	struct svmbatch_attachment *a;

	if (svmbatch_should_fail(-ENOMEM))
		return -ENOMEM;
	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	a->dev = attach->dev;
	attach->priv = a;
	mutex_lock(&priv->lock);
	list_add(&a->node, &priv->attachments);
	mutex_unlock(&priv->lock);
	atomic64_inc(&svmbatch_stats.dmabuf_attachments);
	return 0;
}

static void svmbatch_dmabuf_detach(struct dma_buf *dmabuf,
				   struct dma_buf_attachment *attach)
{
	struct svmbatch_dmabuf *priv = dmabuf->priv;
	struct svmbatch_attachment *a = attach->priv;

	mutex_lock(&priv->lock);
	list_del(&a->node);
	mutex_unlock(&priv->lock);
	kfree(a);
	atomic64_dec(&svmbatch_stats.dmabuf_attachments);
}

static u32 svmbatch_run_segments(const struct svmbatch_run *run)
{
	return DIV_ROUND_UP(run->nr_pages, SVMBATCH_SEG_MAX_PAGES);
}

/* One segment per physically contiguous run (split at 1 GiB). */
static struct sg_table *svmbatch_build_sgt(const struct svmbatch_reg *reg)
{
	struct scatterlist *sg;
	struct sg_table *sgt;
	u32 i, nents = 0;

	for (i = 0; i < reg->nr_runs; i++)
		nents += svmbatch_run_segments(&reg->runs[i]);
	if (svmbatch_should_fail(-ENOMEM))
		return ERR_PTR(-ENOMEM);
	sgt = kzalloc(sizeof(*sgt), GFP_KERNEL);
	if (!sgt)
		return ERR_PTR(-ENOMEM);
	if (sg_alloc_table(sgt, nents, GFP_KERNEL)) {
		kfree(sgt);
		return ERR_PTR(-ENOMEM);
	}
	sg = sgt->sgl;
	for (i = 0; i < reg->nr_runs; i++) {
		const struct svmbatch_run *run = &reg->runs[i];
		u32 done = 0;

		while (done < run->nr_pages) {
			u32 n = min_t(u32, run->nr_pages - done,
				      SVMBATCH_SEG_MAX_PAGES);

			sg_set_page(sg, nth_page(run->first, done),
				    n << PAGE_SHIFT, 0);
			sg = sg_next(sg);
			done += n;
		}
	}
	return sgt;
}

static void svmbatch_free_sgt(struct sg_table *sgt)
{
	sg_free_table(sgt);
	kfree(sgt);
}

static struct sg_table *svmbatch_dmabuf_map(struct dma_buf_attachment *attach,
					    enum dma_data_direction dir)
{
	struct svmbatch_dmabuf *priv = attach->dmabuf->priv;
	struct svmbatch_attachment *a = attach->priv;
	struct sg_table *sgt;
	int ret;

	/* A device must not write pages pinned read-only (page cache). */
	if (!priv->writable && dir != DMA_TO_DEVICE)
		return ERR_PTR(-EACCES);
	sgt = svmbatch_build_sgt(priv->reg);
	if (IS_ERR(sgt))
		return sgt;
	ret = svmbatch_should_fail(-ENOMEM) ?
		      -ENOMEM :
		      dma_map_sgtable(attach->dev, sgt, dir, 0);
	if (ret) {
		svmbatch_free_sgt(sgt);
		return ERR_PTR(ret);
	}
	mutex_lock(&priv->lock);
	a->sgt = sgt;
	a->dir = dir;
	mutex_unlock(&priv->lock);
	atomic64_add(sgt->orig_nents, &svmbatch_stats.dmabuf_segments);
	return sgt;
}

static void svmbatch_dmabuf_unmap(struct dma_buf_attachment *attach,
				  struct sg_table *sgt,
				  enum dma_data_direction dir)
{
	struct svmbatch_dmabuf *priv = attach->dmabuf->priv;
	struct svmbatch_attachment *a = attach->priv;

	mutex_lock(&priv->lock);
	if (a->sgt == sgt)
		a->sgt = NULL;
	mutex_unlock(&priv->lock);
	atomic64_sub(sgt->orig_nents, &svmbatch_stats.dmabuf_segments);
	dma_unmap_sgtable(attach->dev, sgt, dir, 0);
	svmbatch_free_sgt(sgt);
}

static int svmbatch_dmabuf_cpu_access(struct dma_buf *dmabuf,
				      enum dma_data_direction dir, bool begin)
{
	struct svmbatch_dmabuf *priv = dmabuf->priv;
	struct svmbatch_attachment *a;

	mutex_lock(&priv->lock);
	list_for_each_entry(a, &priv->attachments, node) {
		if (!a->sgt)
			continue;
		if (begin)
			dma_sync_sgtable_for_cpu(a->dev, a->sgt, dir);
		else
			dma_sync_sgtable_for_device(a->dev, a->sgt, dir);
	}
	mutex_unlock(&priv->lock);
	return 0;
}

static int svmbatch_dmabuf_begin_cpu(struct dma_buf *dmabuf,
				     enum dma_data_direction dir)
{
	return svmbatch_dmabuf_cpu_access(dmabuf, dir, true);
}

static int svmbatch_dmabuf_end_cpu(struct dma_buf *dmabuf,
				   enum dma_data_direction dir)
{
	return svmbatch_dmabuf_cpu_access(dmabuf, dir, false);
}

/* The page at @pgoff of the dma-buf. */
static struct page *svmbatch_dmabuf_page(const struct svmbatch_dmabuf *priv,
					 u64 pgoff)
{
	const struct svmbatch_reg *reg = priv->reg;
	u32 lo = 0, hi = reg->nr_runs;

	/* The last run starting at or before @pgoff. */
	while (hi - lo > 1) {
		u32 mid = lo + (hi - lo) / 2;

		if (priv->run_start[mid] <= pgoff)
			lo = mid;
		else
			hi = mid;
	}
	return nth_page(reg->runs[lo].first, pgoff - priv->run_start[lo]);
}

static vm_fault_t svmbatch_dmabuf_fault(struct vm_fault *vmf)
{
	struct svmbatch_dmabuf *priv = vmf->vma->vm_private_data;
	struct page *page;

	if (vmf->pgoff >= priv->reg->nr_pages)
		return VM_FAULT_SIGBUS;
	page = svmbatch_dmabuf_page(priv, vmf->pgoff);
	return vmf_insert_pfn(vmf->vma, vmf->address, page_to_pfn(page));
}

static const struct vm_operations_struct svmbatch_dmabuf_vm_ops = {
	.fault = svmbatch_dmabuf_fault,
};

static int svmbatch_dmabuf_mmap(struct dma_buf *dmabuf,
				struct vm_area_struct *vma)
{
	struct svmbatch_dmabuf *priv = dmabuf->priv;

	/* Not copy-on-write: a private copy of device memory means nothing. */
	if (is_cow_mapping(vma->vm_flags))
		return -EINVAL;
	if (!priv->writable) {
		if (vma->vm_flags & VM_WRITE)
			return -EACCES;
		svmbatch_vm_flags_clear(vma, VM_MAYWRITE);
	}
	svmbatch_vm_flags_set(vma, VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_ops = &svmbatch_dmabuf_vm_ops;
	vma->vm_private_data = priv;
	return 0;
}

static int svmbatch_dmabuf_vmap(struct dma_buf *dmabuf, struct iosys_map *map)
{
	struct svmbatch_dmabuf *priv = dmabuf->priv;
	const struct svmbatch_reg *reg = priv->reg;
	struct page **pages;
	u64 n = 0;
	void *vaddr;
	u32 i, j;

	/* A kernel mapping is writable: not for read-only pins. */
	if (!priv->writable)
		return -EACCES;
	/* vmap() counts pages in an unsigned int; kvmalloc stops at INT_MAX. */
	if (reg->nr_pages > INT_MAX / sizeof(*pages))
		return -E2BIG;
	if (svmbatch_should_fail(-ENOMEM))
		return -ENOMEM;
	pages = kvmalloc_array(reg->nr_pages, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		return -ENOMEM;
	for (i = 0; i < reg->nr_runs; i++)
		for (j = 0; j < reg->runs[i].nr_pages; j++)
			pages[n++] = nth_page(reg->runs[i].first, j);
	vaddr = vmap(pages, n, VM_MAP, PAGE_KERNEL);
	kvfree(pages);
	if (!vaddr)
		return -ENOMEM;
	iosys_map_set_vaddr(map, vaddr);
	return 0;
}

static void svmbatch_dmabuf_vunmap(struct dma_buf *dmabuf,
				   struct iosys_map *map)
{
	vunmap(map->vaddr);
}

/* Free the exporter state and drop its reference on the registration. */
static void svmbatch_dmabuf_destroy(struct svmbatch_dmabuf *priv)
{
	svmbatch_reg_put(priv->reg);
	kvfree(priv->run_start);
	mutex_destroy(&priv->lock);
	kfree(priv);
}

static void svmbatch_dmabuf_release(struct dma_buf *dmabuf)
{
	atomic64_dec(&svmbatch_stats.exports);
	svmbatch_dmabuf_destroy(dmabuf->priv);
}

static const struct dma_buf_ops svmbatch_dmabuf_ops = {
	.attach = svmbatch_dmabuf_attach,
	.detach = svmbatch_dmabuf_detach,
	.map_dma_buf = svmbatch_dmabuf_map,
	.unmap_dma_buf = svmbatch_dmabuf_unmap,
	.begin_cpu_access = svmbatch_dmabuf_begin_cpu,
	.end_cpu_access = svmbatch_dmabuf_end_cpu,
	.mmap = svmbatch_dmabuf_mmap,
	.vmap = svmbatch_dmabuf_vmap,
	.vunmap = svmbatch_dmabuf_vunmap,
	.release = svmbatch_dmabuf_release,
};

/*
 * The exporter state of a new dma-buf over @reg.  It takes over the
 * caller's reference on @reg only on success.
 */
static struct svmbatch_dmabuf *svmbatch_dmabuf_create(struct svmbatch_reg *reg)
{
	struct svmbatch_dmabuf *priv;
	u64 start = 0;
	u32 i;

	if (svmbatch_should_fail(-ENOMEM))
		return NULL;
	priv = kzalloc(sizeof(*priv), GFP_KERNEL_ACCOUNT);
	if (!priv)
		return NULL;
	priv->run_start = kvmalloc_array(reg->nr_runs, sizeof(*priv->run_start),
					 GFP_KERNEL_ACCOUNT);
	if (!priv->run_start || svmbatch_should_fail(-ENOMEM)) {
		kvfree(priv->run_start);
		kfree(priv);
		return NULL;
	}
	priv->writable = true;
	for (i = 0; i < reg->nr_runs; i++) {
		priv->run_start[i] = start;
		start += reg->runs[i].nr_pages;
		if (!(reg->runs[i].flags & SVMBATCH_RUN_WRITABLE))
			priv->writable = false;
	}
	mutex_init(&priv->lock);
	INIT_LIST_HEAD(&priv->attachments);
	priv->reg = reg;
	return priv;
}

/**
 * svmbatch_cmd_export_dmabuf() - SVMBATCH_EXPORT_DMABUF: a registration
 *	as a dma-buf
 * @ucmd: command holding a struct svmbatch_export_dmabuf
 *
 * @cmd->flags takes O_CLOEXEC and O_RDWR; without O_RDWR the dma-buf file
 * is read-only (O_RDONLY).  Every other bit, O_WRONLY included, is unknown.
 *
 * Return: 0 with a new fd, -EOPNOTSUPP for unknown flags, -ENOENT for an
 * unknown handle, -EACCES for O_RDWR of a registration with read-only
 * ranges, -ENOMEM, -EMFILE, or -EFAULT.
 */
int svmbatch_cmd_export_dmabuf(struct svmbatch_ucmd *ucmd)
{
	struct svmbatch_export_dmabuf *cmd = ucmd->cmd;
	DEFINE_DMA_BUF_EXPORT_INFO(exp_info);
	struct svmbatch_dmabuf *priv;
	struct svmbatch_reg *reg;
	struct dma_buf *dmabuf;
	int fd, ret;

	cmd->fd = -1;
	if (cmd->flags & ~(O_CLOEXEC | O_RDWR))
		return -EOPNOTSUPP;
	reg = svmbatch_ctx_get(ucmd->ctx, cmd->handle);
	if (!reg)
		return -ENOENT;
	priv = svmbatch_dmabuf_create(reg);
	if (!priv) {
		svmbatch_reg_put(reg);
		return -ENOMEM;
	}
	/* From here @priv holds the reference on @reg. */
	if ((cmd->flags & O_RDWR) && !priv->writable) {
		ret = -EACCES;
		goto err_destroy;
	}

	exp_info.ops = &svmbatch_dmabuf_ops;
	exp_info.size = reg->nr_pages << PAGE_SHIFT;
	exp_info.flags = cmd->flags & O_RDWR;
	exp_info.priv = priv;
	dmabuf = svmbatch_should_fail(-ENOMEM) ? ERR_PTR(-ENOMEM) :
						 dma_buf_export(&exp_info);
	if (IS_ERR(dmabuf)) {
		ret = PTR_ERR(dmabuf);
		goto err_destroy;
	}
	/* From here the dma-buf owns @priv: its release destroys it. */
	atomic64_inc(&svmbatch_stats.exports);
	fd = svmbatch_should_fail(-EMFILE) ?
		     -EMFILE :
		     get_unused_fd_flags(cmd->flags & O_CLOEXEC);
	if (fd < 0) {
		ret = fd;
		goto err_put_dmabuf;
	}
	/* Install the fd only once the caller has learnt its number. */
	cmd->fd = fd;
	ret = svmbatch_ucmd_respond(ucmd);
	if (ret)
		goto err_put_fd;
	fd_install(fd, dmabuf->file);
	return 0;

err_put_fd:
	put_unused_fd(fd);
err_put_dmabuf:
	dma_buf_put(dmabuf);
	return ret;
err_destroy:
	svmbatch_dmabuf_destroy(priv);
	return ret;
}

SVMBATCH_IMPORT_DMA_BUF_NS();
