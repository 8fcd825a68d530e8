// SPDX-License-Identifier: MIT
// What a Reader and a Writer are alike: rings driven on several cores,
// batches started on them, and what the engine chose.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include <svmbatch/api.h>
#include <svmbatch/fixed_buffers.hpp>
#include <svmbatch/io.hpp>

struct io_uring;

namespace svmbatch::detail {

class IoEngine;
enum class IoOp;

/// The common base of Reader (IoOp::Read) and Writer (IoOp::Write).
/// Move-only; the destructor cancels the batches in flight and waits.
class SVMBATCH_API ParallelIo {
public:
	ParallelIo(ParallelIo &&) noexcept;
	ParallelIo &operator=(ParallelIo &&) noexcept;
	ParallelIo(const ParallelIo &) = delete;
	ParallelIo &operator=(const ParallelIo &) = delete;
	~ParallelIo();

	/// Validate every request, then start them in the background; see
	/// IoBatch.  Each ring takes batches in start order.
	IoBatch start(std::span<const IoRequest> requests);
	/// Entries submitted by the last batch that completed (pieces and
	/// continuations of short transfers).
	std::size_t submitted() const noexcept;
	/// Threads (or io-wq workers) actually used.
	unsigned threads() const noexcept;
	/// The parallelism in use (never Auto).
	Parallelism parallelism() const noexcept;
	/// How the private rings hold the fixed buffers.
	BufferSharing buffer_sharing() const noexcept;

protected:
	ParallelIo(IoOp op, ::io_uring &ring, const FixedBuffers &fixed, const IoOptions &options,
		   SyncMode sync);
	/// start(requests).wait(), on the calling thread where no batch is in
	/// flight.
	std::vector<IoResult> run(std::span<const IoRequest> requests);

private:
	std::unique_ptr<IoEngine> engine_;
};

} // namespace svmbatch::detail
