// SPDX-License-Identifier: MIT
// GPU producers of an svmbatch::IoLoop, for CUDA (nvcc) and HIP (hipcc):
// a kernel asks for file data with svmbatch_read(), or asks for a buffer
// to be written to a file with svmbatch_write(), and learns how it ended
// with svmbatch_wait().  The host's pump moves the bytes with READ_FIXED /
// WRITE_FIXED between the file and a registered, GPU-mapped buffer.  The
// ring and its protocol: <svmbatch/gpu_io/ring.h>; the host side:
// <svmbatch/gpu_io/loop.hpp>.
//
//   host:   svmbatch::IoLoopOptions o;  o.gpu = &cuda;
//           svmbatch::IoLoop loop(ctx, reg, o);
//           uint32_t f = loop.add_file(fd);
//           svmbatch_gpu_queue q;
//           svmbatch_gpu_queue_create(loop.device_queue(), &q);
//           kernel<<<sms, 256>>>(q, ...);
//   kernel: long long t = svmbatch_read(q, f, offset, length, buffer, 0);
//           svmbatch_io_result r = svmbatch_wait(q, t);
//           // r.status == 0: the bytes are in the buffer (its device pointer)
//
// Publication is warp-aggregated: the lanes of a warp that call
// svmbatch_read() or svmbatch_write() together take consecutive tickets
// with one atomic, and while they wait (for a slot, for completions) one
// lane polls host memory for all of them: thousands of lanes polling would
// take the PCIe bus from the data.  A thread waits for a slot only between
// claiming and publishing, and the pump frees request slots without
// waiting for anyone, so more threads may ask than the ring has slots;
// each thread must wait for its own tickets in the order it took them.
//
// One header for both compilers: the protocol's steps are ring.h's; what
// differs is only how a warp (CUDA: 32 lanes; AMD: a wavefront of 64 or
// 32) votes and shuffles, how a lane sleeps, and the system-scope atomics
// (svmbatch_detail below).
#pragma once

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <cuda/atomic>
#include <cuda_runtime.h>
#endif

#include <errno.h>
#include <stdint.h>

#include <svmbatch/gpu_io/ring.h>

/// How a request ended: status 0 or -errno (gpu_io/ring.h), bytes moved.
struct svmbatch_io_result {
	int status;
	unsigned long long bytes;
};

#if defined(__HIPCC__)
using svmbatch_gpu_error_t = hipError_t;
#else
using svmbatch_gpu_error_t = cudaError_t;
#endif

/// Host: a queue for ring (IoLoop::device_queue()), its counter allocated
/// and zeroed in device memory; max_poll_ns, fast_poll_ns: see gpu_io/ring.h.
inline svmbatch_gpu_error_t
svmbatch_gpu_queue_create(const svmbatch_io_queue &ring, svmbatch_gpu_queue *out,
			  uint32_t max_poll_ns = SVMBATCH_GPU_MAX_POLL_NS,
			  uint32_t fast_poll_ns = SVMBATCH_GPU_FAST_POLL_NS)
{
	out->ring = ring;
	out->tail = nullptr;
	out->max_poll_ns = max_poll_ns;
	out->fast_poll_ns = fast_poll_ns;
#if defined(__HIPCC__)
	hipError_t e = hipMalloc(&out->tail, sizeof(*out->tail));
	if (e == hipSuccess)
		e = hipMemset(out->tail, 0, sizeof(*out->tail));
#else
	cudaError_t e = cudaMalloc(&out->tail, sizeof(*out->tail));
	if (e == cudaSuccess)
		e = cudaMemset(out->tail, 0, sizeof(*out->tail));
#endif
	return e;
}

/// Host: free the counter.  The loop's tickets start again at 0 with a new
/// loop only: one queue per loop.
inline void svmbatch_gpu_queue_destroy(svmbatch_gpu_queue *q)
{
#if defined(__HIPCC__)
	(void)hipFree(q->tail);
#else
	cudaFree(q->tail);
#endif
	q->tail = nullptr;
}

namespace svmbatch_detail {

#if defined(__HIPCC__)
/// A wavefront's lanes: 64 bits (wave64) or 32 (wave32).
using lanes_t = unsigned long long;

__device__ inline lanes_t active_lanes()
{
	return __ballot(1);
}
__device__ inline unsigned lane_id()
{
	return __lane_id();
}
/// AMD lanes of a wavefront run in lock-step: the mask is implicit.
__device__ inline lanes_t ballot(lanes_t, bool p)
{
	return __ballot(p);
}
__device__ inline bool any(lanes_t, bool p)
{
	return __any(p);
}
__device__ inline bool all(lanes_t, bool p)
{
	return __all(p);
}
__device__ inline unsigned long long broadcast(lanes_t, unsigned long long v, int lane)
{
	return __shfl(v, lane);
}
__device__ inline int lowest(lanes_t m)
{
	return __ffsll(static_cast<long long>(m)) - 1;
}
__device__ inline unsigned count(lanes_t m)
{
	return __popcll(m);
}
/// s_sleep sleeps 64 clocks a unit (about 30-60 ns); it takes a constant.
__device__ inline void sleep_ns(unsigned ns)
{
	for (unsigned t = 0; t < ns; t += 64)
		__builtin_amdgcn_s_sleep(1);
}
/// System scope (host memory): the compiler's atomics are system-scope by
/// default on AMDGPU.
__device__ inline unsigned long long load_acquire(uint64_t *p)
{
	return __atomic_load_n(reinterpret_cast<unsigned long long *>(p), __ATOMIC_ACQUIRE);
}
__device__ inline void store_release(uint64_t *p, unsigned long long v)
{
	__atomic_store_n(reinterpret_cast<unsigned long long *>(p), v, __ATOMIC_RELEASE);
}
__device__ inline bool flag(uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED) != 0;
}
#else
using lanes_t = unsigned;

__device__ inline lanes_t active_lanes()
{
	return __activemask();
}
__device__ inline unsigned lane_id()
{
	return threadIdx.x % 32;
}
__device__ inline lanes_t ballot(lanes_t m, bool p)
{
	return __ballot_sync(m, p);
}
__device__ inline bool any(lanes_t m, bool p)
{
	return __any_sync(m, p);
}
__device__ inline bool all(lanes_t m, bool p)
{
	return __all_sync(m, p);
}
__device__ inline unsigned long long broadcast(lanes_t m, unsigned long long v, int lane)
{
	return __shfl_sync(m, v, lane);
}
__device__ inline int lowest(lanes_t m)
{
	return __ffs(m) - 1;
}
__device__ inline unsigned count(lanes_t m)
{
	return __popc(m);
}
__device__ inline void sleep_ns(unsigned ns)
{
	__nanosleep(ns);
}
using system_u64 = cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>;
using system_u32 = cuda::atomic_ref<unsigned int, cuda::thread_scope_system>;
__device__ inline unsigned long long load_acquire(uint64_t *p)
{
	return system_u64(*reinterpret_cast<unsigned long long *>(p))
		.load(cuda::memory_order_acquire);
}
__device__ inline void store_release(uint64_t *p, unsigned long long v)
{
	system_u64(*reinterpret_cast<unsigned long long *>(p)).store(v, cuda::memory_order_release);
}
__device__ inline bool flag(uint32_t *p)
{
	return system_u32(*reinterpret_cast<unsigned int *>(p)).load(cuda::memory_order_relaxed) !=
	       0;
}
#endif

/// Wait, with the converged lanes of `active`, until ready() holds for
/// each (or the pump ended: false).  Polling host memory costs a PCIe read
/// each time, and thousands of lanes polling would take the bus from the
/// data: so the lowest lane still waiting polls alone, at the shortest
/// interval for the first q.fast_poll_ns, then backing off up to
/// q.max_poll_ns (svmbatch_io_poll_sleep_ns), and the others look once
/// each time it sees its own condition hold.  The poller reads its own
/// condition each poll, and the ring's `stopped` flag, which every
/// waiting warp shares, only from fast_poll_ns on at doubling intervals
/// (svmbatch_io_next_stop_check_ns): a warp notices that the pump ended
/// within SVMBATCH_IO_STOP_CHECK_MAX_NS, or its wait so far if shorter.
template <typename Ready>
__device__ inline bool warp_wait(lanes_t active, const svmbatch_gpu_queue &q, Ready ready)
{
	svmbatch_io_ring_header *h = q.ring.header;
	const unsigned lane = lane_id();
	bool done = false, ended = false;
	unsigned long long waited = 0, look = q.fast_poll_ns;
	unsigned ns = 0;

	for (;;) {
		if (!done)
			done = ready();
		const lanes_t waiting = ballot(active, !done);
		if (!waiting)
			return true;
		if (static_cast<int>(lane) == lowest(waiting))
			for (;;) {
				ns = svmbatch_io_poll_sleep_ns(waited, ns, q.fast_poll_ns,
							       q.max_poll_ns);
				sleep_ns(ns);
				waited += ns + SVMBATCH_IO_POLL_ROUND_TRIP_NS;
				if (ready()) {
					done = true;
					break;
				}
				if (waited < look)
					continue;
				look = svmbatch_io_next_stop_check_ns(waited, q.fast_poll_ns);
				if (flag(&h->stopped)) {
					ended = true;
					break;
				}
			}
		if (any(active, ended))
			return all(active, done || ready());
	}
}

/// Claim tickets for the converged lanes (one atomic), wait for this
/// lane's slot, fill it, publish it: the ticket, or -1.  The slot's seq
/// also says whether the loop is closed (SVMBATCH_IO_SEQ_CLOSED): one read
/// of host memory where a read of the header's flag before the claim
/// would be a second round trip.
__device__ inline long long publish(const svmbatch_gpu_queue &q, uint32_t op, uint32_t file,
				    uint64_t offset, uint64_t length, uint32_t buffer,
				    uint64_t buffer_offset, uint64_t tag)
{
	const lanes_t active = active_lanes();

	// One atomic per warp: the lowest active lane takes tickets for all.
	const unsigned lane = lane_id();
	const int leader = lowest(active);
	const unsigned rank = count(active & ((static_cast<lanes_t>(1) << lane) - 1));
	unsigned long long base = 0;
	if (static_cast<int>(lane) == leader)
		base = atomicAdd(q.tail, static_cast<unsigned long long>(count(active)));
	base = broadcast(active, base, leader);
	const unsigned long long t = base + rank;

	svmbatch_io_request *slot = svmbatch_io_request_slot(&q.ring, t);
	unsigned long long seq = 0;
	if (!warp_wait(active, q, [&] {
		    seq = load_acquire(&slot->seq);
		    return svmbatch_io_seq_open(seq) == svmbatch_io_seq_free(t);
	    }))
		return -1; // the pump ended: nobody frees the slot
	if (svmbatch_io_seq_closed(seq)) {
		// Closed: give t up, so that the pump passes it.
		store_release(&slot->seq, svmbatch_io_seq_given_up(t));
		return -1;
	}
	svmbatch_io_fill(slot, op, file, offset, length, buffer, buffer_offset, tag);
	// The slot's fields reach host memory before its seq says published.
	__threadfence_system();
	store_release(&slot->seq, svmbatch_io_seq_published(t));
	return static_cast<long long>(t);
}

} // namespace svmbatch_detail

/// Ask for length bytes of file (IoLoop::add_file) at offset, into caller
/// buffer `buffer` of the loop's registration at buffer_offset.  Returns
/// the ticket to wait for, or -1 when the loop is closed (the ticket given
/// up, nothing published) or its pump ended while this waited for a slot.
/// Call it from converged lanes: they share one atomic, and one of them
/// polls for their slots.
__device__ inline long long svmbatch_read(const svmbatch_gpu_queue &q, uint32_t file,
					  uint64_t offset, uint64_t length, uint32_t buffer,
					  uint64_t buffer_offset, uint64_t tag = 0)
{
	return svmbatch_detail::publish(q, SVMBATCH_IO_READ, file, offset, length, buffer,
					buffer_offset, tag);
}

/// Ask for length bytes of caller buffer `buffer` at buffer_offset to be
/// written to file at offset (WRITE_FIXED; nothing outside that range of
/// the buffer goes to the file).  The bytes must be in the buffer before
/// the call: the publish's system fence orders this lane's own stores to
/// the buffer before the request; where other lanes stored them, each of
/// those calls __threadfence_system() and then all meet at a __syncwarp()
/// (or __syncthreads()) before this call.  The buffer must not change
/// until the wait returned.  Returns the ticket, or -1 as svmbatch_read()
/// does.
__device__ inline long long svmbatch_write(const svmbatch_gpu_queue &q, uint32_t file,
					   uint64_t offset, uint64_t length, uint32_t buffer,
					   uint64_t buffer_offset, uint64_t tag = 0)
{
	return svmbatch_detail::publish(q, SVMBATCH_IO_WRITE, file, offset, length, buffer,
					buffer_offset, tag);
}

/// Ask for length bytes of file at offset, into device buffer
/// `device_buffer` of the loop (IoLoopOptions::device) at buffer_offset:
/// the loop reads them into its staging and its copy engine copies them
/// to device memory, so the warp copies nothing over PCIe.  The bytes are
/// there once the wait returned (after its acquire fence).  Returns the
/// ticket, or -1 as svmbatch_read() does.
__device__ inline long long svmbatch_read_device(const svmbatch_gpu_queue &q, uint32_t file,
						 uint64_t offset, uint64_t length,
						 uint32_t device_buffer, uint64_t buffer_offset,
						 uint64_t tag = 0)
{
	return svmbatch_detail::publish(q, SVMBATCH_IO_READ_DEVICE, file, offset, length,
					device_buffer, buffer_offset, tag);
}

/// Wait for ticket's completion and free its slot.  {-ESHUTDOWN, 0} if the
/// loop's pump ended without completing it; {-EINVAL, 0} for ticket -1.
/// Call it from converged lanes (one of them polls for all).
__device__ inline svmbatch_io_result svmbatch_wait(const svmbatch_gpu_queue &q, long long ticket)
{
	using namespace svmbatch_detail;
	const lanes_t active = active_lanes();
	const auto t = static_cast<unsigned long long>(ticket);
	svmbatch_io_completion *c = svmbatch_io_completion_slot(&q.ring, t);
	const unsigned long long published = svmbatch_io_seq_published(t);

	const bool ended = !warp_wait(active, q, [&] {
		return ticket < 0 || load_acquire(&c->seq) == published;
	});
	if (ticket < 0)
		return {-EINVAL, 0};
	if (ended && load_acquire(&c->seq) != published)
		return {-ESHUTDOWN, 0};
	// The acquire above orders these reads after the pump's release.
	svmbatch_io_result r{c->status, c->bytes};
	store_release(&c->seq, svmbatch_io_seq_next_lap(q.ring.mask, t));
	return r;
}

/// Ticket's completion if it is there (slot freed): true and *out.
__device__ inline bool svmbatch_try_wait(const svmbatch_gpu_queue &q, long long ticket,
					 svmbatch_io_result *out)
{
	using namespace svmbatch_detail;
	const auto t = static_cast<unsigned long long>(ticket);
	svmbatch_io_completion *c = svmbatch_io_completion_slot(&q.ring, t);

	if (ticket < 0 || load_acquire(&c->seq) != svmbatch_io_seq_published(t))
		return false;
	*out = {c->status, c->bytes};
	store_release(&c->seq, svmbatch_io_seq_next_lap(q.ring.mask, t));
	return true;
}
