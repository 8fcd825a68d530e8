// SPDX-License-Identifier: MIT
// ExtentReader into device memory with CudaStreamCopier over the FAKE
// CUDA driver (fake_cuda/: its "device memory" is host memory it was
// told about; with fake_cuda_defer_copies its copies move only when an
// event recorded after them is waited for, reading the staging then, as a
// copy engine does): files several times the staging land whole, which
// they do only if no chunk is read into before its copies ended; the
// copies' and the events' failures; and nothing left behind.  Every byte
// is checked, not a sample.  The real driver runs on the GPU machines
// (tools/device/).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "extent_fixture.hpp"
#include "fake_cuda/fake_cuda.h"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::Destinations;
using test::expect_error;
using test::kib;
using test::lengths_of;
using test::random_extents;
using test::small_options;

constexpr std::size_t chunk = 64 * kib;

class ExtentReaderDeviceTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		ctx_.emplace(test::make_context());
		fake_cuda_reset(1);
		cuda_.emplace(CudaOptions{test::fake_cuda_library, 0});
		// "Device memory", told to the fake once: every destination of
		// the test lies in it.
		device_.assign(24 << 20, 0);
		fake_cuda_add_device(device_.data(), device_.size());
	}
	void TearDown() override
	{
		fake_cuda_defer_copies(0);
		cuda_.reset();
		EXPECT_EQ(fake_cuda_live_events(), 0);
		EXPECT_EQ(fake_cuda_registered(), 0) << "the staging is still registered";
		EXPECT_EQ(fake_cuda_context_depth(), 0) << "a context was left current";
		EXPECT_EQ(fake_cuda_calls_without_context(), 0);
	}

	/// A file of `file_chunks` chunks and a bit, cut in adjacent extents
	/// of random sizes (one run), then random extents of it and of a
	/// second file.
	std::vector<Extent> extents_of(const test::ScratchFile &a, std::size_t a_size,
				       const test::ScratchFile &b, std::size_t b_size,
				       unsigned seed)
	{
		std::mt19937_64 rng(seed);
		std::vector<Extent> e;
		for (std::uint64_t off = 0; off < a_size;) {
			const std::size_t len =
				std::min<std::size_t>(1 + rng() % (3 * chunk), a_size - off);
			e.push_back({a.fd(), off, len, 0});
			off += len;
		}
		const std::vector<Extent> more =
			random_extents(rng, 60, {&a, &b}, {a_size, b_size}, chunk);
		e.insert(e.end(), more.begin(), more.end());
		return e;
	}

	/// Read e into device memory with a copier on the legacy default
	/// stream; every extent whole, every byte, no guard touched, and
	/// no copy left to run.
	void expect_device_read(ExtentReader &reader, std::vector<Extent> e)
	{
		Destinations dst(lengths_of(e), device_);
		dst.place(e);
		CudaStreamCopier copier(*cuda_, 0);
		const int copies = fake_cuda_copies();
		const std::vector<ExtentResult> res = reader.read(e, &copier);
		EXPECT_EQ(fake_cuda_deferred_pending(), 0u)
			<< "read() returned before its copies ended";
		ASSERT_EQ(res.size(), e.size());
		for (std::size_t i = 0; i < e.size(); i++) {
			ASSERT_EQ(res[i].err, 0) << "extent " << i;
			ASSERT_EQ(res[i].bytes, e[i].length) << "extent " << i;
			ASSERT_FALSE(res[i].copy);
			ASSERT_TRUE(dst.holds(i, e[i].file_offset, e[i].length));
		}
		EXPECT_TRUE(dst.guards_intact());
		EXPECT_EQ(static_cast<std::size_t>(fake_cuda_copies() - copies),
			  reader.last_read().copies);
	}

	std::optional<Context> ctx_;
	std::optional<CudaBackend> cuda_;
	std::vector<std::uint8_t> device_;
};

/* The staging is mapped for the GPU as one block, once, beside the ring's
 * set-up, and the steps say so. */
TEST_F(ExtentReaderDeviceTest, TheStagingIsMappedForTheGpu)
{
	ExtentReader reader(*ctx_, small_options(chunk, 4), &*cuda_);
	std::vector<std::string> names;
	for (const ExtentReaderStep &s : reader.setup())
		names.push_back(s.name);
	EXPECT_EQ(names, (std::vector<std::string>{"staging", "register", "ring", "fixed", "reader",
						   "gpu-map", "gpu-map-wait"}));
	EXPECT_EQ(fake_cuda_registered(), 1);
	EXPECT_EQ(fake_cuda_register_calls(), 1);
	EXPECT_EQ(fake_cuda_largest_register(), 4 * chunk);
}

/*
 * A file four to sixteen times the staging into device memory with the
 * copies deferred to the fence waits: the bytes a copy moves are the
 * staging's when the wait comes, so a chunk read into again before its
 * copies ended lands the wrong bytes.  Two groups of one chunk, and four
 * of two.
 */
TEST_F(ExtentReaderDeviceTest, DeferredCopiesEndBeforeTheirChunkIsReadAgain)
{
	const std::size_t a_size = 32 * chunk + 333, b_size = 500 * kib;
	test::ScratchFile a(a_size), b(b_size);
	fake_cuda_defer_copies(1);
	for (std::size_t chunks : {2, 8}) {
		SCOPED_TRACE("chunks " + std::to_string(chunks));
		ExtentReader reader(*ctx_, small_options(chunk, chunks), &*cuda_);
		expect_device_read(reader, extents_of(a, a_size, b, b_size, 1));
		expect_device_read(reader, extents_of(a, a_size, b, b_size, 2));
		EXPECT_GT(reader.last_read().wait_copy_ns, 0u);
	}
}

/* The same with events that answer "not ready" to their first polls. */
TEST_F(ExtentReaderDeviceTest, DeferredCopiesWithEventsThatNeedPolling)
{
	const std::size_t a_size = 20 * chunk + 1, b_size = 300 * kib;
	test::ScratchFile a(a_size), b(b_size);
	fake_cuda_defer_copies(1);
	fake_cuda_event_polls(3);
	ExtentReader reader(*ctx_, small_options(chunk, 4), &*cuda_);
	expect_device_read(reader, extents_of(a, a_size, b, b_size, 3));
}

/* A copy the driver refuses fails its extent, marked as the copy's; no
 * byte reaches device memory; the next read works. */
TEST_F(ExtentReaderDeviceTest, TheCopysFailureIsTheExtentsError)
{
	const std::size_t a_size = 6 * chunk, b_size = 100 * kib;
	test::ScratchFile a(a_size), b(b_size);
	ExtentReader reader(*ctx_, small_options(chunk, 2), &*cuda_);
	std::vector<Extent> e = extents_of(a, a_size, b, b_size, 4);
	{
		Destinations dst(lengths_of(e), device_);
		dst.place(e);
		CudaStreamCopier copier(*cuda_, 0);
		fake_cuda_fail_copies(2); // CUDA_ERROR_OUT_OF_MEMORY
		const std::vector<ExtentResult> res = reader.read(e, &copier);
		fake_cuda_fail_copies(0);
		for (std::size_t i = 0; i < e.size(); i++) {
			const bool empty = e[i].length == 0; // nothing to copy
			EXPECT_EQ(res[i].err, empty ? 0 : ENOMEM) << "extent " << i;
			EXPECT_EQ(res[i].copy, !empty) << "extent " << i;
			EXPECT_EQ(res[i].bytes, 0u) << "extent " << i;
			EXPECT_TRUE(dst.holds(i, 0, 0)) << "extent " << i;
		}
		EXPECT_TRUE(dst.guards_intact());
		EXPECT_EQ(fake_cuda_copies(), 0);
		EXPECT_EQ(copier.driver_status(), 2);
	}
	expect_device_read(reader, e);
}

/* An event that fails fails the call with Step::GpuCopy; the copier's
 * events go with it, and the reader serves the next read. */
TEST_F(ExtentReaderDeviceTest, AFailedEventIsAGpuCopyError)
{
	const std::size_t a_size = 6 * chunk, b_size = 100 * kib;
	test::ScratchFile a(a_size), b(b_size);
	ExtentReader reader(*ctx_, small_options(chunk, 2), &*cuda_);
	std::vector<Extent> e = extents_of(a, a_size, b, b_size, 5);
	Destinations dst(lengths_of(e), device_);
	dst.place(e);
	const int events = fake_cuda_live_events();
	{
		CudaStreamCopier copier(*cuda_, 0);
		EXPECT_EQ(fake_cuda_live_events(), events + 4);
		fake_cuda_fail_events(999); // CUDA_ERROR_UNKNOWN
		const Error err = expect_error([&] { (void)reader.read(e, &copier); });
		fake_cuda_fail_events(0);
		EXPECT_EQ(err.step(), Step::GpuCopy);
		EXPECT_EQ(err.err(), EIO);
		EXPECT_EQ(err.driver_status(), 999);
		EXPECT_NE(std::string(err.what()).find("cuda"), std::string::npos) << err.what();
		EXPECT_EQ(fake_cuda_context_depth(), 0) << "a context was left current";

		// The same copier and reader go on.
		dst.reset();
		const std::vector<ExtentResult> res = reader.read(e, &copier);
		for (std::size_t i = 0; i < e.size(); i++) {
			ASSERT_EQ(res[i].err, 0) << "extent " << i;
			ASSERT_TRUE(dst.holds(i, e[i].file_offset, e[i].length));
		}
	}
	EXPECT_EQ(fake_cuda_live_events(), events);
}

/* Fewer fences than the staging's groups of chunks: refused up front. */
TEST_F(ExtentReaderDeviceTest, ACopierWithTooFewFencesIsRefused)
{
	test::ScratchFile a(chunk);
	ExtentReader reader(*ctx_, small_options(chunk, 8), &*cuda_);
	std::vector<Extent> e{{a.fd(), 0, 100, 0}};
	Destinations dst(lengths_of(e), device_);
	dst.place(e);
	CudaStreamCopier copier(*cuda_, 0, 3);
	const Error err = expect_error([&] { (void)reader.read(e, &copier); });
	EXPECT_EQ(err.err(), EINVAL);
	EXPECT_EQ(err.step(), Step::Validate);
	EXPECT_TRUE(dst.holds(0, 0, 0));
	const Error none = expect_error([&] { CudaStreamCopier c(*cuda_, 0, 0); });
	EXPECT_EQ(none.err(), EINVAL);
}

/* A reader with a GPU leaves no fd, pin, registered block or event. */
TEST_F(ExtentReaderDeviceTest, LeavesNothingBehind)
{
	const std::size_t a_size = 4 * chunk, b_size = 100 * kib;
	test::ScratchFile a(a_size), b(b_size);
	const std::size_t fds = test::open_fds();
	const std::uint64_t pinned = test::quiet_pinned_bytes();
	const int events = fake_cuda_live_events();
	{
		ExtentReader reader(*ctx_, small_options(chunk, 4), &*cuda_);
		EXPECT_EQ(fake_cuda_registered(), 1);
		expect_device_read(reader, extents_of(a, a_size, b, b_size, 6));
	}
	EXPECT_EQ(fake_cuda_registered(), 0);
	EXPECT_EQ(fake_cuda_live_events(), events);
	EXPECT_EQ(test::open_fds(), fds);
	EXPECT_EQ(test::pinned_bytes_at_most(pinned), pinned) << "a pin was left behind";
}

} // namespace
} // namespace svmbatch
