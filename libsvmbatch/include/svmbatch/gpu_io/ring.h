/* SPDX-License-Identifier: MIT */
/*
 * The request ring of svmbatch::IoLoop: what producers (GPU threads through
 * <svmbatch/gpu_io/device.cuh>, CPU threads through svmbatch::IoLoopClient) and
 * the loop's pump share, in host memory that the GPU maps.  Plain C, so
 * that CUDA and HIP device code, C programs and the library agree on it.
 *
 * The protocol (Documentation/gpu_io.rst draws it), per request:
 *
 *  1. claim: the producer takes a ticket t = (*tail)++ (an atomic in the
 *     producer's memory: device memory for a GPU, the ring for the CPU).
 *     Request slot and completion slot are both [t & mask].
 *  2. wait until requests[t & mask].seq == t (the slot is free for ticket
 *     t: the pump has taken ticket t - slots out of it), or t with
 *     SVMBATCH_IO_SEQ_CLOSED set: the loop is closed, and the producer
 *     gives ticket t up: it stores seq = (t + 1) | CLOSED and publishes
 *     nothing;
 *  3. fill the slot's fields; fence (GPU: __threadfence_system(); CPU:
 *     release); store seq = t + 1: published.
 *  4. the pump, in ticket order: load seq with acquire; at t + 1 it copies
 *     the request out and stores seq = t + slots with release (free for
 *     the ticket one lap later), validates the request against the
 *     registration and the file, and hands it at once to one of its I/O
 *     threads, which submits READ_FIXED (or WRITE_FIXED) on its own ring.
 *  5. as soon as the transfer ended (or the request was refused), the
 *     thread that saw it end, without waiting for any other request,
 *     checks that completions[t & mask].seq == t (the waiter of ticket
 *     t - slots is done with it; else the completion is deferred, never
 *     waited for), writes status and bytes, and stores seq = t + 1 with
 *     release.
 *  6. the producer's wait: load seq until it is t + 1; fence (acquire);
 *     read status and bytes; store seq = t + slots (free for the
 *     completion one lap later).
 *
 * Every ticket is completed exactly once, errors included: status is 0 or
 * a negative errno, bytes how many bytes were read.  A request slot is
 * held only between claim and publish, which no wait separates, and the
 * pump frees request slots without waiting for anyone: a producer may
 * hold any number of requests it has not waited for, as long as it waits
 * for its own tickets in the order it took them (the completion of ticket
 * t needs ticket t - slots' waiter to be done with the slot).
 *
 * Closing: once the loop stops taking requests, the pump sets
 * SVMBATCH_IO_SEQ_CLOSED in every free request slot's seq (a compare and
 * swap from t to t | CLOSED: a slot that a producer publishes meanwhile
 * stays published, and the stopping pump completes it with -ECANCELED),
 * and in each slot it frees from then on.  A producer thus learns that
 * the loop is closed from the one read of its slot that it makes anyway,
 * not from a second read of the header's flag before it claims.  A ticket
 * given up (step 2) is taken in its turn like a request, but nothing is
 * done and nothing completed for it (nobody waits): the pump passes it,
 * and a request published after it is still completed with -ECANCELED.
 */
#ifndef SVMBATCH_IO_RING_H
#define SVMBATCH_IO_RING_H

#include <stdint.h> /* NOLINT(modernize-deprecated-headers): a C header */

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this layout; IoLoop and the device header check it. */
#define SVMBATCH_IO_RING_VERSION 2

/* Request flags: the operation. */
#define SVMBATCH_IO_READ	0u /* file -> buffer (READ_FIXED) */
#define SVMBATCH_IO_WRITE	1u /* buffer -> file (WRITE_FIXED) */
/*
 * file -> device memory: READ_FIXED into the loop's staging, then the
 * GPU's copy engine; completed once the copy ended.  @buffer indexes the
 * loop's device buffers (IoLoopOptions::device), not its registration.
 */
#define SVMBATCH_IO_READ_DEVICE 2u

/*
 * One request slot, 64 bytes (a cache line; the GPU writes it whole).
 * @seq: the slot protocol above; written by producer and pump only.
 * @file: index from IoLoop::add_file().
 * @buffer: the caller buffer of the loop's registration to read into
 *	(SVMBATCH_IO_READ) or to write from (SVMBATCH_IO_WRITE); for
 *	SVMBATCH_IO_READ_DEVICE, the device buffer to read into.
 * @file_offset, @length: what to read or write.
 * @buffer_offset: where in the buffer.
 * @tag: the producer's, untouched.
 */
struct svmbatch_io_request {
	uint64_t seq;
	uint32_t file;
	uint32_t buffer;
	uint64_t file_offset;
	uint64_t length;
	uint64_t buffer_offset;
	uint64_t tag;
	uint32_t flags;
	uint32_t reserved[3];
};

/*
 * One completion slot, 32 bytes.
 * @seq: the slot protocol above.
 * @status: 0, or a negative errno: -EINVAL (no such buffer, or the range
 *	reaches past it, or an unknown operation: SVMBATCH_IO_READ_DEVICE on
 *	a loop without device buffers; a request naming the staging buffer), -EACCES (a read into a
 *	read-only buffer; a read from a file not open for reading; a write
 *	to a file not open for writing or opened O_APPEND, where the offset
 *	would not be honoured), -EBADF (no such file, or a closed one),
 *	-ENODATA (a read met the end of the file first; bytes says how much
 *	was read), -ECANCELED (the loop stopped before the transfer ran), or
 *	the transfer's own errno (-EIO, -ENOSPC, -EFBIG...), or the copy
 *	engine's (a device read's copy that failed).
 * @bytes: bytes moved (read into the buffer, or written to the file).
 */
struct svmbatch_io_completion {
	uint64_t seq;
	int32_t status;
	uint32_t reserved;
	uint64_t bytes;
	uint64_t tag;
};

/*
 * The ring's header, at the start of the ring memory.
 * @version: SVMBATCH_IO_RING_VERSION.
 * @slots: number of request slots = completion slots, a power of two.
 * @closed: non-zero once the loop stops taking requests: a CPU producer
 *	checks it before claiming and gives up; every producer gives up
 *	when its slot's seq has SVMBATCH_IO_SEQ_CLOSED (the protocol above).
 *	What was published still gets taken: the stopping pump completes it
 *	with -ECANCELED.
 * @stopped: non-zero once the pump has ended: a producer still waiting for
 *	a slot or a completion gives up (-ESHUTDOWN).  GPU waiters look at
 *	it seldom (svmbatch_io_next_stop_check_ns()).
 * @host_tail: the ticket counter of CPU producers (GPU producers keep
 *	theirs in device memory: one ring has one kind of producer).
 */
struct svmbatch_io_ring_header {
	uint32_t version;
	uint32_t slots;
	uint32_t closed;
	uint32_t stopped;
	uint64_t host_tail;
	uint64_t pad[5];
};

/*
 * What a producer needs: where the slots are, in its own address space
 * (device pointers for a GPU, host pointers for a CPU).
 */
struct svmbatch_io_queue {
	struct svmbatch_io_ring_header *header;
	struct svmbatch_io_request *requests;
	struct svmbatch_io_completion *completions;
	uint32_t mask; /* slots - 1 */
	uint32_t reserved;
};

/*
 * What a GPU kernel gets (<svmbatch/gpu_io/device.cuh>): the ring, in device
 * pointers, and the ticket counter, in device memory (one atomic add per
 * warp; in host memory it would cost a PCIe round trip per ticket).
 * @max_poll_ns: the longest a waiting warp sleeps between two polls of
 *	host memory (the back-off grows up to it): longer costs latency,
 *	shorter costs PCIe reads that the data needs.
 * @fast_poll_ns: for this long after it starts waiting, a warp polls at
 *	the shortest interval (svmbatch_io_poll_sleep_ns()): the time one
 *	request takes when the pump is not busy; after it, the back-off.
 */
struct svmbatch_gpu_queue {
	struct svmbatch_io_queue ring;
	unsigned long long *tail;
	uint32_t max_poll_ns;
	uint32_t fast_poll_ns;
};

/* The defaults of svmbatch_gpu_queue_create() (<svmbatch/gpu_io/device.cuh>). */
#define SVMBATCH_GPU_MAX_POLL_NS  8192u
#define SVMBATCH_GPU_FAST_POLL_NS 20000u

/*
 * The protocol's steps, written once for every side: the library's CPU
 * producer and pump, and the CUDA/HIP device header.  Each side supplies
 * only its own atomics (acquire loads and release stores of seq) and,
 * on a GPU, the system fence before a publish.
 */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define SVMBATCH_IO_STEP static inline __host__ __device__
#else
#define SVMBATCH_IO_STEP static inline
#endif

/* Step 1: ticket t's request and completion slots. */
SVMBATCH_IO_STEP struct svmbatch_io_request *
svmbatch_io_request_slot(const struct svmbatch_io_queue *q, uint64_t t)
{
	return &q->requests[t & q->mask];
}

SVMBATCH_IO_STEP struct svmbatch_io_completion *
svmbatch_io_completion_slot(const struct svmbatch_io_queue *q, uint64_t t)
{
	return &q->completions[t & q->mask];
}

/* Steps 2 and 5: the seq of a slot that ticket t may write. */
SVMBATCH_IO_STEP uint64_t svmbatch_io_seq_free(uint64_t t)
{
	return t;
}

/* Steps 3 and 5: the seq that publishes ticket t's request or completion. */
SVMBATCH_IO_STEP uint64_t svmbatch_io_seq_published(uint64_t t)
{
	return t + 1;
}

/*
 * Closing (above): the bit the pump sets in free request slots' seq once
 * the loop is closed; a producer that finds its slot free for its ticket
 * with the bit set gives the ticket up (svmbatch_io_seq_given_up()).
 */
#define SVMBATCH_IO_SEQ_CLOSED (1ull << 63)

SVMBATCH_IO_STEP int svmbatch_io_seq_closed(uint64_t seq)
{
	return (seq & SVMBATCH_IO_SEQ_CLOSED) != 0;
}

/* Step 2: the seq without the closed bit (a free slot's ticket). */
SVMBATCH_IO_STEP uint64_t svmbatch_io_seq_open(uint64_t seq)
{
	return seq & ~SVMBATCH_IO_SEQ_CLOSED;
}

/* Step 2 (closed): the seq that gives ticket t up; the pump passes it. */
SVMBATCH_IO_STEP uint64_t svmbatch_io_seq_given_up(uint64_t t)
{
	return (t + 1) | SVMBATCH_IO_SEQ_CLOSED;
}

/* Step 4 (closing): the seq that hands the slot of ticket t (taken) on,
 * closed, to ticket t + slots. */
SVMBATCH_IO_STEP uint64_t svmbatch_io_seq_next_lap_closed(uint32_t mask, uint64_t t)
{
	return (t + (uint64_t)mask + 1) | SVMBATCH_IO_SEQ_CLOSED;
}

/* Steps 4 and 6: the seq that hands ticket t's slot to ticket t + slots. */
SVMBATCH_IO_STEP uint64_t svmbatch_io_seq_next_lap(uint32_t mask, uint64_t t)
{
	return t + (uint64_t)mask + 1;
}

/* Step 3: a request's fields, written before seq publishes them. */
SVMBATCH_IO_STEP void svmbatch_io_fill(struct svmbatch_io_request *slot, uint32_t op, uint32_t file,
				       uint64_t file_offset, uint64_t length, uint32_t buffer,
				       uint64_t buffer_offset, uint64_t tag)
{
	slot->file = file;
	slot->buffer = buffer;
	slot->file_offset = file_offset;
	slot->length = length;
	slot->buffer_offset = buffer_offset;
	slot->tag = tag;
	slot->flags = op;
}

SVMBATCH_IO_STEP void svmbatch_io_fill_read(struct svmbatch_io_request *slot, uint32_t file,
					    uint64_t file_offset, uint64_t length, uint32_t buffer,
					    uint64_t buffer_offset, uint64_t tag)
{
	svmbatch_io_fill(slot, SVMBATCH_IO_READ, file, file_offset, length, buffer, buffer_offset,
			 tag);
}

/*
 * Steps 2 and 6 on a GPU: how long a waiting warp sleeps before its next
 * poll of host memory, having waited waited_ns so far and slept last_ns
 * before the last poll.  Within fast_ns of the start, the shortest sleep
 * (SVMBATCH_IO_POLL_MIN_NS: a poll is a PCIe round trip of about 1 us
 * anyway), so that one request is seen within about a microsecond of its
 * completion; after it, the sleep doubles up to max_ns, so that thousands
 * of waiting warps leave the bus to the data.  The device header reads no
 * clock: it counts waited_ns as its sleeps plus
 * SVMBATCH_IO_POLL_ROUND_TRIP_NS (about a PCIe round trip) a poll.
 */
#define SVMBATCH_IO_POLL_MIN_NS	       64u
#define SVMBATCH_IO_POLL_ROUND_TRIP_NS 1000u

SVMBATCH_IO_STEP uint32_t svmbatch_io_poll_sleep_ns(uint64_t waited_ns, uint32_t last_ns,
						    uint32_t fast_ns, uint32_t max_ns)
{
	uint32_t next;

	if (max_ns < SVMBATCH_IO_POLL_MIN_NS)
		max_ns = SVMBATCH_IO_POLL_MIN_NS;
	if (waited_ns < fast_ns || last_ns < SVMBATCH_IO_POLL_MIN_NS)
		return SVMBATCH_IO_POLL_MIN_NS;
	next = last_ns > max_ns / 2 ? max_ns : last_ns * 2;
	return next;
}

/*
 * Steps 2 and 6 on a GPU: when a waiting warp next looks at the header's
 * stopped flag, looking now, having waited waited_ns.  Every waiting warp
 * reads that one line of host memory, and many GPU readers of one line
 * take the PCIe link from the data: on the H100, 132 warps each reading
 * one line every 2 us held the copy engines to 1.5 GB/s (47 alone) where
 * as many reading lines of their own cost under a tenth.  So the first
 * look is at fast_ns, and the interval doubles with the wait up to
 * SVMBATCH_IO_STOP_CHECK_MAX_NS: the longest a warp that waits takes to
 * notice that the pump ended, beyond the wait it has had.
 */
#define SVMBATCH_IO_STOP_CHECK_MAX_NS 1000000u

SVMBATCH_IO_STEP uint64_t svmbatch_io_next_stop_check_ns(uint64_t waited_ns, uint32_t fast_ns)
{
	uint64_t step = waited_ns < fast_ns ? fast_ns : waited_ns;

	if (step < SVMBATCH_IO_POLL_ROUND_TRIP_NS)
		step = SVMBATCH_IO_POLL_ROUND_TRIP_NS;
	if (step > SVMBATCH_IO_STOP_CHECK_MAX_NS)
		step = SVMBATCH_IO_STOP_CHECK_MAX_NS;
	return waited_ns + step;
}

#undef SVMBATCH_IO_STEP

#ifdef __cplusplus
}
#endif

#endif
