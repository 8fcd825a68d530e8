// SPDX-License-Identifier: MIT
// The C API of ExtentReader: host destinations, or a CUDA device's through
// a CudaStreamCopier on the caller's stream.  Built in every configuration,
// so that the C ABI does not depend on the build: without
// SVMBATCH_WITH_CUDA a reader for a CUDA device is -EOPNOTSUPP.
#include <svmbatch/config.h>
#include <svmbatch/capi.h>
#include <svmbatch/extent_reader.hpp>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#if SVMBATCH_HAS_CUDA
#include <svmbatch/gpu/cuda_backend.hpp>
#include <svmbatch/gpu/cuda_stream_copier.hpp>
#endif

#include "capi/c_api_internal.hpp"

struct svmbatch_extent_reader {
#if SVMBATCH_HAS_CUDA
	/// The device the staging is mapped for; none for host destinations.
	/// Declared first, so that it goes last.
	std::unique_ptr<svmbatch::CudaBackend> cuda;
#endif
	std::optional<svmbatch::ExtentReader> reader;
#if SVMBATCH_HAS_CUDA
	/// The copier of the stream read on last, kept for the next read on
	/// it (its events are made once).  Goes first: it waits for its
	/// fences, so no copy reads the staging after the reader is gone.
	std::unique_ptr<svmbatch::CudaStreamCopier> copier;
	std::uint64_t copier_stream = 0;
#endif
};

namespace {

using namespace svmbatch::capi; // NOLINT(google-build-using-namespace): the C API's helpers

svmbatch::ExtentReaderOptions to_options(const svmbatch_extent_reader_options *options)
{
	svmbatch::ExtentReaderOptions o;

	if (!options)
		return o;
	if (options->staging_bytes)
		o.staging_bytes = options->staging_bytes;
	if (options->chunk_bytes)
		o.chunk_bytes = options->chunk_bytes;
	o.io.threads = options->threads;
	if (options->queue_depth)
		o.io.queue_depth = options->queue_depth;
	if (options->max_io_bytes)
		o.io.max_io_bytes = options->max_io_bytes;
	if (options->direct_alignment)
		o.io.direct_alignment = options->direct_alignment;
	return o;
}

} // namespace

extern "C" {

int svmbatch_extent_reader_create(svmbatch_ctx *ctx,
				  const struct svmbatch_extent_reader_options *options,
				  int cuda_device, svmbatch_extent_reader **reader)
{
	if (!ctx || !reader)
		return invalid("svmbatch_extent_reader_create: NULL argument");
	*reader = nullptr;
	if (cuda_device < -1)
		return invalid("svmbatch_extent_reader_create: cuda_device is below -1");
#if !SVMBATCH_HAS_CUDA
	if (cuda_device >= 0)
		return fail(EOPNOTSUPP,
			    "svmbatch_extent_reader_create: a CUDA device, but this libsvmbatch "
			    "was built without CUDA (SVMBATCH_WITH_CUDA)");
#endif
	return guarded(nullptr, [&] {
		const svmbatch::ExtentReaderOptions o = to_options(options);
		auto r = std::make_unique<svmbatch_extent_reader>();

#if SVMBATCH_HAS_CUDA
		if (cuda_device >= 0) {
			svmbatch::CudaOptions c;

			c.device = cuda_device;
			if (options && options->cuda_library)
				c.library = options->cuda_library;
			r->cuda = std::make_unique<svmbatch::CudaBackend>(c);
		}
		r->reader.emplace(ctx->ctx, o, r->cuda.get());
#else
		r->reader.emplace(ctx->ctx, o);
#endif
		*reader = r.release(); /* the caller's until svmbatch_extent_reader_destroy */
	});
}

int svmbatch_extent_read(svmbatch_extent_reader *reader, const struct svmbatch_extent *extents,
			 size_t nr_extents, uint64_t cuda_stream,
			 struct svmbatch_extent_result *results, size_t *failed_index)
{
	if (failed_index)
		*failed_index = SVMBATCH_LIB_NO_INDEX;
	if (!reader || ((!extents || !results) && nr_extents))
		return invalid("svmbatch_extent_read: NULL argument");
	/* More than could ever be in memory: the copy below would throw length_error. */
	if (nr_extents > std::vector<svmbatch::Extent>().max_size())
		return fail(ENOMEM, "svmbatch_extent_read: too many extents");
	for (size_t i = 0; i < nr_extents; i++) {
		const char *bad = nullptr;

		if (extents[i].reserved != 0)
			bad = "svmbatch_extent_read: reserved is not 0";
		else if (static_cast<std::size_t>(extents[i].length) != extents[i].length)
			bad = "svmbatch_extent_read: length does not fit in size_t";
		if (bad) {
			if (failed_index)
				*failed_index = i;
			return invalid(bad);
		}
	}
	return guarded(failed_index, [&] {
		std::vector<svmbatch::Extent> e(nr_extents);

		for (size_t i = 0; i < nr_extents; i++)
			e[i] = {extents[i].fd, extents[i].file_offset,
				static_cast<std::size_t>(extents[i].length), extents[i].dst};
		svmbatch::StreamCopier *copier = nullptr;
#if SVMBATCH_HAS_CUDA
		if (reader->cuda) {
			if (!reader->copier || reader->copier_stream != cuda_stream) {
				reader->copier.reset();
				reader->copier = std::make_unique<svmbatch::CudaStreamCopier>(
					*reader->cuda, static_cast<std::uintptr_t>(cuda_stream));
				reader->copier_stream = cuda_stream;
			}
			copier = reader->copier.get();
		}
#else
		(void)cuda_stream; /* host destinations only */
#endif
		const std::vector<svmbatch::ExtentResult> res = reader->reader->read(e, copier);
		for (size_t i = 0; i < nr_extents; i++)
			results[i] = {res[i].err != 0 ? -res[i].err : 0,
				      res[i].copy ? SVMBATCH_EXTENT_COPY_FAILED : 0U, res[i].bytes};
	});
}

void svmbatch_extent_reader_destroy(svmbatch_extent_reader *reader)
{
	delete reader; // NOLINT(cppcoreguidelines-owning-memory): C ownership
}

} /* extern "C" */
