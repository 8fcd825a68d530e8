// SPDX-License-Identifier: MIT
// process_pinned_bytes() and read_module_stats(): what they read, and that
// a failure says why.
#include <gtest/gtest.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <limits>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::expect_error;

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

/* A directory of its own (mode 0700), removed with what it holds. */
class TempDir {
public:
	TempDir()
	{
		const char *tmp = std::getenv("TMPDIR"); // NOLINT(concurrency-mt-unsafe)
		std::string templ =
			std::string(tmp && *tmp ? tmp : "/tmp") + "/svmbatch-diag-XXXXXX";

		if (::mkdtemp(templ.data()))
			path_ = templ;
	}
	~TempDir()
	{
		std::error_code ec;

		if (!path_.empty())
			std::filesystem::remove_all(path_, ec);
	}
	TempDir(const TempDir &) = delete;
	TempDir &operator=(const TempDir &) = delete;
	TempDir(TempDir &&) = delete;
	TempDir &operator=(TempDir &&) = delete;
	const std::string &path() const { return path_; }
	void write(const std::string &name, const std::string &text) const
	{
		std::ofstream(path_ + "/" + name) << text;
	}

private:
	std::string path_;
};

/* io_uring charges a ring's fixed buffers to VmPin, page by page. */
TEST(Diagnostics, PinnedBytesCountIoUringFixedBuffers)
{
	test::MappedPages mem(16);
	ASSERT_NE(mem.p, nullptr);
	std::uint64_t before = test::quiet_pinned_bytes();
	{
		test::Ring ring;
		::iovec iov{mem.p, mem.len};

		ASSERT_EQ(io_uring_register_buffers(&ring.get(), &iov, 1), 0);
		EXPECT_EQ(process_pinned_bytes() - before, 16 * page);
	}
	EXPECT_EQ(test::settled_pinned_bytes(before), before);
}

TEST(Diagnostics, ModuleStatsAreTheNameValueLines)
{
	TempDir dir;
	ASSERT_FALSE(dir.path().empty());
	dir.write("stats", "contexts 3\n"
			   "registrations 0\n"
			   "\n"
			   "id tgid registrations pinned_pages failed\n"
			   "7 1234 1 16 0\n"
			   "meta_bytes 18446744073709551615\n");
	std::map<std::string, std::uint64_t> want{
		{"contexts", 3},
		{"registrations", 0},
		{"meta_bytes", std::numeric_limits<std::uint64_t>::max()},
	};

	EXPECT_EQ(read_module_stats(dir.path()), want);
}

TEST(Diagnostics, MissingStatsSayENOENT)
{
	TempDir dir;
	ASSERT_FALSE(dir.path().empty());
	Error e = expect_error([&] { (void)read_module_stats(dir.path() + "/absent"); });

	EXPECT_EQ(e.err(), ENOENT);
	EXPECT_EQ(e.step(), Step::Diagnostics);
	EXPECT_NE(std::string(e.what()).find(dir.path() + "/absent/stats"), std::string::npos)
		<< e.what();
	EXPECT_STREQ(step_name(Step::Diagnostics), "diagnostics");
}

/* debugfs is root's: another user's open fails with EACCES. */
TEST(Diagnostics, UnreadableStatsSayEACCES)
{
	TempDir dir;
	ASSERT_FALSE(dir.path().empty());
	dir.write("stats", "contexts 1\n");
	ASSERT_EQ(::chmod((dir.path() + "/stats").c_str(), 0), 0);

	int status = test::run_in_child([&] {
		/* root reads anything: become nobody (the directory is 0700) */
		if (::geteuid() == 0 &&
		    (::setresgid(65534, 65534, 65534) || ::setresuid(65534, 65534, 65534)))
			return 10;
		try {
			(void)read_module_stats(dir.path());
			return 11;
		} catch (const Error &e) {
			return e.err() == EACCES && e.step() == Step::Diagnostics ? 0 : 12;
		}
	});
	EXPECT_EQ(status, 0);
}

/* The module's own file (kernel mode, in the guests). */
TEST(Diagnostics, TheModuleCountsAnOpenContext)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	Context ctx(Mode::Kernel);
	std::map<std::string, std::uint64_t> stats = read_module_stats();

	ASSERT_TRUE(stats.count("contexts"));
	EXPECT_GE(stats["contexts"], 1u);
	EXPECT_TRUE(stats.count("registrations"));
	EXPECT_TRUE(stats.count("pinned_pages"));
}

} // namespace
} // namespace svmbatch
