// SPDX-License-Identifier: MIT
// The C API of IoLoop and of its CPU producers.
#include <cerrno>
#include <chrono>
#include <memory>

#include "capi/c_api_internal.hpp"

struct svmbatch_io_loop {
	svmbatch_io_loop(svmbatch::Context &ctx, const svmbatch::Registration &reg,
			 const svmbatch::IoLoopOptions &options)
		: loop(ctx, reg, options)
	{}
	svmbatch::IoLoop loop;
};

using svmbatch::capi::guarded;
using svmbatch::capi::invalid;
using svmbatch::capi::last_error;

extern "C" {

int svmbatch_io_loop_create(svmbatch_ctx *ctx, const svmbatch_reg *reg,
			    const struct svmbatch_io_loop_options *options, svmbatch_io_loop **loop)
{
	if (!ctx || !reg || !loop)
		return invalid("svmbatch_io_loop_create: NULL argument");
	*loop = nullptr;
	return guarded(nullptr, [&] {
		svmbatch::IoLoopOptions o;

		if (options) {
			if (options->slots)
				o.slots = options->slots;
			if (options->io_threads)
				o.io.threads = options->io_threads;
			if (options->max_batch)
				o.max_batch = options->max_batch;
			if (options->max_in_flight)
				o.max_in_flight = options->max_in_flight;
			if (options->spin_us)
				o.spin = std::chrono::microseconds(options->spin_us);
			if (options->park_us)
				o.park = std::chrono::microseconds(options->park_us);
		}
		auto l = std::make_unique<svmbatch_io_loop>(ctx->ctx, reg->reg, o);
		*loop = l.release(); /* the caller's until svmbatch_io_loop_destroy */
	});
}

int svmbatch_io_loop_add_file(svmbatch_io_loop *loop, int fd, uint32_t *index)
{
	if (!loop || !index)
		return invalid("svmbatch_io_loop_add_file: NULL argument");
	return guarded(nullptr, [&] { *index = loop->loop.add_file(fd); });
}

int svmbatch_io_loop_get_ring(const svmbatch_io_loop *loop, void **addr, size_t *bytes)
{
	if (!loop || !addr || !bytes)
		return invalid("svmbatch_io_loop_get_ring: NULL argument");
	last_error().clear();
	*addr = loop->loop.ring_memory();
	*bytes = loop->loop.ring_bytes();
	return 0;
}

int svmbatch_io_loop_get_queue(const svmbatch_io_loop *loop, uint64_t device_address,
			       struct svmbatch_io_queue *queue)
{
	if (!loop || !queue)
		return invalid("svmbatch_io_loop_get_queue: NULL argument");
	last_error().clear();
	*queue = device_address ? loop->loop.queue_at(device_address) : loop->loop.host_queue();
	return 0;
}

int svmbatch_io_loop_stop(svmbatch_io_loop *loop, uint32_t drain_ms)
{
	if (!loop)
		return invalid("svmbatch_io_loop_stop: NULL argument");
	last_error().clear();
	loop->loop.stop(std::chrono::milliseconds(drain_ms));
	return 0;
}

int svmbatch_io_loop_get_stats(const svmbatch_io_loop *loop, struct svmbatch_io_loop_stats *stats)
{
	if (!loop || !stats)
		return invalid("svmbatch_io_loop_get_stats: NULL argument");
	last_error().clear();
	const svmbatch::IoLoopStats s = loop->loop.stats();
	*stats = {s.requests, s.completed, s.failed, s.bytes,
		  s.batches,  s.deferred,  s.parks,  s.undelivered};
	return 0;
}

void svmbatch_io_loop_destroy(svmbatch_io_loop *loop)
{
	delete loop; // NOLINT(cppcoreguidelines-owning-memory): the C API's handle
}

int64_t svmbatch_io_read(const struct svmbatch_io_queue *queue, uint32_t file, uint64_t file_offset,
			 uint64_t length, uint32_t buffer, uint64_t buffer_offset, uint64_t tag)
{
	if (!queue || !queue->header)
		return invalid("svmbatch_io_read: NULL argument");
	last_error().clear();
	const std::int64_t t = svmbatch::IoLoopClient(*queue).read(file, file_offset, length,
								   buffer, buffer_offset, tag);
	if (t < 0)
		return svmbatch::capi::fail(ESHUTDOWN, "svmbatch_io_read: the loop is closed");
	return t;
}

int64_t svmbatch_io_write(const struct svmbatch_io_queue *queue, uint32_t file,
			  uint64_t file_offset, uint64_t length, uint32_t buffer,
			  uint64_t buffer_offset, uint64_t tag)
{
	if (!queue || !queue->header)
		return invalid("svmbatch_io_write: NULL argument");
	last_error().clear();
	const std::int64_t t = svmbatch::IoLoopClient(*queue).write(file, file_offset, length,
								    buffer, buffer_offset, tag);
	if (t < 0)
		return svmbatch::capi::fail(ESHUTDOWN, "svmbatch_io_write: the loop is closed");
	return t;
}

int svmbatch_io_wait(const struct svmbatch_io_queue *queue, int64_t ticket,
		     struct svmbatch_io_done *done)
{
	if (!queue || !queue->header || !done || ticket < 0)
		return invalid("svmbatch_io_wait: NULL argument or no ticket");
	last_error().clear();
	const svmbatch::IoCompletion c = svmbatch::IoLoopClient(*queue).wait(ticket);
	*done = {c.status, 0, c.bytes, c.tag};
	return 0;
}

} // extern "C"
