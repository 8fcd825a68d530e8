// SPDX-License-Identifier: MIT
// The tests that CudaBackend, HipBackend and ZeBackend (userspace mode)
// share, as a type-parameterized suite over a fake runtime: all map
// through one skeleton (src/gpu/host_register_map.hpp), so the loader's
// failure paths, classification, byte spans, rollback and lifetime are
// checked once and instantiated by cuda_backend_test.cpp,
// hip_backend_test.cpp and ze_backend_test.cpp, each with its fake (F
// below).
//
// F, the fake's traits: Backend, Memory, words (RuntimeWords), label (the
// instantiation's name); reset(devices), options(device); the fake's
// controls (fail_register_after, add_host_alloc, add_managed, registered,
// register_calls, largest_register, last_register_flags); device_address(host), the pointer the fake gives
// for a registered host address; register_flags and read_only_register_flags;
// the statuses no_device_status, out_of_memory_status and
// already_registered_status; expect_opened(backend) and
// expect_balanced(), its own checks after opening and after every call.
// Optional: context_mode (the mode of the tests' context, where the
// backend maps another mode differently), primary_retained() (see
// CountsContexts), nests_registrations (see NestsRegistrations),
// classify_calls() (see CountsClassifications), add_device(p, len) (see
// HasDeviceMemory).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "gpu/host_register_plan.hpp"
#include "test_util.hpp"

namespace svmbatch::test {

inline const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

/// Whether e's message says what.
inline bool contains(const Error &e, const std::string &what)
{
	return std::string(e.what()).find(what) != std::string::npos;
}

/// What a runtime and its fake answer with, for the checks.
struct RuntimeWords {
	const char *backend; ///< name(): "cuda"
	const char *runtime; ///< in messages: "CUDA"
	const char *device_name; ///< the fake device's
	const char *missing_library; ///< a library that is not there
	const char *no_library; ///< the message then: "no CUDA driver"
	const char *first_symbol; ///< the entry point a library must have first
	const char *register_call; ///< "cuMemHostRegister"
	const char *no_device; ///< the statuses' names with their codes: 100,
	const char *out_of_memory; ///< 2,
	const char *already_registered; ///< 712
};

/// A runtime whose backend maps only one mode's registrations through
/// host registration (ZeBackend imports kernel mode's dma-buf instead).
template <typename F>
concept HasContextMode = requires
{
	Mode{F::context_mode};
};

/// A fresh fake with one device, a context, and the fake's own checks
/// when the test ends.
template <typename F> class FakeRuntimeTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		F::reset(1);
		if constexpr (HasContextMode<F>)
			ctx_.emplace(F::context_mode);
		else
			ctx_.emplace(make_context());
	}
	void TearDown() override { F::expect_balanced(); }

	std::optional<Context> ctx_;
};

/// A runtime whose fake counts the contexts retained (CUDA's primary
/// context, which the backend and each mapping hold).
template <typename F>
concept CountsContexts = requires
{
	F::primary_retained();
};

/// A runtime that takes a registration inside a range without a word
/// (Intel's driver looks only at the new range's ends) where the others
/// fail the range with already_registered_status.
template <typename F>
concept NestsRegistrations = F::nests_registrations;

/// A fake that counts the addresses the backend asks it to classify.
template <typename F>
concept CountsClassifications = requires
{
	F::classify_calls();
};

/// A fake that can make host pages stand for device memory.
template <typename F>
concept HasDeviceMemory = requires(void *p)
{
	F::add_device(p, std::size_t{1});
};

/// The most bytes one host-register call takes, lowered for a test.
class ChunkLimit {
public:
	explicit ChunkLimit(std::size_t bytes) { detail::set_host_register_chunk_bytes(bytes); }
	~ChunkLimit() { detail::set_host_register_chunk_bytes(0); }
	ChunkLimit(const ChunkLimit &) = delete;
	ChunkLimit &operator=(const ChunkLimit &) = delete;
	ChunkLimit(ChunkLimit &&) = delete;
	ChunkLimit &operator=(ChunkLimit &&) = delete;
};

/// Six ranges, a page apart, a buffer of a page in each: for the
/// backends' own tests of a call failing at range k.
struct SixRanges {
	explicit SixRanges(Context &ctx) : mem(18)
	{
		for (std::size_t i = 0; i < 6; i++)
			bufs.push_back({mem.p + 3 * i * page + 5, page});
		reg.emplace(ctx.register_buffers(bufs));
	}
	MappedPages mem;
	std::vector<Buffer> bufs;
	std::optional<Registration> reg;
};

/// Whether mapping r is refused as a mix of the runtime's host memory
/// and plain memory: EEXIST, blaming buffer blamed, with a message that
/// says how the kinds meet (how: "mixes " or " and ") and names F's runtime.
template <typename F>
::testing::AssertionResult refused_as_a_mix(GpuBackend &gpu, const Registration &r,
					    std::size_t blamed, const std::string &how)
{
	Error e = expect_error([&] { (void)gpu.map(r); });
	const std::string want = how + F::words.runtime + " host memory";
	if (e.err() != EEXIST || e.buffer_index() != blamed || !contains(e, want))
		return ::testing::AssertionFailure()
		       << "want EEXIST blaming buffer " << blamed << " saying \"" << want
		       << "\", got " << e.err() << " blaming " << e.buffer_index() << ": "
		       << e.what();
	return ::testing::AssertionSuccess();
}

/// Gives each fake's instantiation its label ("fake", "v5") as its name.
struct FakeLabel {
	template <typename F> static std::string GetName(int /*index*/) { return F::label; }
};

template <typename F> class HostRegisterBackend : public FakeRuntimeTest<F> {};

TYPED_TEST_SUITE_P(HostRegisterBackend);

TYPED_TEST_P(HostRegisterBackend, NoRuntimeLibraryIsENODEV)
{
	using F = TypeParam;
	Error e = expect_error([] { typename F::Backend b({F::words.missing_library, 0}); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_TRUE(contains(e, F::words.no_library)) << e.what();
	EXPECT_TRUE(contains(e, F::words.missing_library)) << e.what();
}

TYPED_TEST_P(HostRegisterBackend, ALibraryThatIsNotTheRuntimeIsENODEV)
{
	using F = TypeParam;
	Error e = expect_error([] { typename F::Backend b({"libc.so.6", 0}); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_TRUE(contains(e, std::string("has no ") + F::words.first_symbol)) << e.what();
}

TYPED_TEST_P(HostRegisterBackend, NoDeviceIsENODEVWithTheRuntimesStatus)
{
	using F = TypeParam;
	F::reset(0);
	Error e = expect_error([] { typename F::Backend b(F::options()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_EQ(e.driver_status(), F::no_device_status);
	EXPECT_TRUE(contains(e, F::words.no_device)) << e.what();
	F::expect_balanced();

	F::reset(1);
	e = expect_error([] { typename F::Backend b(F::options(3)); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_TRUE(contains(e, std::string("no ") + F::words.runtime + " device 3 (1 present)"))
		<< e.what();
	if constexpr (CountsContexts<F>) {
		EXPECT_EQ(F::primary_retained(), 0);
	}
}

TYPED_TEST_P(HostRegisterBackend, MapsEveryBufferOnceAndUnregistersOnDestruction)
{
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	EXPECT_STREQ(gpu.name(), F::words.backend);
	EXPECT_EQ(gpu.device_name(), F::words.device_name);
	F::expect_opened(gpu);

	std::vector<std::vector<char>> scattered(50);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < scattered.size(); i++) {
		scattered[i].resize(1000 + 300 * i);
		bufs.push_back({scattered[i].data(), scattered[i].size()});
	}
	MappedPages touching(4); /* two buffers sharing a page: one range */
	bufs.push_back({touching.p, 2 * page + 10});
	bufs.push_back({touching.p + 2 * page + 10, page});
	Registration r = this->ctx_->register_buffers(bufs);
	GpuMapping m = gpu.map(r);

	EXPECT_EQ(m.backend(), F::words.backend);
	EXPECT_EQ(m.kind(), GpuAddressKind::DevicePointer);
	EXPECT_EQ(F::registered(), static_cast<int>(r.ranges().size()));
	EXPECT_EQ(F::last_register_flags(), F::register_flags);
	ASSERT_EQ(m.size(), bufs.size());
	for (std::size_t i = 0; i < bufs.size(); i++) /* each at its offset in its range */
		EXPECT_EQ(m.device_pointer<char>(i), F::device_address(bufs[i].ptr))
			<< "buffer " << i;
	EXPECT_EQ(gpu.classify(bufs[3].ptr), F::Memory::Host);

	GpuMapping moved = std::move(m);
	EXPECT_EQ(F::registered(), static_cast<int>(r.ranges().size()));
	moved.reset();
	EXPECT_EQ(F::registered(), 0);
	EXPECT_EQ(gpu.classify(bufs[3].ptr), F::Memory::Unknown);
}

TYPED_TEST_P(HostRegisterBackend, RegistersTheBuffersBytesNotTheirWholePages)
{
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	MappedPages pages(3);
	char *first = pages.p + 100, *second = pages.p + page + 50;
	Buffer bufs[] = {{first, page - 200}, {second, 1000}}; /* one range */
	Registration r = this->ctx_->register_buffers(bufs);
	ASSERT_EQ(r.ranges().size(), 1u);
	GpuMapping m = gpu.map(r);

	EXPECT_EQ(m.device_pointer<char>(0), F::device_address(first));
	EXPECT_EQ(m.device_pointer<char>(1), F::device_address(second));
	EXPECT_EQ(gpu.classify(first), F::Memory::Host);
	EXPECT_EQ(gpu.classify(second + 999), F::Memory::Host);
	EXPECT_EQ(gpu.classify(pages.p), F::Memory::Unknown) << "before the first buffer";
	EXPECT_EQ(gpu.classify(second + 1000), F::Memory::Unknown) << "after the last one";
	/* The rest of the first page is free for another registration. */
	Buffer neighbour{pages.p, 100};
	Registration other = this->ctx_->register_buffers({&neighbour, 1});
	GpuMapping m2 = gpu.map(other);
	EXPECT_EQ(m2.device_pointer<char>(0), F::device_address(pages.p));
}

TYPED_TEST_P(HostRegisterBackend, RegisterFailingAtRangeKUnregistersRangesBeforeIt)
{
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	MappedPages mem(18);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < 6; i++) /* a page apart: 6 ranges */
		bufs.push_back({mem.p + 3 * i * page + 5, page});
	Registration r = this->ctx_->register_buffers(bufs);
	ASSERT_EQ(r.ranges().size(), 6u);

	for (int k = 0; k < 6; k++) {
		F::fail_register_after(k, F::out_of_memory_status);
		Error e = expect_error([&] { (void)gpu.map(r); });
		EXPECT_EQ(e.err(), ENOMEM) << "k=" << k;
		EXPECT_EQ(e.step(), Step::GpuMap);
		EXPECT_EQ(e.driver_status(), F::out_of_memory_status);
		EXPECT_TRUE(contains(e, std::string(F::words.register_call) + " of range " +
						std::to_string(k)))
			<< e.what();
		EXPECT_TRUE(contains(e, F::words.out_of_memory)) << e.what();
		/* The buffer to blame lies in range k. */
		ASSERT_NE(e.buffer_index(), Error::no_index);
		EXPECT_EQ(r.location(e.buffer_index()).range, static_cast<std::size_t>(k));
		EXPECT_EQ(F::registered(), 0) << "k=" << k << ": not rolled back";
		F::expect_balanced();
	}
	GpuMapping m = gpu.map(r); /* nothing stuck: it works now */
	EXPECT_EQ(F::registered(), 6);
}

TYPED_TEST_P(HostRegisterBackend, HostMemoryTheRuntimeAllocatedIsUsedNotRegisteredAgain)
{
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	MappedPages runtime_host(3), plain(2);
	F::add_host_alloc(runtime_host.p, runtime_host.len);
	Buffer bufs[] = {{plain.p, 100}, {runtime_host.p + 64, 2 * page}};
	Registration r = this->ctx_->register_buffers(bufs);

	EXPECT_EQ(gpu.classify(runtime_host.p + page), F::Memory::Host);
	{
		GpuMapping m = gpu.map(r);
		EXPECT_EQ(F::registered(), 1) << "only the plain range is registered";
		EXPECT_EQ(m.device_pointer<char>(1), F::device_address(runtime_host.p + 64));
	}
	EXPECT_EQ(F::registered(), 0);
	EXPECT_EQ(gpu.classify(runtime_host.p), F::Memory::Host) << "not ours to unregister";
}

TYPED_TEST_P(HostRegisterBackend, ManagedMemoryIsItsOwnDevicePointer)
{
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	MappedPages managed(2);
	F::add_managed(managed.p, managed.len);
	Buffer bufs[] = {{managed.p + 8, 100}};
	Registration r = this->ctx_->register_buffers(bufs);
	GpuMapping m = gpu.map(r);

	EXPECT_EQ(gpu.classify(managed.p), F::Memory::Managed);
	EXPECT_EQ(F::registered(), 0);
	EXPECT_EQ(m.device_pointer<char>(0), managed.p + 8);
}

TYPED_TEST_P(HostRegisterBackend, ARangeMixingTheRuntimesHostAndPlainMemoryIsEEXIST)
{
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	MappedPages mem(6);
	F::add_host_alloc(mem.p + 2 * page, 2 * page);
	/* Touching buffers: one merged range, half of it the runtime's. */
	Buffer bufs[] = {{mem.p, 10}, {mem.p + 2 * page, 2 * page}, {mem.p + 4 * page, page}};
	Registration r = this->ctx_->register_buffers(bufs);

	EXPECT_TRUE(refused_as_a_mix<F>(gpu, r, 2, "mixes "));
	EXPECT_EQ(r.ranges().size(), 2u);
	EXPECT_EQ(F::registered(), 0) << "refused before registering anything";
}

TYPED_TEST_P(HostRegisterBackend, EachBufferIsClassifiedAtItsTwoEnds)
{
	using F = TypeParam;
	if constexpr (!CountsClassifications<F>) {
		GTEST_SKIP() << "this fake does not count classifications";
	} else {
		typename F::Backend gpu(F::options());
		MappedPages mem(6);
		const std::size_t half = page / 2;
		Buffer bufs[] = {{mem.p, half},
				 {mem.p + half, half},
				 {mem.p + page, half},
				 {mem.p + page + half, half},
				 {mem.p + 2 * page, 3 * page},
				 {mem.p + 5 * page, 10}};
		Registration r = this->ctx_->register_buffers(bufs);
		const int before = F::classify_calls();
		GpuMapping m = gpu.map(r);

		EXPECT_EQ(F::classify_calls() - before, 12) << "two questions per buffer, no more";
		EXPECT_EQ(F::registered(), 1);
	}
}

TYPED_TEST_P(HostRegisterBackend, ARuntimeBlockEndingInsideAPageLeavesTheRestPlain)
{
	/* The runtime knows the bytes it was given, not their whole pages (an
	 * H100's CUDA says unregistered one byte past a registration in the
	 * same page): a buffer after them in that page is plain memory, and a
	 * range holding both mixes kinds. */
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	const std::size_t half = page / 2;
	MappedPages mem(2);
	F::add_host_alloc(mem.p, half);
	Buffer bufs[] = {{mem.p, half}, {mem.p + half, 100}};
	Registration r = this->ctx_->register_buffers(bufs);

	EXPECT_TRUE(refused_as_a_mix<F>(gpu, r, 1, "mixes "));
	EXPECT_EQ(F::registered(), 0);
}

TYPED_TEST_P(HostRegisterBackend, AMixSeenPastASharedPageBlamesTheBufferThatMixes)
{
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	const std::size_t half = page / 2;
	/* Both mapped throughout: the fake remembers what it was told. */
	MappedPages first(4), second(4);
	{
		/* Plain page 0, then the runtime's pages 1 and 2. */
		MappedPages &mem = first;
		F::add_host_alloc(mem.p + page, 2 * page);
		Buffer bufs[] = {{mem.p, half}, {mem.p + half, page}};
		Registration r = this->ctx_->register_buffers(bufs);

		EXPECT_TRUE(refused_as_a_mix<F>(gpu, r, 1, " and "));
	}
	{
		/* The runtime's pages 0 and 1, then plain page 2. */
		MappedPages &mem = second;
		F::add_host_alloc(mem.p, 2 * page);
		Buffer bufs[] = {{mem.p + page, half}, {mem.p + page + half, page}};
		Registration r = this->ctx_->register_buffers(bufs);

		EXPECT_TRUE(refused_as_a_mix<F>(gpu, r, 1, "mixes "));
	}
	EXPECT_EQ(F::registered(), 0);
}

TYPED_TEST_P(HostRegisterBackend, DeviceMemoryIsEINVALBlamingItsFirstBuffer)
{
	using F = TypeParam;
	if constexpr (!HasDeviceMemory<F>) {
		GTEST_SKIP() << "this fake has no device memory";
	} else {
		typename F::Backend gpu(F::options());
		MappedPages mem(5);
		F::add_device(mem.p + 3 * page, 2 * page);
		/* Range 0: page 0; range 1: pages 3 and 4, device memory. */
		Buffer bufs[] = {{mem.p + 4 * page, 10}, {mem.p, 100}, {mem.p + 3 * page + 8, 100}};
		Registration r = this->ctx_->register_buffers(bufs);
		ASSERT_EQ(r.ranges().size(), 2u);
		Error e = expect_error([&] { (void)gpu.map(r); });

		EXPECT_EQ(e.err(), EINVAL);
		EXPECT_EQ(e.buffer_index(), 0u);
		EXPECT_EQ(F::registered(), 0);
	}
}

TYPED_TEST_P(HostRegisterBackend, MemoryRegisteredInsideARangeFailsItAndRollsBack)
{
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	MappedPages mem(11);
	char *big = mem.p + 3 * page;
	/* The runtime knows a page in the middle, where classification does not look. */
	F::add_host_alloc(big + 4 * page, page);
	Buffer bufs[] = {{mem.p, page}, {big, 8 * page}};
	Registration r = this->ctx_->register_buffers(bufs);

	if constexpr (NestsRegistrations<F>) {
		/* The runtime is left to judge the middle: imported whole. */
		{
			GpuMapping m = gpu.map(r);
			EXPECT_EQ(F::registered(), 2);
			EXPECT_EQ(m.device_pointer<char>(1), F::device_address(big));
		}
		EXPECT_EQ(F::registered(), 0);
		EXPECT_EQ(gpu.classify(big + 4 * page), F::Memory::Host) << "the runtime's own";
		return;
	}
	Error e = expect_error([&] { (void)gpu.map(r); });
	EXPECT_EQ(e.err(), EEXIST);
	EXPECT_EQ(e.driver_status(), F::already_registered_status);
	EXPECT_TRUE(contains(e, F::words.already_registered)) << e.what();
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_EQ(F::registered(), 0);
}

TYPED_TEST_P(HostRegisterBackend, ReadOnlyRangesRegisterWithTheRuntimesReadOnlyFlags)
{
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	MappedPages a(1), b(1);
	Buffer ro[] = {{a.p, page, Access::ReadOnly}};
	Buffer rw[] = {{b.p, page, Access::ReadWrite}};
	Registration r1 = this->ctx_->register_buffers(ro);
	Registration r2 = this->ctx_->register_buffers(rw);

	F::expect_opened(gpu);
	GpuMapping m1 = gpu.map(r1);
	EXPECT_EQ(F::last_register_flags(), F::read_only_register_flags);
	EXPECT_EQ(F::registered(), 1);
	GpuMapping m2 = gpu.map(r2);
	EXPECT_EQ(F::last_register_flags(), F::register_flags);
}

TYPED_TEST_P(HostRegisterBackend, TheMappingOutlivesTheBackendAndTheRegistration)
{
	using F = TypeParam;
	GpuMapping m;
	MappedPages a(2);
	{
		typename F::Backend gpu(F::options());
		Buffer bufs[] = {{a.p, a.len}};
		Registration r = this->ctx_->register_buffers(bufs);
		m = gpu.map(r);
	}
	EXPECT_EQ(F::registered(), 1);
	if constexpr (CountsContexts<F>) {
		EXPECT_EQ(F::primary_retained(), 1) << "the mapping holds the context";
	}
	m.reset();
	EXPECT_EQ(F::registered(), 0);
	if constexpr (CountsContexts<F>) {
		EXPECT_EQ(F::primary_retained(), 0);
	}
}

TYPED_TEST_P(HostRegisterBackend, ALargeRangeIsRegisteredInChunksOfAtMostTheLimit)
{
	using F = TypeParam;
	EXPECT_EQ(detail::host_register_chunk_bytes(), std::size_t{64} << 30) << "the default";
	typename F::Backend gpu(F::options());
	const ChunkLimit limit(4 * page);
	MappedPages mem(11);
	/* One range of 10 pages from byte 100 of the first: cut at the page
	 * boundaries 4 and 8, 4 pages apart, into 4p - 100, 4p and 2p + 100. */
	Buffer bufs[] = {{mem.p + 100, 6 * page}, {mem.p + 6 * page + 100, 4 * page}};
	Registration r = this->ctx_->register_buffers(bufs);
	ASSERT_EQ(r.ranges().size(), 1u);
	{
		GpuMapping m = gpu.map(r);
		EXPECT_EQ(F::register_calls(), 3);
		EXPECT_EQ(F::registered(), 3);
		EXPECT_EQ(F::largest_register(), 4 * page);
		for (std::size_t i = 0; i < 2; i++)
			EXPECT_EQ(m.device_pointer<char>(i), F::device_address(bufs[i].ptr))
				<< "buffer " << i;
		for (std::size_t off : {std::size_t{0}, 4 * page - 101, 4 * page, 10 * page - 1})
			EXPECT_EQ(gpu.classify(mem.p + 100 + off), F::Memory::Host) << off;
		EXPECT_EQ(gpu.classify(mem.p + 99), F::Memory::Unknown);
		EXPECT_EQ(gpu.classify(mem.p + 10 * page + 100), F::Memory::Unknown);
	}
	EXPECT_EQ(F::registered(), 0) << "every chunk unregistered with the mapping";
}

TYPED_TEST_P(HostRegisterBackend, AChunkFailingUnregistersEveryChunkBeforeIt)
{
	using F = TypeParam;
	typename F::Backend gpu(F::options());
	const ChunkLimit limit(4 * page);
	MappedPages mem(14);
	/* Range 0: one call; range 1 (10 pages from byte 100 of page 2): three. */
	Buffer bufs[] = {{mem.p, 100}, {mem.p + 2 * page + 100, 10 * page}};
	Registration r = this->ctx_->register_buffers(bufs);
	ASSERT_EQ(r.ranges().size(), 2u);

	const std::string chunks[] = {" of range 0 (100 bytes)",
				      " of range 1, chunk 0 of 3 (" +
					      std::to_string(4 * page - 100) +
					      " bytes at offset 0 of " + std::to_string(10 * page) +
					      ")",
				      " of range 1, chunk 1 of 3 (" + std::to_string(4 * page) +
					      " bytes at offset " + std::to_string(4 * page - 100),
				      " of range 1, chunk 2 of 3 (" +
					      std::to_string(2 * page + 100) + " bytes at offset " +
					      std::to_string(8 * page - 100)};
	for (int k = 0; k < 4; k++) {
		F::fail_register_after(k, F::out_of_memory_status); /* at call k */
		Error e = expect_error([&] { (void)gpu.map(r); });
		EXPECT_EQ(e.err(), ENOMEM) << "k=" << k;
		EXPECT_EQ(e.step(), Step::GpuMap);
		EXPECT_EQ(e.driver_status(), F::out_of_memory_status);
		EXPECT_TRUE(contains(e, F::words.register_call + chunks[k])) << e.what();
		EXPECT_EQ(e.buffer_index(), k == 0 ? 0u : 1u) << e.what();
		EXPECT_EQ(F::registered(), 0) << "k=" << k << ": not rolled back";
		F::expect_balanced();
	}
	GpuMapping m = gpu.map(r); /* nothing stuck: it works now */
	EXPECT_EQ(F::registered(), 4);
	EXPECT_EQ(m.device_pointer<char>(1), F::device_address(bufs[1].ptr));
}

REGISTER_TYPED_TEST_SUITE_P(
	HostRegisterBackend, NoRuntimeLibraryIsENODEV, ALibraryThatIsNotTheRuntimeIsENODEV,
	NoDeviceIsENODEVWithTheRuntimesStatus, MapsEveryBufferOnceAndUnregistersOnDestruction,
	RegistersTheBuffersBytesNotTheirWholePages,
	RegisterFailingAtRangeKUnregistersRangesBeforeIt,
	HostMemoryTheRuntimeAllocatedIsUsedNotRegisteredAgain, ManagedMemoryIsItsOwnDevicePointer,
	ARangeMixingTheRuntimesHostAndPlainMemoryIsEEXIST, EachBufferIsClassifiedAtItsTwoEnds,
	ARuntimeBlockEndingInsideAPageLeavesTheRestPlain,
	AMixSeenPastASharedPageBlamesTheBufferThatMixes, DeviceMemoryIsEINVALBlamingItsFirstBuffer,
	MemoryRegisteredInsideARangeFailsItAndRollsBack,
	ReadOnlyRangesRegisterWithTheRuntimesReadOnlyFlags,
	TheMappingOutlivesTheBackendAndTheRegistration,
	ALargeRangeIsRegisteredInChunksOfAtMostTheLimit,
	AChunkFailingUnregistersEveryChunkBeforeIt);

} // namespace svmbatch::test
