// SPDX-License-Identifier: MIT
// ZeBackend against the FAKE Level Zero loader (fake_ze/: no Intel GPU
// here).  Userspace mode: the tests it shares with CudaBackend and
// HipBackend (host_register_backend_tests.hpp: the loader's failure paths,
// classification, range-by-range rollback of the host-pointer imports),
// then Level Zero's own: gating on zeInit, drivers without devices or
// without the import, base addresses failing, device memory.  Kernel mode
// (the guests, where the module exports real dma-bufs): the registration's
// dma-buf imported once, its size and offsets, failures leaving nothing.
// Debian's real loader is tested by ze_runtime_test.cpp.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "fake_ze/fake_ze.h"
#include "host_register_backend_tests.hpp"
#include "shim/libze.hpp"

namespace svmbatch::test {
namespace {

namespace ze = detail::ze;

/// The fake loader, as the shared tests ask for it.
struct ZeFake {
	using Backend = ZeBackend;
	using Memory = ZeMemory;
	static constexpr const char *label = "fake";
	static constexpr RuntimeWords words{"ze",
					    "Level Zero",
					    "svmbatch fake Level Zero device 0",
					    "libsvmbatch-no-such-ze.so.1",
					    "no Level Zero loader",
					    "zeInit",
					    "zexDriverImportExternalPointer",
					    "ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)",
					    "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY (0x70000002)",
					    "ZE_RESULT_ERROR_OVERLAPPING_REGIONS (0x7800001a)"};
	/// The import takes no flags (the fake records none).
	static constexpr unsigned register_flags = 0, read_only_register_flags = 0;
	static constexpr int no_device_status = ze::error_uninitialized,
			     out_of_memory_status = ze::error_out_of_host_memory,
			     already_registered_status = ze::error_overlapping_regions;
	/// Kernel mode imports the dma-buf instead (KernelMode tests below).
	static constexpr Mode context_mode = Mode::Userspace;
	static constexpr bool nests_registrations = true;

	static void reset(int devices) { fake_ze_reset(devices ? 1 : 0, devices); }
	static ZeOptions options(int device = 0) { return {fake_ze_library, 0, device}; }
	static void fail_register_after(int ok_calls, int result)
	{
		fake_ze_fail_import_after(ok_calls, result);
	}
	static void add_host_alloc(void *p, std::size_t len) { fake_ze_add_host_alloc(p, len); }
	static void add_managed(void *p, std::size_t len) { fake_ze_add_shared(p, len); }
	static void add_device(void *p, std::size_t len) { fake_ze_add_device(p, len); }
	/// Plain memory is classified by asking whether the driver imported it.
	static int classify_calls() { return fake_ze_import_queries(); }
	static int registered() { return fake_ze_imported(); }
	static int register_calls() { return fake_ze_import_calls(); }
	static std::size_t largest_register() { return fake_ze_largest_import(); }
	static unsigned last_register_flags() { return 0; }
	/// The backend's context: held by the backend and every mapping.
	static int primary_retained() { return fake_ze_contexts(); }
	/// An imported host pointer is the device's pointer too.
	static const char *device_address(const void *host)
	{
		return static_cast<const char *>(host);
	}
	static void expect_opened(const ZeBackend &b)
	{
		EXPECT_EQ(b.library(), fake_ze_library);
		EXPECT_TRUE(b.imports_host_pointers());
		EXPECT_EQ(fake_ze_contexts(), 1);
	}
	static void expect_balanced()
	{
		EXPECT_EQ(fake_ze_calls_before_init(), 0) << "Level Zero was called before zeInit";
	}
};

} // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(Ze, HostRegisterBackend, ::testing::Types<ZeFake>, FakeLabel);

namespace {

/// A fresh fake with one driver of one device, a context in the mode
/// under test, and the fake's checks when the test ends: nothing called
/// before zeInit, no context, import or dma-buf import left.
class FakeZe : public ::testing::Test {
protected:
	void SetUp() override
	{
		fake_ze_reset(1, 1);
		ctx_.emplace(make_context());
	}
	void TearDown() override
	{
		EXPECT_EQ(fake_ze_calls_before_init(), 0);
		EXPECT_EQ(fake_ze_contexts(), 0) << "a context outlived its backend and mappings";
		EXPECT_EQ(fake_ze_imported(), 0);
		EXPECT_EQ(fake_ze_dmabufs_imported(), 0);
	}
	bool kernel_mode() const { return ctx_->mode() == Mode::Kernel; }

	std::optional<Context> ctx_;
};

TEST_F(FakeZe, NoDriverIsENODEVWithZeInitsResultAndNothingElseIsCalled)
{
	fake_ze_reset(0, 0);
	Error e = expect_error([] { ZeBackend b(ZeFake::options()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_EQ(e.driver_status(), ze::error_uninitialized);
	EXPECT_TRUE(contains(e, "zeInit (libsvmbatch_fake_ze.so): "
				"ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)"))
		<< e.what();
}

TEST_F(FakeZe, ADriverWithoutDevicesIsENODEV)
{
	fake_ze_reset(1, 0);
	Error e = expect_error([] { ZeBackend b(ZeFake::options()); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_TRUE(contains(e, "zeDeviceGet: 0 devices")) << e.what();

	fake_ze_reset(1, 1);
	e = expect_error([] { ZeBackend b({fake_ze_library, 1, 0}); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_TRUE(contains(e, "no Level Zero driver 1 (1 present)")) << e.what();
}

TEST_F(FakeZe, TheChosenDeviceIsNamedAndItsHandlesGiven)
{
	fake_ze_reset(1, 3);
	ZeBackend b({fake_ze_library, 0, 2});
	EXPECT_EQ(b.device(), 2);
	EXPECT_EQ(b.device_name(), "svmbatch fake Level Zero device 2");
	EXPECT_EQ(fake_ze_contexts(), 1);
	EXPECT_EQ(b.driver_handle(), fake_ze_driver());
	EXPECT_EQ(b.device_handle(), fake_ze_device(2));
	EXPECT_TRUE(fake_ze_is_context(b.context_handle()));
}

TEST_F(FakeZe, BaseAddressFailingAtRangeKReleasesRangesUpToIt)
{
	Context user(Mode::Userspace);
	ZeBackend b(ZeFake::options());
	SixRanges six(user);

	for (int k = 0; k < 6; k++) {
		fake_ze_fail_base_address_after(k, ze::error_unknown);
		Error e = expect_error([&] { (void)b.map(*six.reg); });
		EXPECT_EQ(e.err(), EIO) << "k=" << k;
		EXPECT_EQ(e.step(), Step::GpuMap);
		EXPECT_EQ(e.driver_status(), ze::error_unknown);
		EXPECT_TRUE(contains(e, "zexDriverGetHostPointerBaseAddress of range " +
						std::to_string(k) +
						": ZE_RESULT_ERROR_UNKNOWN (0x7ffffffe)"))
			<< e.what();
		EXPECT_EQ(e.buffer_index(), static_cast<std::size_t>(k));
		EXPECT_EQ(fake_ze_imported(), 0) << "k=" << k << ": range k stayed imported";
	}
}

TEST_F(FakeZe, WithoutTheHostPointerImportUserspaceModeIsEOPNOTSUPP)
{
	fake_ze_set_host_pointer_import(0);
	Context user(Mode::Userspace);
	ZeBackend b(ZeFake::options());
	EXPECT_FALSE(b.imports_host_pointers());
	MappedPages plain(2), shared(2);
	fake_ze_add_shared(shared.p, shared.len);
	Buffer bufs[] = {{shared.p, 100}, {plain.p, 100}};
	Registration r = user.register_buffers(bufs);

	Error e = expect_error([&] { (void)b.map(r); });
	EXPECT_EQ(e.err(), EOPNOTSUPP);
	EXPECT_EQ(e.step(), Step::GpuMap);
	EXPECT_TRUE(contains(e, "no zexDriverImportExternalPointer for range")) << e.what();
	EXPECT_TRUE(contains(e, "load the svmbatch module")) << e.what();
	EXPECT_EQ(fake_ze_import_calls(), 0);

	Buffer only_shared[] = {{shared.p + 8, 100}};
	Registration s = user.register_buffers(only_shared);
	GpuMapping m = b.map(s);
	EXPECT_EQ(m.device_pointer<char>(0), shared.p + 8) << "shared memory needs no import";
}

/* Imports are bytes, and each buffer is asked about at both ends: a
 * plain buffer in a page with an imported one is plain, and a range
 * holding both is refused as mixed, naming it. */
TEST_F(FakeZe, APlainBufferBesideAnImportInItsPageIsAMix)
{
	Context user(Mode::Userspace);
	ZeBackend b(ZeFake::options());
	MappedPages mem(1);
	Buffer first[] = {{mem.p + 100, 100}};
	Registration r1 = user.register_buffers(first);
	GpuMapping m1 = b.map(r1);
	ASSERT_EQ(fake_ze_imported(), 1);
	EXPECT_EQ(b.classify(mem.p + 199), ZeMemory::Host);
	EXPECT_EQ(b.classify(mem.p + 200), ZeMemory::Unknown) << "a byte past the import";

	Buffer both[] = {{mem.p + 120, 10}, {mem.p + 300, 10}};
	Registration r2 = user.register_buffers(both);
	Error e = expect_error([&] { (void)b.map(r2); });
	EXPECT_EQ(e.err(), EEXIST);
	EXPECT_EQ(e.step(), Step::GpuMap);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_TRUE(contains(e, "mixes Level Zero host memory")) << e.what();
	EXPECT_EQ(fake_ze_imported(), 1) << "nothing imported for the second";
	m1.reset();
}

/* Both modes: refused before anything is imported or exported. */
TEST_F(FakeZe, DeviceMemoryIsEINVALBeforeAnythingIsImported)
{
	ZeBackend b(ZeFake::options());
	MappedPages plain(2), device(2);
	fake_ze_add_device(device.p, device.len);
	Buffer bufs[] = {{plain.p, 100}, {device.p, 100}};
	Registration r = ctx_->register_buffers(bufs);

	EXPECT_EQ(b.classify(device.p), ZeMemory::Device);
	Error e = expect_error([&] { (void)b.map(r); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.step(), Step::GpuMap);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_TRUE(contains(e, "Level Zero device memory is not host memory")) << e.what();
	EXPECT_EQ(fake_ze_import_calls(), 0);
	EXPECT_EQ(fake_ze_last_dmabuf_size(), 0u) << "no dma-buf was offered";
}

TEST_F(FakeZe, ARangeMixingHostAllocationsAndPlainMemoryIsEEXISTInBothModes)
{
	ZeBackend b(ZeFake::options());
	MappedPages mem(6);
	fake_ze_add_host_alloc(mem.p + 2 * page, 2 * page);
	/* Touching buffers: one range, half of it Level Zero's. */
	Buffer bufs[] = {{mem.p + page, page}, {mem.p + 2 * page, 2 * page}};
	Registration r = ctx_->register_buffers(bufs);

	ASSERT_EQ(r.ranges().size(), 1u);
	Error e = expect_error([&] { (void)b.map(r); });
	EXPECT_EQ(e.err(), EEXIST);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_TRUE(
		contains(e, "mixes plain host memory and Level Zero host memory (zeMemAllocHost"))
		<< e.what();
	EXPECT_EQ(fake_ze_import_calls(), 0);
	EXPECT_EQ(fake_ze_last_dmabuf_size(), 0u);
}

TEST_F(FakeZe, ResultsHaveNamesAndErrnos)
{
	EXPECT_EQ(detail::ze_result_name(ze::error_out_of_device_memory),
		  "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (0x70000003)");
	EXPECT_EQ(detail::ze_result_name(0x7abcdef0), "ze_result_t (0x7abcdef0)");
	EXPECT_EQ(detail::ze_errno(ze::success), 0);
	EXPECT_EQ(detail::ze_errno(ze::error_uninitialized), ENODEV);
	EXPECT_EQ(detail::ze_errno(ze::error_out_of_host_memory), ENOMEM);
	EXPECT_EQ(detail::ze_errno(ze::error_overlapping_regions), EEXIST);
	EXPECT_EQ(detail::ze_errno(ze::error_invalid_size), EINVAL);
	EXPECT_EQ(detail::ze_errno(ze::error_unknown), EIO);
}

/* Kernel mode (the guests): the registration's dma-buf, imported once. */
TEST_F(FakeZe, KernelModeImportsTheRegistrationsDmabufOnce)
{
	if (!kernel_mode())
		GTEST_SKIP() << "needs the module (kernel mode runs in the guests)";
	fake_ze_reset(1, 2);
	std::vector<std::vector<char>> scattered(40);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < scattered.size(); i++) {
		scattered[i].assign(700 + 911 * i, static_cast<char>('A' + i % 26));
		bufs.push_back({scattered[i].data() + i % 7, scattered[i].size() - i % 7});
	}
	Registration r = ctx_->register_buffers(bufs);
	{
		ZeBackend b(ZeFake::options(1));
		GpuMapping m = b.map(r);

		EXPECT_EQ(m.backend(), "ze");
		EXPECT_EQ(m.kind(), GpuAddressKind::DevicePointer);
		EXPECT_EQ(fake_ze_dmabufs_imported(), 1);
		EXPECT_EQ(fake_ze_import_calls(), 0) << "no host pointer is imported";
		EXPECT_EQ(fake_ze_last_dmabuf_device(), 1);
		EXPECT_STREQ(fake_ze_last_dmabuf_exporter(), "svmbatch")
			<< "the fd imported is not the module's dma-buf";
		EXPECT_EQ(fake_ze_last_dmabuf_size(), r.pages() * page);
		EXPECT_EQ(fake_ze_last_dmabuf_alloc_size(), r.pages() * page);
		ASSERT_EQ(m.size(), bufs.size());
		for (std::size_t i = 0; i < bufs.size(); i++) {
			EXPECT_EQ(m.address(i) - m.address(0),
				  r.dmabuf_offset(i) - r.dmabuf_offset(0))
				<< "buffer " << i;
			EXPECT_EQ(std::memcmp(m.device_pointer<char>(i), bufs[i].ptr, bufs[i].len),
				  0)
				<< "buffer " << i;
		}
		/* The same pages: a write through the import is the caller's. */
		m.device_pointer<char>(17)[5] = '#';
		EXPECT_EQ(static_cast<const char *>(bufs[17].ptr)[5], '#');
		EXPECT_EQ(b.classify(m.device_pointer<char>(3)), ZeMemory::Device)
			<< "an imported dma-buf is a device allocation";

		GpuMapping again = b.map(r);
		EXPECT_EQ(fake_ze_dmabufs_imported(), 2) << "each mapping its own import";
		again.reset();
		EXPECT_EQ(fake_ze_dmabufs_imported(), 1);
	}
	EXPECT_EQ(fake_ze_dmabufs_imported(), 0) << "freed with the mapping";
}

TEST_F(FakeZe, KernelModeImportFailingLeavesNothingBehind)
{
	if (!kernel_mode())
		GTEST_SKIP() << "needs the module (kernel mode runs in the guests)";
	ZeBackend b(ZeFake::options());
	std::vector<char> a(3 * page, 'a'), c(5000, 'c');
	Buffer bufs[] = {{c.data(), c.size()}, {a.data() + 7, 2 * page}};
	Registration r = ctx_->register_buffers(bufs);
	const std::size_t fds = open_fds();

	fake_ze_fail_dmabuf_import(ze::error_out_of_device_memory);
	Error e = expect_error([&] { (void)b.map(r); });
	EXPECT_EQ(e.err(), ENOMEM);
	EXPECT_EQ(e.step(), Step::GpuMap);
	EXPECT_EQ(e.driver_status(), ze::error_out_of_device_memory);
	EXPECT_EQ(e.buffer_index(), Error::no_index);
	EXPECT_TRUE(
		contains(e, "zeMemAllocDevice importing the registration's dma-buf (" +
				    std::to_string(r.pages() * page) +
				    " bytes): ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (0x70000003)"))
		<< e.what();
	EXPECT_EQ(fake_ze_dmabufs_imported(), 0);
	EXPECT_EQ(open_fds(), fds) << "the dma-buf's fd was left open";

	fake_ze_fail_dmabuf_import(0);
	GpuMapping m = b.map(r); /* nothing stuck: it works now */
	EXPECT_EQ(fake_ze_dmabufs_imported(), 1);
	EXPECT_EQ(std::memcmp(m.device_pointer<char>(1), bufs[1].ptr, bufs[1].len), 0);
	m.reset();
	EXPECT_EQ(open_fds(), fds);
}

TEST_F(FakeZe, KernelModeMappingOutlivesTheBackendAndTheRegistration)
{
	if (!kernel_mode())
		GTEST_SKIP() << "needs the module (kernel mode runs in the guests)";
	std::vector<char> a(2 * page, 'z');
	GpuMapping m;
	{
		ZeBackend b(ZeFake::options());
		Buffer bufs[] = {{a.data(), a.size()}};
		Registration r = ctx_->register_buffers(bufs);
		m = b.map(r);
	}
	EXPECT_EQ(fake_ze_contexts(), 1) << "the mapping holds the context";
	EXPECT_EQ(fake_ze_dmabufs_imported(), 1);
	EXPECT_EQ(m.device_pointer<char>(0)[page], 'z') << "the dma-buf holds the pages";
	m.reset();
	EXPECT_EQ(fake_ze_contexts(), 0);
}

} // namespace
} // namespace svmbatch::test
