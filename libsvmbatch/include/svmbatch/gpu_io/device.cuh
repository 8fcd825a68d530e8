// SPDX-License-Identifier: MIT
// GPU producers of an svmbatch::IoLoop (CUDA): a kernel asks for file data
// with svmbatch_read() and gets it, READ_FIXED by the host's pump into a
// registered, GPU-mapped buffer, with svmbatch_wait().  The ring and its
// protocol: <svmbatch/gpu_io/ring.h>; the host side: <svmbatch/gpu_io/loop.hpp>.
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
// svmbatch_read() together take consecutive tickets with one atomic, and
// while they wait (for a slot, for completions) one lane polls host memory
// for all of them: thousands of lanes polling would take the PCIe bus from
// the data.  A thread waits for a slot only between claiming and
// publishing, and the pump frees request slots without waiting for anyone,
// so more threads may ask than the ring has slots; each thread must wait
// for its own tickets in the order it took them.
#pragma once

#include <cuda/atomic>
#include <cuda_runtime.h>

#include <errno.h>
#include <stdint.h>

#include <svmbatch/gpu_io/ring.h>

/// How a request ended: status 0 or -errno (gpu_io/ring.h), bytes read.
struct svmbatch_io_result {
	int status;
	unsigned long long bytes;
};

/// Host: a queue for ring (IoLoop::device_queue()), its counter allocated
/// and zeroed in device memory; max_poll_ns: see gpu_io/ring.h.
inline cudaError_t svmbatch_gpu_queue_create(const svmbatch_io_queue &ring, svmbatch_gpu_queue *out,
					     uint32_t max_poll_ns = 8192)
{
	out->ring = ring;
	out->tail = nullptr;
	out->max_poll_ns = max_poll_ns;
	out->reserved = 0;
	cudaError_t e = cudaMalloc(&out->tail, sizeof(*out->tail));
	if (e == cudaSuccess)
		e = cudaMemset(out->tail, 0, sizeof(*out->tail));
	return e;
}

/// Host: free the counter.  The loop's tickets start again at 0 with a new
/// loop only: one queue per loop.
inline void svmbatch_gpu_queue_destroy(svmbatch_gpu_queue *q)
{
	cudaFree(q->tail);
	q->tail = nullptr;
}

namespace svmbatch_detail {

using system_u64 = cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>;
using system_u32 = cuda::atomic_ref<unsigned int, cuda::thread_scope_system>;

__device__ inline unsigned long long &u64(uint64_t &v)
{
	return reinterpret_cast<unsigned long long &>(v);
}

__device__ inline bool flag(uint32_t &v)
{
	return system_u32(reinterpret_cast<unsigned int &>(v)).load(cuda::memory_order_relaxed) !=
	       0;
}

/// Poll politely: host memory is across PCIe, and every poll is a read.
__device__ inline void back_off(unsigned &ns, unsigned max_ns)
{
	__nanosleep(ns);
	ns = ns * 2 < max_ns ? ns * 2 : max_ns;
}

/// Wait, with the converged lanes of `active`, until ready(lane) holds for
/// each (or the pump ended: false).  Polling host memory costs a PCIe read
/// each time, and thousands of lanes polling would take the bus from the
/// data: so the lowest lane still waiting polls alone, with back-off, and
/// the others look once each time it sees its own condition hold.
template <typename Ready>
__device__ inline bool warp_wait(unsigned active, svmbatch_io_ring_header *h, unsigned max_ns,
				 Ready ready)
{
	const unsigned lane = threadIdx.x % 32;
	bool done = false;

	for (;;) {
		if (!done)
			done = ready();
		const unsigned waiting = __ballot_sync(active, !done);
		if (!waiting)
			return true;
		if (lane == static_cast<unsigned>(__ffs(waiting) - 1))
			for (unsigned ns = 32; !ready() && !flag(h->stopped);)
				back_off(ns, max_ns);
		if (__any_sync(active, flag(h->stopped)))
			return __all_sync(active, done || ready());
	}
}

} // namespace svmbatch_detail

/// Ask for length bytes of file (IoLoop::add_file) at offset, into caller
/// buffer `buffer` of the loop's registration at buffer_offset.  Returns
/// the ticket to wait for, or -1 when the loop is closed (nothing claimed)
/// or its pump ended while this waited for a slot.  Call it from
/// converged lanes: they share one atomic, and one of them polls for
/// their slots.
__device__ inline long long svmbatch_read(const svmbatch_gpu_queue &q, uint32_t file,
					  uint64_t offset, uint64_t length, uint32_t buffer,
					  uint64_t buffer_offset, uint64_t tag = 0)
{
	using namespace svmbatch_detail;
	svmbatch_io_ring_header *h = q.ring.header;
	const unsigned active = __activemask();

	if (__any_sync(active, flag(h->closed)))
		return -1;
	// One atomic per warp: the lowest active lane takes tickets for all.
	const unsigned lane = threadIdx.x % 32;
	const int leader = __ffs(active) - 1;
	const unsigned rank = __popc(active & ((1u << lane) - 1));
	unsigned long long base = 0;
	if (static_cast<int>(lane) == leader)
		base = atomicAdd(q.tail, static_cast<unsigned long long>(__popc(active)));
	base = __shfl_sync(active, base, leader);
	const unsigned long long t = base + rank;

	svmbatch_io_request *slot = svmbatch_io_request_slot(&q.ring, t);
	system_u64 seq(u64(slot->seq));
	if (!warp_wait(active, h, q.max_poll_ns, [&] {
		    return seq.load(cuda::memory_order_acquire) == svmbatch_io_seq_free(t);
	    }))
		return -1; // the pump ended: nobody frees the slot
	svmbatch_io_fill_read(slot, file, offset, length, buffer, buffer_offset, tag);
	// The slot's fields reach host memory before its seq says published.
	__threadfence_system();
	seq.store(svmbatch_io_seq_published(t), cuda::memory_order_release);
	return static_cast<long long>(t);
}

/// Wait for ticket's completion and free its slot.  {-ESHUTDOWN, 0} if the
/// loop's pump ended without completing it; {-EINVAL, 0} for ticket -1.
/// Call it from converged lanes (one of them polls for all).
__device__ inline svmbatch_io_result svmbatch_wait(const svmbatch_gpu_queue &q, long long ticket)
{
	using namespace svmbatch_detail;
	const unsigned active = __activemask();
	const auto t = static_cast<unsigned long long>(ticket);
	svmbatch_io_completion *c = svmbatch_io_completion_slot(&q.ring, t);
	system_u64 seq(u64(c->seq));
	const unsigned long long published = svmbatch_io_seq_published(t);

	const bool ended = !warp_wait(active, q.ring.header, q.max_poll_ns, [&] {
		return ticket < 0 || seq.load(cuda::memory_order_acquire) == published;
	});
	if (ticket < 0)
		return {-EINVAL, 0};
	if (ended && seq.load(cuda::memory_order_acquire) != published)
		return {-ESHUTDOWN, 0};
	// The acquire above orders these reads after the pump's release.
	svmbatch_io_result r{c->status, c->bytes};
	seq.store(svmbatch_io_seq_next_lap(q.ring.mask, t), cuda::memory_order_release);
	return r;
}
/// Ticket's completion if it is there (slot freed): true and *out.
__device__ inline bool svmbatch_try_wait(const svmbatch_gpu_queue &q, long long ticket,
					 svmbatch_io_result *out)
{
	using namespace svmbatch_detail;
	const auto t = static_cast<unsigned long long>(ticket);
	svmbatch_io_completion *c = svmbatch_io_completion_slot(&q.ring, t);
	system_u64 seq(u64(c->seq));

	if (ticket < 0 || seq.load(cuda::memory_order_acquire) != svmbatch_io_seq_published(t))
		return false;
	*out = {c->status, c->bytes};
	seq.store(svmbatch_io_seq_next_lap(q.ring.mask, t), cuda::memory_order_release);
	return true;
}
