// SPDX-License-Identifier: MIT
// AmdgpuBackend.  No AMD GPU exists on any machine here: the tests run
// libdrm_amdgpu's no-device paths; AmdgpuHardware runs only where sysfs
// shows an amdgpu DRM node.  Documentation/amd.rst lists what is unverified.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

using test::expect_error;

/// The DRM nodes whose device the amdgpu driver has bound, from sysfs
/// (/sys/class/drm/<node>/device/driver), render nodes first: independent
/// of the code under test, and of whether this user may open them.
std::vector<std::string> amdgpu_nodes()
{
	std::vector<std::string> render, primary;
	std::error_code ec;

	for (const auto &e : std::filesystem::directory_iterator("/sys/class/drm", ec)) {
		std::string name = e.path().filename();
		if (name.find('-') != std::string::npos)
			continue; // connectors: card0-DP-1
		std::error_code lec;
		auto driver = std::filesystem::read_symlink(e.path() / "device" / "driver", lec);
		if (lec || driver.filename() != "amdgpu")
			continue;
		if (name.starts_with("renderD"))
			render.push_back("/dev/dri/" + name);
		else if (name.starts_with("card"))
			primary.push_back("/dev/dri/" + name);
	}
	std::sort(render.begin(), render.end());
	std::sort(primary.begin(), primary.end());
	render.insert(render.end(), primary.begin(), primary.end());
	return render;
}

TEST(AmdgpuBackendOpen, NoAmdgpuNodeIsENODEV)
{
	if (!amdgpu_nodes().empty())
		GTEST_SKIP() << amdgpu_nodes().front() << " is amdgpu: AmdgpuHardware covers it";
	Error e = expect_error([] { AmdgpuBackend b; });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_NE(std::string(e.what()).find("no amdgpu DRM device"), std::string::npos)
		<< e.what();
}

TEST(AmdgpuBackendOpen, DevNullIsENODEV)
{
	Error e = expect_error([] { AmdgpuBackend b("/dev/null"); });
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_NE(std::string(e.what()).find("/dev/null is not a DRM device"), std::string::npos)
		<< e.what();
}

TEST(AmdgpuBackendOpen, AMissingNodeIsENOENT)
{
	Error e = expect_error([] { AmdgpuBackend b("/dev/dri/renderD999"); });
	EXPECT_EQ(e.err(), ENOENT);
	EXPECT_EQ(e.step(), Step::GpuOpen);
	EXPECT_NE(std::string(e.what()).find("/dev/dri/renderD999"), std::string::npos) << e.what();
}

/* In the guests: vgem is a DRM device, but not amdgpu. */
TEST(AmdgpuBackendOpen, NodesOfOtherDriversAreENODEV)
{
	std::vector<std::string> amd = amdgpu_nodes(), others;
	std::error_code ec;
	for (const auto &n : std::filesystem::directory_iterator("/dev/dri", ec))
		if (std::find(amd.begin(), amd.end(), n.path().string()) == amd.end() &&
		    ::access(n.path().c_str(), R_OK | W_OK) == 0)
			others.push_back(n.path());
	if (others.empty())
		SVMBATCH_SKIP_ABSENT("vgem",
				     "no DRM node of another driver than amdgpu in /dev/dri "
				     "(the guests have vgem)");
	for (const std::string &n : others) {
		Error e = expect_error([&] { AmdgpuBackend b(n); });
		EXPECT_EQ(e.err(), ENODEV) << n;
		EXPECT_NE(std::string(e.what()).find("not amdgpu"), std::string::npos) << e.what();
	}
}

/* Only on a machine with an amdgpu GPU (none here). */
TEST(AmdgpuHardware, MapsTheDmabufIntoTheGpuVm)
{
	std::vector<std::string> nodes = amdgpu_nodes();
	if (nodes.empty())
		GTEST_SKIP() << "no amdgpu DRM node in /sys/class/drm: no AMD GPU here";
	AmdgpuBackend amd;
	EXPECT_EQ(amd.node(), nodes.front());
	EXPECT_STREQ(amd.name(), "amdgpu");

	Context ctx = test::make_context();
	test::MappedPages mem(6);
	ASSERT_NE(mem.p, nullptr);
	std::vector<Buffer> bufs{{mem.p + 4 * page + 8, 100}, {mem.p, 2 * page}};
	Registration r = ctx.register_buffers(bufs);
	if (ctx.mode() != Mode::Kernel) {
		Error e = expect_error([&] { (void)amd.map(r); });
		EXPECT_EQ(e.err(), EOPNOTSUPP);
		EXPECT_EQ(e.step(), Step::Export);
		return;
	}
	GpuMapping m = amd.map(r);
	EXPECT_EQ(m.kind(), GpuAddressKind::DevicePointer);
	EXPECT_NE(m.object_handle(), 0u);
	ASSERT_EQ(m.size(), bufs.size());
	std::uint64_t va = m.address(0) - r.dmabuf_offset(0);
	for (std::size_t i = 0; i < bufs.size(); i++)
		EXPECT_EQ(m.address(i), va + r.dmabuf_offset(i)) << i;
	EXPECT_EQ(va % 4096, 0u);
	m.reset();
	GpuMapping again = amd.map(r); /* the VA range and BO were freed */
	EXPECT_EQ(again.size(), bufs.size());
}

} // namespace
} // namespace svmbatch
