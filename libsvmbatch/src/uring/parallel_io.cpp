// SPDX-License-Identifier: MIT
// What a Reader and a Writer share: the engine behind them.
#include <svmbatch/parallel_io.hpp>

#include "uring/io_engine.hpp"

namespace svmbatch::detail {

ParallelIo::ParallelIo(IoOp op, ::io_uring &ring, const FixedBuffers &fixed,
		       const IoOptions &options, SyncMode sync)
	: engine_(std::make_unique<IoEngine>(op, ring, fixed, options, sync))
{}

ParallelIo::ParallelIo(ParallelIo &&) noexcept = default;
ParallelIo &ParallelIo::operator=(ParallelIo &&) noexcept = default;
ParallelIo::~ParallelIo() = default;

IoBatch ParallelIo::start(std::span<const IoRequest> requests)
{
	return engine_->start(requests);
}

std::vector<IoResult> ParallelIo::run(std::span<const IoRequest> requests)
{
	return engine_->run(requests);
}

std::size_t ParallelIo::submitted() const noexcept
{
	return engine_->submitted();
}

unsigned ParallelIo::threads() const noexcept
{
	return engine_->threads();
}

Parallelism ParallelIo::parallelism() const noexcept
{
	return engine_->parallelism();
}

BufferSharing ParallelIo::buffer_sharing() const noexcept
{
	return engine_->buffer_sharing();
}

} // namespace svmbatch::detail
