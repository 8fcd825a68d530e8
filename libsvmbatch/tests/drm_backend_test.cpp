// SPDX-License-Identifier: MIT
// DrmBackend: opening nodes (every machine) and importing a registration's
// dma-buf into vgem (the guests, kernel mode).  vgem cannot mmap an
// imported object, so the content is checked through the GEM handle's own
// dma-buf (PRIME handle-to-fd gives back the imported dma-buf).
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>
#include <xf86drm.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

bool have_drm_nodes()
{
	std::error_code ec;

	return std::filesystem::exists("/dev/dri", ec) &&
	       !std::filesystem::is_empty("/dev/dri", ec);
}

using test::expect_error;

TEST(DrmBackendOpen, AMissingNodeIsENOENT)
{
	Error e = expect_error([] { DrmBackend b("/dev/dri/renderD999"); });
	EXPECT_EQ(e.err(), ENOENT);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_NE(std::string(e.what()).find("renderD999"), std::string::npos);
}

TEST(DrmBackendOpen, ANodeThatIsNotDrmIsENODEV)
{
	Error e = expect_error([] { DrmBackend b("/dev/null"); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
}

TEST(DrmBackendOpen, AutoPicksADeviceOrSaysThereIsNone)
{
	if (!have_drm_nodes()) {
		Error e = expect_error([] { DrmBackend b; });
		EXPECT_EQ(e.err(), ENODEV);
		EXPECT_EQ(e.step(), Step::GpuOpen);
		return;
	}
	DrmBackend b;
	EXPECT_STREQ(b.name(), "drm");
	EXPECT_FALSE(b.driver().empty());
	EXPECT_TRUE(b.node().starts_with("/dev/dri/"));
	EXPECT_GE(b.fd(), 0);
}

/* The vgem node: the guests load vgem; a host has no DRM device at all. */
std::unique_ptr<DrmBackend> open_vgem()
{
	std::error_code ec;

	for (const auto &e : std::filesystem::directory_iterator("/dev/dri", ec)) {
		try {
			auto b = std::make_unique<DrmBackend>(e.path());
			if (b->driver() == "vgem")
				return b;
		} catch (const Error &) {
		}
	}
	return nullptr;
}

class DrmBackendVgem : public ::testing::Test {
protected:
	void SetUp() override
	{
		vgem_ = open_vgem();
		if (!vgem_)
			SVMBATCH_SKIP_ABSENT("vgem",
					     std::string("no vgem DRM device: ") +
						     (have_drm_nodes() ?
							      "no node of /dev/dri is vgem" :
							      "no /dev/dri"));
	}
	std::unique_ptr<DrmBackend> vgem_;
};

TEST_F(DrmBackendVgem, UserspaceModeCannotExport)
{
	Context ctx(Mode::Userspace);
	std::vector<char> a(page);
	Buffer bufs[] = {{a.data(), a.size()}};
	Registration r = ctx.register_buffers(bufs);

	Error e = expect_error([&] { (void)vgem_->map(r); });
	EXPECT_EQ(e.err(), EOPNOTSUPP);
	EXPECT_EQ(e.step(), Step::Export);
}

class DrmBackendKernel : public DrmBackendVgem {
protected:
	void SetUp() override
	{
		SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
		DrmBackendVgem::SetUp();
		if (IsSkipped())
			return;
		ctx_.emplace(Mode::Kernel);
		/*
		 * Earlier tests' pins go away late: io_uring drops them from a
		 * worker, a vgem import's dma-buf from a delayed fput.  Nothing
		 * of this process should be pinned now; wait for that, then
		 * for quiet, before exact VmPin comparisons.
		 */
		(void)test::settled_pinned_bytes(0);
		(void)test::quiet_pinned_bytes();
	}
	std::optional<Context> ctx_;
};

/* The GEM object's own dma-buf, mapped: what the importer holds. */
struct ImportView {
	int fd = -1;
	std::size_t size = 0;
	char *map = nullptr;

	ImportView(int drm_fd, std::uint32_t handle, int prot)
	{
		if (drmPrimeHandleToFD(drm_fd, handle, DRM_CLOEXEC | DRM_RDWR, &fd))
			return;
		size = static_cast<std::size_t>(::lseek(fd, 0, SEEK_END));
		void *p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
		map = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
	}
	~ImportView()
	{
		if (map)
			::munmap(map, size);
		if (fd >= 0)
			::close(fd);
	}
	ImportView(const ImportView &) = delete;
	ImportView &operator=(const ImportView &) = delete;
	ImportView(ImportView &&) = delete;
	ImportView &operator=(ImportView &&) = delete;
};

TEST_F(DrmBackendKernel, VgemSeesTheScatteredBuffersByteForByteBothWays)
{
	std::vector<char> a(3 * page), b(5000), c(100);
	for (std::size_t i = 0; i < a.size(); i++)
		a[i] = static_cast<char>(i * 7);
	std::memset(b.data(), 'b', b.size());
	std::memset(c.data(), 'c', c.size());
	std::vector<Buffer> bufs{{c.data(), c.size()},
				 {a.data() + 7, 2 * page},
				 {b.data(), b.size()}};
	Registration r = ctx_->register_buffers(bufs);
	GpuMapping m = vgem_->map(r);

	ASSERT_TRUE(m);
	EXPECT_EQ(m.backend(), "drm");
	EXPECT_EQ(m.kind(), GpuAddressKind::ObjectOffset);
	ASSERT_EQ(m.size(), bufs.size());
	ASSERT_NE(m.object_handle(), 0u);
	for (std::size_t i = 0; i < bufs.size(); i++)
		EXPECT_EQ(m.address(i), r.dmabuf_offset(i)) << "buffer " << i;

	ImportView v(vgem_->fd(), m.object_handle(), PROT_READ | PROT_WRITE);
	ASSERT_GE(v.fd, 0) << std::strerror(errno);
	EXPECT_EQ(v.size, r.pages() * page);
	ASSERT_NE(v.map, nullptr) << std::strerror(errno);
	for (std::size_t i = 0; i < bufs.size(); i++)
		EXPECT_EQ(std::memcmp(v.map + m.address(i), bufs[i].ptr, bufs[i].len), 0)
			<< "buffer " << i;
	a[7 + 5] = 'Z'; /* original pointer -> import */
	EXPECT_EQ(v.map[m.address(1) + 5], 'Z');
	v.map[m.address(2) + 4999] = 'Y'; /* import -> original buffer */
	EXPECT_EQ(b[4999], 'Y');
}

/*
 * A read-only registration exports a dma-buf that only DMA_TO_DEVICE
 * mappings may use; DRM PRIME import maps DMA_BIDIRECTIONAL, so vgem (like
 * every driver on the generic import path) is refused, and nothing stays.
 */
TEST_F(DrmBackendKernel, ReadOnlyBuffersAreRefusedByBidirectionalImport)
{
	std::vector<char> a(2 * page, 'r');
	Buffer bufs[] = {{a.data(), a.size(), Access::ReadOnly}};
	std::uint64_t before = process_pinned_bytes();
	std::optional<Registration> r(ctx_->register_buffers(bufs));

	Error e = expect_error([&] { (void)vgem_->map(*r); });
	EXPECT_EQ(e.err(), EACCES);
	EXPECT_EQ(e.step(), Step::GpuMap);
	EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
	r.reset();
	EXPECT_EQ(process_pinned_bytes(), before);
}

TEST_F(DrmBackendKernel, TheImportKeepsThePagesUntilTheMappingEnds)
{
	std::vector<char> a(4 * page), b(page);
	Buffer bufs[] = {{a.data(), a.size()}, {b.data(), b.size()}};
	std::uint64_t before = process_pinned_bytes();
	std::optional<Registration> r(ctx_->register_buffers(bufs));
	const std::uint64_t pinned = r->pages() * page;
	GpuMapping m = vgem_->map(*r);
	GpuMapping second = vgem_->map(*r);
	std::uint32_t handle = m.object_handle();

	EXPECT_NE(second.object_handle(), handle) << "each map() is its own import";
	EXPECT_EQ(process_pinned_bytes(), before + pinned);
	r.reset(); /* unregister first: the imports hold the pages */
	EXPECT_EQ(process_pinned_bytes(), before + pinned);
	second.reset();
	EXPECT_EQ(process_pinned_bytes(), before + pinned);

	GpuMapping moved = std::move(m);
	EXPECT_FALSE(m); // NOLINT(bugprone-use-after-move): moved-from is empty
	EXPECT_EQ(moved.object_handle(), handle);
	moved.reset(); /* GEM handle closed: the last reference */
	EXPECT_EQ(process_pinned_bytes(), before);
	int fd = -1;
	EXPECT_NE(drmPrimeHandleToFD(vgem_->fd(), handle, DRM_CLOEXEC, &fd), 0);
	EXPECT_EQ(errno, ENOENT) << "the GEM handle outlived its mapping";
	moved.reset(); /* idempotent */
}

} // namespace
} // namespace svmbatch
