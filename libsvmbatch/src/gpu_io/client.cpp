// SPDX-License-Identifier: MIT
// IoLoopClient: the producer side of gpu_io/ring.h's protocol for CPU threads.
#include <svmbatch/gpu_io/loop.hpp>

#include <atomic>
#include <cerrno>
#include <thread>

namespace svmbatch {

namespace {

/// Spin a little, then give the CPU away: producers may outnumber cores.
void back_off(unsigned &spins) noexcept
{
	if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
		return;
	}
	std::this_thread::yield();
}

bool closed(const svmbatch_io_queue &q) noexcept
{
	return std::atomic_ref(q.header->closed).load(std::memory_order_acquire) != 0;
}

bool pump_ended(const svmbatch_io_queue &q) noexcept
{
	return std::atomic_ref(q.header->stopped).load(std::memory_order_acquire) != 0;
}

} // namespace

std::int64_t IoLoopClient::read(std::uint32_t file, std::uint64_t file_offset, std::uint64_t length,
				std::uint32_t buffer, std::uint64_t buffer_offset,
				std::uint64_t tag) const noexcept
{
	return publish(SVMBATCH_IO_READ, file, file_offset, length, buffer, buffer_offset, tag);
}

std::int64_t IoLoopClient::write(std::uint32_t file, std::uint64_t file_offset,
				 std::uint64_t length, std::uint32_t buffer,
				 std::uint64_t buffer_offset, std::uint64_t tag) const noexcept
{
	return publish(SVMBATCH_IO_WRITE, file, file_offset, length, buffer, buffer_offset, tag);
}

std::int64_t IoLoopClient::read_device(std::uint32_t file, std::uint64_t file_offset,
				       std::uint64_t length, std::uint32_t device_buffer,
				       std::uint64_t buffer_offset,
				       std::uint64_t tag) const noexcept
{
	return publish(SVMBATCH_IO_READ_DEVICE, file, file_offset, length, device_buffer,
		       buffer_offset, tag);
}

std::int64_t IoLoopClient::publish(std::uint32_t op, std::uint32_t file, std::uint64_t file_offset,
				   std::uint64_t length, std::uint32_t buffer,
				   std::uint64_t buffer_offset, std::uint64_t tag) const noexcept
{
	if (closed(q_))
		return -1;
	const std::uint64_t t =
		std::atomic_ref(q_.header->host_tail).fetch_add(1, std::memory_order_relaxed);
	svmbatch_io_request *slot = svmbatch_io_request_slot(&q_, t);
	std::atomic_ref seq(slot->seq);

	for (unsigned spins = 0;;) {
		const std::uint64_t v = seq.load(std::memory_order_acquire);
		if (v == svmbatch_io_seq_free(t))
			break;
		if (svmbatch_io_seq_open(v) == svmbatch_io_seq_free(t)) {
			// Closed since the check: give t up (the pump passes it).
			seq.store(svmbatch_io_seq_given_up(t), std::memory_order_release);
			return -1;
		}
		if (pump_ended(q_))
			return -1; // nobody will free the slot
		back_off(spins);
	}
	svmbatch_io_fill(slot, op, file, file_offset, length, buffer, buffer_offset, tag);
	seq.store(svmbatch_io_seq_published(t), std::memory_order_release);
	return static_cast<std::int64_t>(t);
}

bool IoLoopClient::try_wait(std::int64_t ticket, IoCompletion &out) const noexcept
{
	const auto t = static_cast<std::uint64_t>(ticket);
	svmbatch_io_completion *c = svmbatch_io_completion_slot(&q_, t);
	std::atomic_ref seq(c->seq);

	if (seq.load(std::memory_order_acquire) != svmbatch_io_seq_published(t))
		return false;
	out = {c->status, c->bytes, c->tag};
	seq.store(svmbatch_io_seq_next_lap(q_.mask, t), std::memory_order_release);
	return true;
}

IoCompletion IoLoopClient::wait(std::int64_t ticket) const noexcept
{
	IoCompletion out;

	for (unsigned spins = 0; !try_wait(ticket, out);) {
		// Checked before one last look: a completion written just
		// before the pump ended is still taken.
		if (pump_ended(q_))
			return try_wait(ticket, out) ? out : IoCompletion{-ESHUTDOWN, 0, 0};
		back_off(spins);
	}
	return out;
}

} // namespace svmbatch
