// SPDX-License-Identifier: MIT
// Reader: READ_FIXED into registered buffers, on as many cores as asked.
#include <svmbatch/reader.hpp>

#include "uring/io_engine.hpp"

namespace svmbatch {

Reader::Reader(::io_uring &ring, const FixedBuffers &fixed, const ReaderOptions &options)
	: engine_(std::make_unique<detail::IoEngine>(detail::IoOp::Read, ring, fixed, options,
						     SyncMode::None))
{}

Reader::Reader(Reader &&) noexcept = default;
Reader &Reader::operator=(Reader &&) noexcept = default;
Reader::~Reader() = default;

IoBatch Reader::start(std::span<const ReadRequest> requests)
{
	return engine_->start(requests);
}

std::vector<ReadResult> Reader::read(std::span<const ReadRequest> requests)
{
	return engine_->run(requests);
}

std::size_t Reader::submitted() const noexcept
{
	return engine_->submitted();
}

unsigned Reader::threads() const noexcept
{
	return engine_->threads();
}

Parallelism Reader::parallelism() const noexcept
{
	return engine_->parallelism();
}

BufferSharing Reader::buffer_sharing() const noexcept
{
	return engine_->buffer_sharing();
}

} // namespace svmbatch
