// SPDX-License-Identifier: MIT
// CudaBackend against the FAKE CUDA driver (fake_cuda/: no GPU here): the
// loader's failure paths, classification of memory CUDA already knows,
// range-by-range rollback, context balance.  The real driver is tested on
// the H100 by tools/device/cuda_tests.cu.  Runs in both modes.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <svmbatch/all.hpp>

#include "fake_cuda/fake_cuda.h"
#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

CudaOptions fake()
{
	return {test::fake_cuda_library, 0};
}

using test::expect_error;

using Pages = test::MappedPages;

TEST(CudaBackendLoad, NoDriverLibraryIsENODEV)
{
	Error e = expect_error([] { CudaBackend b({"libsvmbatch-no-such-cuda.so.1", 0}); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_NE(std::string(e.what()).find("no CUDA driver"), std::string::npos) << e.what();
	EXPECT_NE(std::string(e.what()).find("libsvmbatch-no-such-cuda.so.1"), std::string::npos);
}

TEST(CudaBackendLoad, ALibraryThatIsNotCudaIsENODEV)
{
	Error e = expect_error([] { CudaBackend b({"libc.so.6", 0}); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_NE(std::string(e.what()).find("has no cuInit"), std::string::npos) << e.what();
}

class FakeCuda : public ::testing::Test {
protected:
	void SetUp() override
	{
		fake_cuda_reset(1);
		ctx_.emplace(test::make_context());
	}
	void TearDown() override
	{
		EXPECT_EQ(fake_cuda_context_depth(), 0) << "a context was left current";
		EXPECT_EQ(fake_cuda_calls_without_context(), 0);
	}
	std::optional<Context> ctx_;
};

TEST_F(FakeCuda, NoDeviceIsENODEVWithTheCUresult)
{
	fake_cuda_reset(0);
	Error e = expect_error([] { CudaBackend b(fake()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.driver_status(), 100);
	EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_NO_DEVICE"), std::string::npos)
		<< e.what();

	fake_cuda_reset(1);
	e = expect_error([] { CudaBackend b({test::fake_cuda_library, 3}); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(fake_cuda_primary_retained(), 0);
}

TEST_F(FakeCuda, MapsEveryBufferOnceAndUnregistersOnDestruction)
{
	CudaBackend cuda(fake());
	EXPECT_STREQ(cuda.name(), "cuda");
	EXPECT_EQ(cuda.device_name(), "svmbatch fake CUDA device");
	EXPECT_TRUE(cuda.unified_addressing());
	EXPECT_EQ(fake_cuda_primary_retained(), 1);

	std::vector<std::vector<char>> scattered(50);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < scattered.size(); i++) {
		scattered[i].resize(1000 + 300 * i);
		bufs.push_back({scattered[i].data(), scattered[i].size()});
	}
	Pages touching(4); /* two buffers sharing a page: one range */
	bufs.push_back({touching.p, 2 * page + 10});
	bufs.push_back({touching.p + 2 * page + 10, page});
	Registration r = ctx_->register_buffers(bufs);
	GpuMapping m = cuda.map(r);

	EXPECT_EQ(m.backend(), "cuda");
	EXPECT_EQ(m.kind(), GpuAddressKind::DevicePointer);
	EXPECT_EQ(fake_cuda_registered(), static_cast<int>(r.ranges().size()));
	ASSERT_EQ(m.size(), bufs.size());
	for (std::size_t i = 0; i < bufs.size(); i++) /* UVA: identity */
		EXPECT_EQ(m.device_pointer<void>(i), bufs[i].ptr) << "buffer " << i;
	EXPECT_EQ(cuda.classify(bufs[3].ptr), CudaMemory::Host);

	GpuMapping moved = std::move(m);
	EXPECT_EQ(fake_cuda_registered(), static_cast<int>(r.ranges().size()));
	moved.reset();
	EXPECT_EQ(fake_cuda_registered(), 0);
	EXPECT_EQ(cuda.classify(bufs[3].ptr), CudaMemory::Unknown);
}

TEST_F(FakeCuda, RegistersTheBuffersBytesNotTheirWholePages)
{
	CudaBackend cuda(fake());
	Pages pages(3);
	char *first = pages.p + 100, *second = pages.p + page + 50;
	Buffer bufs[] = {{first, page - 200}, {second, 1000}}; /* touching pages: one range */
	Registration r = ctx_->register_buffers(bufs);
	ASSERT_EQ(r.ranges().size(), 1u);
	GpuMapping m = cuda.map(r);

	EXPECT_EQ(m.device_pointer<char>(0), first);
	EXPECT_EQ(m.device_pointer<char>(1), second);
	EXPECT_EQ(cuda.classify(first), CudaMemory::Host);
	EXPECT_EQ(cuda.classify(second + 999), CudaMemory::Host);
	EXPECT_EQ(cuda.classify(pages.p), CudaMemory::Unknown) << "before the first buffer";
	EXPECT_EQ(cuda.classify(second + 1000), CudaMemory::Unknown) << "after the last one";
	/* The rest of the first page is free for another registration. */
	Buffer neighbour{pages.p, 100};
	Registration other = ctx_->register_buffers({&neighbour, 1});
	GpuMapping m2 = cuda.map(other);
	EXPECT_EQ(m2.device_pointer<char>(0), pages.p);
}

TEST_F(FakeCuda, RangeKFailingUnregistersRangesBeforeIt)
{
	CudaBackend cuda(fake());
	Pages mem(18);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < 6; i++) /* a page apart: 6 ranges */
		bufs.push_back({mem.p + 3 * i * page + 5, page});
	Registration r = ctx_->register_buffers(bufs);
	ASSERT_EQ(r.ranges().size(), 6u);

	for (int k : {0, 1, 3, 5}) {
		fake_cuda_fail_register_after(k, 2); /* CUDA_ERROR_OUT_OF_MEMORY */
		Error e = expect_error([&] { (void)cuda.map(r); });
		EXPECT_EQ(e.err(), ENOMEM) << "k=" << k;
		EXPECT_EQ(e.step(), Step::GpuMap);
		EXPECT_EQ(e.driver_status(), 2);
		EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_OUT_OF_MEMORY"),
			  std::string::npos);
		EXPECT_NE(std::string(e.what()).find("range " + std::to_string(k)),
			  std::string::npos)
			<< e.what();
		/* The buffer to blame lies in range k. */
		ASSERT_NE(e.buffer_index(), Error::no_index);
		EXPECT_EQ(r.location(e.buffer_index()).range, static_cast<std::size_t>(k));
		EXPECT_EQ(fake_cuda_registered(), 0) << "k=" << k << ": not rolled back";
	}
	GpuMapping m = cuda.map(r); /* nothing stuck: it works now */
	EXPECT_EQ(fake_cuda_registered(), 6);
}

TEST_F(FakeCuda, HostMemoryCudaAllocatedIsUsedNotRegisteredAgain)
{
	CudaBackend cuda(fake());
	Pages cuda_host(3), plain(2);
	fake_cuda_add_host_alloc(cuda_host.p, cuda_host.len);
	Buffer bufs[] = {{plain.p, 100}, {cuda_host.p + 64, 2 * page}};
	Registration r = ctx_->register_buffers(bufs);

	EXPECT_EQ(cuda.classify(cuda_host.p + page), CudaMemory::Host);
	{
		GpuMapping m = cuda.map(r);
		EXPECT_EQ(fake_cuda_registered(), 1) << "only the plain range is registered";
		EXPECT_EQ(m.device_pointer<char>(1), cuda_host.p + 64);
	}
	EXPECT_EQ(fake_cuda_registered(), 0);
	EXPECT_EQ(cuda.classify(cuda_host.p), CudaMemory::Host) << "not ours to unregister";
}

TEST_F(FakeCuda, ManagedMemoryIsItsOwnDevicePointer)
{
	CudaBackend cuda(fake());
	Pages managed(2);
	fake_cuda_add_managed(managed.p, managed.len);
	Buffer bufs[] = {{managed.p + 8, 100}};
	Registration r = ctx_->register_buffers(bufs);
	GpuMapping m = cuda.map(r);

	EXPECT_EQ(cuda.classify(managed.p), CudaMemory::Managed);
	EXPECT_EQ(fake_cuda_registered(), 0);
	EXPECT_EQ(m.device_pointer<char>(0), managed.p + 8);
}

TEST_F(FakeCuda, ARangeMixingCudaHostAndPlainMemoryIsEEXIST)
{
	CudaBackend cuda(fake());
	Pages mem(6);
	fake_cuda_add_host_alloc(mem.p + 2 * page, 2 * page);
	/* Touching buffers: one merged range, half of it CUDA's. */
	Buffer bufs[] = {{mem.p, 10}, {mem.p + 2 * page, 2 * page}, {mem.p + 4 * page, page}};
	Registration r = ctx_->register_buffers(bufs);

	Error e = expect_error([&] { (void)cuda.map(r); });
	EXPECT_EQ(e.err(), EEXIST);
	EXPECT_EQ(e.buffer_index(), 2u);
	EXPECT_EQ(r.ranges().size(), 2u);
	EXPECT_EQ(fake_cuda_registered(), 0) << "refused before registering anything";
}

TEST_F(FakeCuda, MemoryRegisteredInsideARangeFailsItAndRollsBack)
{
	CudaBackend cuda(fake());
	Pages mem(11);
	char *big = mem.p + 3 * page;
	/* CUDA knows a page in the middle, where classification does not look. */
	fake_cuda_add_host_alloc(big + 4 * page, page);
	Buffer bufs[] = {{mem.p, page}, {big, 8 * page}};
	Registration r = ctx_->register_buffers(bufs);

	Error e = expect_error([&] { (void)cuda.map(r); });
	EXPECT_EQ(e.err(), EEXIST);
	EXPECT_EQ(e.driver_status(), 712);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_EQ(fake_cuda_registered(), 0);
}

TEST_F(FakeCuda, ReadOnlyRangesRegisterReadOnly)
{
	CudaBackend cuda(fake());
	ASSERT_TRUE(cuda.read_only_register_supported());
	Pages a(1), b(1);
	Buffer ro[] = {{a.p, page, Access::ReadOnly}};
	Buffer rw[] = {{b.p, page, Access::ReadWrite}};
	Registration r1 = ctx_->register_buffers(ro);
	Registration r2 = ctx_->register_buffers(rw);

	GpuMapping m1 = cuda.map(r1);
	EXPECT_EQ(fake_cuda_last_register_flags(), 0x01u | 0x02u | 0x08u);
	GpuMapping m2 = cuda.map(r2);
	EXPECT_EQ(fake_cuda_last_register_flags(), 0x01u | 0x02u);
}

TEST_F(FakeCuda, TheMappingOutlivesTheBackendAndTheRegistration)
{
	GpuMapping m;
	Pages a(2);
	{
		CudaBackend cuda(fake());
		Buffer bufs[] = {{a.p, a.len}};
		Registration r = ctx_->register_buffers(bufs);
		m = cuda.map(r);
	}
	EXPECT_EQ(fake_cuda_registered(), 1);
	EXPECT_EQ(fake_cuda_primary_retained(), 1) << "the mapping holds the context";
	m.reset();
	EXPECT_EQ(fake_cuda_registered(), 0);
	EXPECT_EQ(fake_cuda_primary_retained(), 0);
}

} // namespace
} // namespace svmbatch
