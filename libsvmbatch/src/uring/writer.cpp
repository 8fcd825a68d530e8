// SPDX-License-Identifier: MIT
// Writer: WRITE_FIXED from registered buffers, on as many cores as asked.
#include <svmbatch/writer.hpp>

#include "uring/io_engine.hpp"

namespace svmbatch {

Writer::Writer(::io_uring &ring, const FixedBuffers &fixed, const WriterOptions &options)
	: engine_(std::make_unique<detail::IoEngine>(detail::IoOp::Write, ring, fixed, options,
						     options.sync))
{}

Writer::Writer(Writer &&) noexcept = default;
Writer &Writer::operator=(Writer &&) noexcept = default;
Writer::~Writer() = default;

IoBatch Writer::start(std::span<const WriteRequest> requests)
{
	return engine_->start(requests);
}

std::vector<WriteResult> Writer::write(std::span<const WriteRequest> requests)
{
	return engine_->run(requests);
}

std::size_t Writer::submitted() const noexcept
{
	return engine_->submitted();
}

unsigned Writer::threads() const noexcept
{
	return engine_->threads();
}

Parallelism Writer::parallelism() const noexcept
{
	return engine_->parallelism();
}

BufferSharing Writer::buffer_sharing() const noexcept
{
	return engine_->buffer_sharing();
}

} // namespace svmbatch
