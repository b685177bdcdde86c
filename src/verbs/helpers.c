// SPDX-License-Identifier: GPL-2.0
/*
 * Out-of-line wrappers of static inline verbs and KBUILD_MODNAME macros, for Rust.
 * See include/fastreg_helpers.h.
 */
#include <crypto/sha2.h>
#include <linux/debugfs.h>
#include <linux/error-injection.h>
#include <linux/fault-inject.h>
#include <linux/fs.h>
#include <linux/inetdevice.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "fastreg_helpers.h"

struct ib_pd *fastreg_ib_alloc_pd(struct ib_device *device, unsigned int flags)
{
	return ib_alloc_pd(device, flags);
}
ALLOW_ERROR_INJECTION(fastreg_ib_alloc_pd, ERRNO);

void fastreg_ib_dealloc_pd(struct ib_pd *pd)
{
	ib_dealloc_pd(pd);
}

u32 fastreg_ib_inc_rkey(u32 rkey)
{
	return ib_inc_rkey(rkey);
}

struct workqueue_struct *fastreg_alloc_wq(const char *name, unsigned int flags, int max_active)
{
	return alloc_workqueue("%s", WQ_UNBOUND | flags, max_active, name);
}

long fastreg_wait_zero_timeout(unsigned int *count, unsigned long timeout)
{
	return wait_var_event_timeout(count, READ_ONCE(*count) == 0, timeout);
}

void fastreg_wake_zero(unsigned int *count)
{
	/* Orders the caller's store of 0 before the waiter's check (see wake_up_var()). */
	smp_mb();
	wake_up_var(count);
}

bool fastreg_ib_device_try_get(struct ib_device *device)
{
	return ib_device_try_get(device);
}

int fastreg_ib_dereg_mr(struct ib_mr *mr)
{
	return ib_dereg_mr(mr);
}

void fastreg_ib_update_fast_reg_key(struct ib_mr *mr, u8 newkey)
{
	ib_update_fast_reg_key(mr, newkey);
}

/* Injected as the NULL type: it fails by returning 0, the number of entries mapped. */
int fastreg_ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents)
{
	return ib_dma_map_sg(dev, sg, nents, DMA_BIDIRECTIONAL);
}
ALLOW_ERROR_INJECTION(fastreg_ib_dma_map_sg, NULL);

/*
 * ib_verbs.h has no sg form of ib_dma_sync_single_for_*(): these are that, with the same
 * virtual-DMA test as ib_dma_map_sg().
 */
void fastreg_ib_dma_sync_sg_for_cpu(struct ib_device *dev, struct scatterlist *sg, int nents)
{
	if (!ib_uses_virt_dma(dev))
		dma_sync_sg_for_cpu(dev->dma_device, sg, nents, DMA_BIDIRECTIONAL);
}

void fastreg_ib_dma_sync_sg_for_device(struct ib_device *dev, struct scatterlist *sg,
				       int nents)
{
	if (!ib_uses_virt_dma(dev))
		dma_sync_sg_for_device(dev->dma_device, sg, nents, DMA_BIDIRECTIONAL);
}

void fastreg_ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents)
{
	ib_dma_unmap_sg(dev, sg, nents, DMA_BIDIRECTIONAL);
}

void fastreg_sg_set_page(struct scatterlist *sg, struct page *page, unsigned int len,
			 unsigned int offset)
{
	sg_set_page(sg, page, len, offset);
}

u64 fastreg_sg_dma_address(struct scatterlist *sg)
{
	return sg_dma_address(sg);
}

unsigned int fastreg_sg_dma_len(struct scatterlist *sg)
{
	return sg_dma_len(sg);
}

/*
 * A fault-injection hook, as should_failslab() is: it does nothing, and fail_function
 * makes it return an error. fastreg_ib_post_send() then refuses the whole chain as a
 * driver does when the first work request cannot go (a full send queue, a QP in error):
 * the error, and bad_wr at that first request. Failing fastreg_ib_post_send() itself
 * leaves bad_wr unset, which says that where the device stopped is unknown. The QP is
 * looked at so that the compiler cannot take the result as known and drop the call;
 * without CONFIG_FUNCTION_ERROR_INJECTION nothing calls it. The test build only
 * (FASTREG_TEST).
 */
#ifdef FASTREG_TEST
noinline int fastreg_post_refused(struct ib_qp *qp)
{
	return qp ? 0 : -EINVAL;
}
ALLOW_ERROR_INJECTION(fastreg_post_refused, ERRNO);
#endif

int fastreg_ib_post_send(struct ib_qp *qp, const struct ib_send_wr *wr,
			 const struct ib_send_wr **bad_wr)
{
#if defined(FASTREG_TEST) && defined(CONFIG_FUNCTION_ERROR_INJECTION)
	int ret = fastreg_post_refused(qp);

	if (ret) {
		if (bad_wr)
			*bad_wr = wr;
		return ret;
	}
#endif
	return ib_post_send(qp, wr, bad_wr);
}
ALLOW_ERROR_INJECTION(fastreg_ib_post_send, ERRNO);

int fastreg_ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr,
			 const struct ib_recv_wr **bad_wr)
{
	return ib_post_recv(qp, wr, bad_wr);
}
ALLOW_ERROR_INJECTION(fastreg_ib_post_recv, ERRNO);

struct ib_mr *fastreg_ib_alloc_mr(struct ib_pd *pd, u32 max_num_sg)
{
	return ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, max_num_sg);
}
ALLOW_ERROR_INJECTION(fastreg_ib_alloc_mr, ERRNO);

int fastreg_ib_map_mr_sg(struct ib_mr *mr, struct scatterlist *sg, int sg_nents,
			 unsigned int *sg_offset, unsigned int page_size)
{
	return ib_map_mr_sg(mr, sg, sg_nents, sg_offset, page_size);
}
ALLOW_ERROR_INJECTION(fastreg_ib_map_mr_sg, ERRNO);

void fastreg_spin_lock_bh(spinlock_t *lock)
{
	spin_lock_bh(lock);
}

void fastreg_spin_unlock_bh(spinlock_t *lock)
{
	spin_unlock_bh(lock);
}

int fastreg_spin_trylock_bh(spinlock_t *lock)
{
	return spin_trylock_bh(lock);
}

/*
 * Polled in softirq, as nvme-rdma polls its I/O queues: a completion handler only
 * advances the transfer's record and posts what is prepared, under locks taken with
 * softirqs off (verbs/bhlock.rs); everything that allocates, maps, fills, checks or may
 * sleep is on fastreg's own workqueues (Documentation/transport.rst). The completion
 * vectors are spread over the connections (ib_alloc_cq_any), not all on vector 0.
 */
struct ib_cq *fastreg_ib_alloc_cq(struct ib_device *dev, void *private, int nr_cqe)
{
	return ib_alloc_cq_any(dev, private, nr_cqe, IB_POLL_SOFTIRQ);
}
ALLOW_ERROR_INJECTION(fastreg_ib_alloc_cq, ERRNO);

int fastreg_rdma_create_qp(struct rdma_cm_id *id, struct ib_pd *pd,
			   struct ib_qp_init_attr *attr)
{
	return rdma_create_qp(id, pd, attr);
}
ALLOW_ERROR_INJECTION(fastreg_rdma_create_qp, ERRNO);

int fastreg_rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	return rdma_connect(id, param);
}
ALLOW_ERROR_INJECTION(fastreg_rdma_connect, ERRNO);

int fastreg_rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	return rdma_accept(id, param);
}
ALLOW_ERROR_INJECTION(fastreg_rdma_accept, ERRNO);

/*
 * A cache of message buffers of exactly @size bytes (rounded up to the DMA alignment, so
 * that a buffer mapped for a device shares no cache line with another): a 4,152-byte
 * message no longer takes a kmalloc block of 8 KiB. Never merged with another cache, so
 * that /proc/slabinfo shows fastreg's buffers under @name.
 */
struct kmem_cache *fastreg_msg_cache_create(const char *name, unsigned int size)
{
	unsigned int align = dma_get_cache_alignment();

	return kmem_cache_create(name, ALIGN(size, align), align, SLAB_NO_MERGE, NULL);
}

void *fastreg_msg_cache_zalloc(struct kmem_cache *cache)
{
	return kmem_cache_zalloc(cache, GFP_KERNEL);
}
ALLOW_ERROR_INJECTION(fastreg_msg_cache_zalloc, NULL);

void fastreg_msg_cache_free(struct kmem_cache *cache, void *obj)
{
	kmem_cache_free(cache, obj);
}

void fastreg_msg_cache_destroy(struct kmem_cache *cache)
{
	might_sleep();
	kmem_cache_destroy(cache);
}

unsigned int fastreg_msg_cache_size(struct kmem_cache *cache)
{
	return kmem_cache_size(cache);
}

size_t fastreg_kmalloc_size(size_t size)
{
	return kmalloc_size_roundup(size);
}

u64 fastreg_ib_dma_map_single(struct ib_device *dev, void *cpu_addr, size_t size)
{
	return ib_dma_map_single(dev, cpu_addr, size, DMA_BIDIRECTIONAL);
}

int fastreg_ib_dma_mapping_error(struct ib_device *dev, u64 dma_addr)
{
	return ib_dma_mapping_error(dev, dma_addr);
}

void fastreg_ib_dma_unmap_single(struct ib_device *dev, u64 addr, size_t size)
{
	ib_dma_unmap_single(dev, addr, size, DMA_BIDIRECTIONAL);
}

void fastreg_ib_dma_sync_single_for_cpu(struct ib_device *dev, u64 addr, size_t size)
{
	ib_dma_sync_single_for_cpu(dev, addr, size, DMA_BIDIRECTIONAL);
}

void fastreg_ib_dma_sync_single_for_device(struct ib_device *dev, u64 addr, size_t size)
{
	ib_dma_sync_single_for_device(dev, addr, size, DMA_BIDIRECTIONAL);
}

__be32 fastreg_ib_port_ipv4(struct ib_device *device, u32 port)
{
	struct net_device *ndev = ib_device_get_netdev(device, port);
	const struct in_ifaddr *ifa;
	struct in_device *in_dev;
	__be32 addr = 0;

	if (!ndev)
		return 0;
	rcu_read_lock();
	in_dev = __in_dev_get_rcu(ndev);
	if (in_dev) {
		ifa = rcu_dereference(in_dev->ifa_list);
		if (ifa)
			addr = ifa->ifa_local;
	}
	rcu_read_unlock();
	dev_put(ndev);
	return addr;
}

#ifdef FASTREG_TEST
#ifdef CONFIG_FAULT_INJECTION_DEBUG_FS
static DECLARE_FAULT_ATTR(fastreg_fail_wr);
static struct dentry *fastreg_fail_wr_dir;
static u32 fastreg_fail_wr_kinds = FASTREG_FAIL_WR_ALL;

int fastreg_fail_wr_init(void)
{
	struct dentry *dir = fault_create_debugfs_attr("fastreg_fail_wr", NULL, &fastreg_fail_wr);

	if (IS_ERR(dir))
		return PTR_ERR(dir);
	debugfs_create_u32("kinds", 0600, dir, &fastreg_fail_wr_kinds);
	fastreg_fail_wr_dir = dir;
	return 0;
}

void fastreg_fail_wr_exit(void)
{
	debugfs_remove_recursive(fastreg_fail_wr_dir);
	fastreg_fail_wr_dir = NULL;
}

bool fastreg_should_fail_wr(u32 kinds)
{
	/* Off (the default): no random draw on every post. */
	if (!READ_ONCE(fastreg_fail_wr.probability))
		return false;
	return (kinds & READ_ONCE(fastreg_fail_wr_kinds)) && should_fail(&fastreg_fail_wr, 1);
}
#else
int fastreg_fail_wr_init(void)
{
	return 0;
}

void fastreg_fail_wr_exit(void)
{
}

bool fastreg_should_fail_wr(u32 kinds)
{
	return false;
}
#endif /* CONFIG_FAULT_INJECTION_DEBUG_FS */
#endif /* FASTREG_TEST */

void fastreg_hmac_sha256(const u8 *key, size_t key_len, const u8 *data, size_t data_len,
			 u8 *out)
{
	hmac_sha256_usingrawkey(key, key_len, data, data_len, out);
}

int fastreg_hold_module(struct file *file, const struct file_operations *fops)
{
	/*
	 * Not while the module's init runs (COMING): a load that then fails frees the module
	 * under the file. LIVE, then try_module_get() fails only once it is GOING.
	 */
	if (READ_ONCE(THIS_MODULE->state) != MODULE_STATE_LIVE || !try_module_get(THIS_MODULE))
		return -ENODEV;
	replace_fops(file, fops);
	/* Requests and replies, no file position: pread/pwrite/lseek refused. */
	return stream_open(file_inode(file), file);
}
