/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers for the fastreg verbs layer.
 *
 * Rust cannot call static inline functions or macros. Each helper here wraps exactly one
 * static inline verb or one macro that passes KBUILD_MODNAME, with the same arguments and
 * return value, and nothing else: all logic lives in Rust.
 *
 * Every verb fastreg calls that can fail goes through a helper here (the exported ones
 * too), marked ALLOW_ERROR_INJECTION: /sys/kernel/debug/fail_function can make any of them
 * fail (Documentation/testing.rst, "Faults"). fastreg_should_fail_wr() is the fault
 * attribute that fails work completions.
 */
#ifndef _FASTREG_HELPERS_H
#define _FASTREG_HELPERS_H

#include <linux/types.h>

struct ib_device;
struct ib_pd;
struct ib_mr;
struct ib_qp;
struct ib_send_wr;
struct ib_recv_wr;
struct ib_cq;
struct ib_qp_init_attr;
struct rdma_cm_id;
struct rdma_conn_param;
struct dentry;
struct scatterlist;
struct page;
struct workqueue_struct;
struct file;
struct file_operations;

/*
 * alloc_workqueue() is a macro (allocation profiling): an unbound queue named NAME with
 * FLAGS besides WQ_UNBOUND, taking MAX_ACTIVE work items at once.
 */
struct workqueue_struct *fastreg_alloc_wq(const char *name, unsigned int flags, int max_active);
/*
 * wait_var_event_timeout() is a macro: waits uninterruptibly, up to TIMEOUT jiffies, until
 * *COUNT is 0; returns the jiffies left (at least 1) or 0 on timeout.
 */
long fastreg_wait_zero_timeout(unsigned int *count, unsigned long timeout);
/* wake_up_var() after a full barrier: wakes fastreg_wait_zero_timeout() on COUNT. */
void fastreg_wake_zero(unsigned int *count);

/* ib_alloc_pd() is a macro that passes KBUILD_MODNAME. */
struct ib_pd *fastreg_ib_alloc_pd(struct ib_device *device, unsigned int flags);
/* ib_dealloc_pd() is static inline. */
void fastreg_ib_dealloc_pd(struct ib_pd *pd);
/* ib_inc_rkey() is static inline. */
u32 fastreg_ib_inc_rkey(u32 rkey);
/* ib_device_try_get() is static inline. */
bool fastreg_ib_device_try_get(struct ib_device *device);

/* ib_dereg_mr() is static inline. */
int fastreg_ib_dereg_mr(struct ib_mr *mr);
/* ib_update_fast_reg_key() is static inline. */
void fastreg_ib_update_fast_reg_key(struct ib_mr *mr, u8 newkey);
/* The sg form of ib_dma_sync_single_for_cpu/_for_device(), DMA_BIDIRECTIONAL. */
void fastreg_ib_dma_sync_sg_for_cpu(struct ib_device *dev, struct scatterlist *sg, int nents);
void fastreg_ib_dma_sync_sg_for_device(struct ib_device *dev, struct scatterlist *sg,
				       int nents);
/* ib_dma_map_sg() / ib_dma_unmap_sg() are static inline; direction is DMA_BIDIRECTIONAL. */
int fastreg_ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents);
void fastreg_ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents);
/* sg_set_page(), sg_dma_address() and sg_dma_len() are static inline. */
void fastreg_sg_set_page(struct scatterlist *sg, struct page *page, unsigned int len,
			 unsigned int offset);
u64 fastreg_sg_dma_address(struct scatterlist *sg);
unsigned int fastreg_sg_dma_len(struct scatterlist *sg);
/* ib_alloc_mr() of an IB_MR_TYPE_MEM_REG MR; exported, wrapped for error injection. */
struct ib_mr *fastreg_ib_alloc_mr(struct ib_pd *pd, u32 max_num_sg);
/* ib_map_mr_sg(); exported, wrapped for error injection. */
int fastreg_ib_map_mr_sg(struct ib_mr *mr, struct scatterlist *sg, int sg_nents,
			 unsigned int *sg_offset, unsigned int page_size);
/* spin_lock_bh(), spin_unlock_bh() and spin_trylock_bh() are static inline. */
void fastreg_spin_lock_bh(spinlock_t *lock);
void fastreg_spin_unlock_bh(spinlock_t *lock);
int fastreg_spin_trylock_bh(spinlock_t *lock);
/* ib_alloc_cq() is a macro that passes KBUILD_MODNAME (IB_POLL_SOFTIRQ, vector 0). */
struct ib_cq *fastreg_ib_alloc_cq(struct ib_device *dev, void *private, int nr_cqe);
/* rdma_create_qp(), rdma_connect(), rdma_accept(); exported, wrapped for error injection. */
int fastreg_rdma_create_qp(struct rdma_cm_id *id, struct ib_pd *pd,
			   struct ib_qp_init_attr *attr);
int fastreg_rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param);
int fastreg_rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param);
/*
 * The fault attribute /sys/kernel/debug/fastreg_fail_wr/ (the kernel's fault-injection
 * knobs: probability, interval, times, ...; plus "kinds", a mask of the FASTREG_FAIL_WR_*
 * below, default all): fastreg_should_fail_wr(KINDS) says whether a chain of work requests
 * holding KINDS, being posted, is to complete in error. Created by fastreg_fail_wr_init()
 * (0 or a negative errno), removed by fastreg_fail_wr_exit(); without
 * CONFIG_FAULT_INJECTION_DEBUG_FS nothing is created and nothing fails. The test build only
 * (FASTREG_TEST, Kbuild's FASTREG_TEST=1): a production module has none of it.
 */
#ifdef FASTREG_TEST
#define FASTREG_FAIL_WR_REG 1U		/* a chain with a REG_MR */
#define FASTREG_FAIL_WR_LOCAL_INV 2U	/* a chain with a LOCAL_INV */
#define FASTREG_FAIL_WR_SEND 4U		/* any other send chain (messages, RDMA WRITEs) */
#define FASTREG_FAIL_WR_RECV 8U		/* a receive (reported flushed) */
#define FASTREG_FAIL_WR_ALL 15U
int fastreg_fail_wr_init(void);
void fastreg_fail_wr_exit(void);
bool fastreg_should_fail_wr(u32 kinds);
#endif
/* ib_post_send() is static inline. */
int fastreg_ib_post_send(struct ib_qp *qp, const struct ib_send_wr *wr,
			 const struct ib_send_wr **bad_wr);
/* A fault-injection hook of fastreg_ib_post_send(): the device refuses the whole chain. */
int fastreg_post_refused(struct ib_qp *qp);
/*
 * The first IPv4 address of the net device under @port of @device (network byte order),
 * or 0: ib_device_get_netdev() plus the RCU accessors of inetdevice.h, which are inline.
 */
__be32 fastreg_ib_port_ipv4(struct ib_device *device, u32 port);
/* ib_post_recv() is static inline. */
int fastreg_ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr,
			 const struct ib_recv_wr **bad_wr);
/* ib_dma_map_single() and friends are static inline; direction is DMA_BIDIRECTIONAL. */
struct kmem_cache *fastreg_msg_cache_create(const char *name, unsigned int size);
void *fastreg_msg_cache_zalloc(struct kmem_cache *cache);
void fastreg_msg_cache_free(struct kmem_cache *cache, void *obj);
void fastreg_msg_cache_destroy(struct kmem_cache *cache);
unsigned int fastreg_msg_cache_size(struct kmem_cache *cache);
/* The size kmalloc really allocates for @size bytes (its bucket's). */
size_t fastreg_kmalloc_size(size_t size);
u64 fastreg_ib_dma_map_single(struct ib_device *dev, void *cpu_addr, size_t size);
int fastreg_ib_dma_mapping_error(struct ib_device *dev, u64 dma_addr);
void fastreg_ib_dma_unmap_single(struct ib_device *dev, u64 addr, size_t size);
void fastreg_ib_dma_sync_single_for_cpu(struct ib_device *dev, u64 addr, size_t size);
void fastreg_ib_dma_sync_single_for_device(struct ib_device *dev, u64 addr, size_t size);

/*
 * hmac_sha256_usingrawkey(), the one lib/crypto call (the console's key proofs): its header
 * is not bindgen's input, which holds RDMA items only. OUT: 32 bytes.
 */
void fastreg_hmac_sha256(const u8 *key, size_t key_len, const u8 *data, size_t data_len,
			 u8 *out);

/*
 * THIS_MODULE and replace_fops() are macros: takes this module (try_module_get()) and makes
 * FILE use FOPS, fastreg's copy of its device's file operations with .owner set, so that
 * the VFS drops the reference after release (as for a C driver's .owner = THIS_MODULE);
 * then makes FILE a stream (stream_open(): no position, no pread, pwrite or lseek).
 * -ENODEV if the module is not live (its init still runs, or it is going). See
 * src/verbs/chardev.rs.
 */
int fastreg_hold_module(struct file *file, const struct file_operations *fops);

#endif /* _FASTREG_HELPERS_H */
