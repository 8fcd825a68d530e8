// SPDX-License-Identifier: MIT
// Userspace mode's VMA check: PROCMAP_QUERY and the text of
// /proc/self/maps give the same answers over mappings of every kind.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/vma_check.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

/* A mapping, unmapped on destruction. */
class Mapping {
public:
	Mapping(std::size_t len, int prot, int flags, int fd = -1) : len_(len)
	{
		void *p = ::mmap(nullptr, len, prot, flags, fd, 0);

		if (p != MAP_FAILED)
			addr_ = reinterpret_cast<std::uintptr_t>(p);
	}
	~Mapping()
	{
		if (addr_)
			::munmap(reinterpret_cast<void *>(addr_), len_);
	}
	Mapping(const Mapping &) = delete;
	Mapping &operator=(const Mapping &) = delete;
	Mapping(Mapping &&) = delete;
	Mapping &operator=(Mapping &&) = delete;
	std::uintptr_t addr() const { return addr_; }
	void *at(std::size_t pages) const { return reinterpret_cast<void *>(addr_ + pages * page); }

private:
	std::uintptr_t addr_ = 0;
	std::size_t len_;
};

/* An unlinked file of pages pages in dir, or -1. */
int temp_file(const std::string &dir, std::size_t pages)
{
	std::string tmpl = dir + "/svmbatch-vma-XXXXXX";
	std::vector<char> name(tmpl.begin(), tmpl.end());
	name.push_back('\0');
	int fd = ::mkstemp(name.data());

	if (fd < 0)
		return -1;
	::unlink(name.data());
	if (::ftruncate(fd, static_cast<off_t>(pages * page))) {
		::close(fd);
		return -1;
	}
	return fd;
}

/* A directory on a filesystem that writes back, or "" (tmpfs only). */
std::string writeback_dir()
{
	const char *env = std::getenv("SVMBATCH_WRITEBACK_DIR");
	std::string dir = env && *env ? env : ".";
	struct statfs fs {};

	if (::statfs(dir.c_str(), &fs) || fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)
		return "";
	return dir;
}

KernelRange range(std::uintptr_t addr, std::size_t pages, Access access)
{
	return {addr, pages * page, access};
}

/*
 * Mappings of every kind the check tells apart, laid out page by page:
 *   anon:    8 pages read-write, page 2 unmapped, page 5 PROT_NONE,
 *            page 6 read-only (three mappings and a hole in one span);
 *   ro:      2 pages read-only;
 *   memfd:   2 pages of a shared memfd (tmpfs: no dirty tracking);
 *   file:    2 pages of a shared file on a filesystem that writes back,
 *            where there is one;
 *   priv:    2 pages of a private mapping of that file.
 */
class VmaCheckTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_TRUE(anon_.addr() && ro_.addr());
		ASSERT_EQ(::munmap(anon_.at(2), page), 0);
		ASSERT_EQ(::mprotect(anon_.at(5), page, PROT_NONE), 0);
		ASSERT_EQ(::mprotect(anon_.at(6), page, PROT_READ), 0);

		int mfd = ::memfd_create("svmbatch-vma", MFD_CLOEXEC);
		ASSERT_GE(mfd, 0);
		ASSERT_EQ(::ftruncate(mfd, static_cast<off_t>(2 * page)), 0);
		memfd_ = std::make_unique<Mapping>(2 * page, PROT_READ | PROT_WRITE, MAP_SHARED,
						   mfd);
		::close(mfd);
		ASSERT_TRUE(memfd_->addr());

		std::string dir = writeback_dir();
		if (dir.empty())
			return;
		int fd = temp_file(dir, 2);
		ASSERT_GE(fd, 0);
		file_ = std::make_unique<Mapping>(2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
		priv_ = std::make_unique<Mapping>(2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE,
						  fd);
		::close(fd);
		ASSERT_TRUE(file_->addr() && priv_->addr());
	}
	void TearDown() override { detail::set_vma_lookup(detail::VmaLookup::Auto); }

	/* Each case alone and then all of them as one batch. */
	std::vector<std::vector<KernelRange>> cases() const
	{
		std::uintptr_t a = anon_.addr();
		constexpr Access rw = Access::ReadWrite, ro = Access::ReadOnly;
		std::vector<std::vector<KernelRange>> c{
			{range(a, 2, rw)},
			{range(a, 3, rw)}, /* into the hole */
			{range(a + 3 * page, 2, rw)},
			{range(a + 3 * page, 3, rw)}, /* into PROT_NONE */
			{range(a + 6 * page, 1, ro)},
			{range(a + 6 * page, 1, rw)}, /* read-only for writing */
			{range(a + 6 * page, 2, ro)}, /* across two mappings */
			{range(a + 7 * page, 1, rw), range(a + 3 * page, 1, rw)},
			{range(ro_.addr(), 2, ro)},
			{range(ro_.addr(), 2, rw)},
			{range(memfd_->addr(), 2, rw)},
			{range(a, 1, rw), range(memfd_->addr(), 1, ro)},
		};
		if (file_) {
			c.push_back({range(file_->addr(), 2, rw)});
			c.push_back({range(file_->addr(), 2, ro)});
			c.push_back({range(a, 1, rw), range(file_->addr() + page, 1, rw)});
			c.push_back({range(priv_->addr(), 2, rw)});
			/* Dirty tracking is checked first, whatever comes before. */
			c.push_back({range(a + 5 * page, 1, rw), range(file_->addr(), 1, rw)});
		}
		std::vector<KernelRange> all;
		for (const auto &v : c)
			all.insert(all.end(), v.begin(), v.end());
		c.push_back(all);
		return c;
	}

	Mapping anon_{8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS};
	Mapping ro_{2 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS};
	std::unique_ptr<Mapping> memfd_, file_, priv_;
};

/* Both lookups give the answers the module would. */
TEST_F(VmaCheckTest, AnswersAsTheModuleWould)
{
	std::uintptr_t a = anon_.addr();
	constexpr Access rw = Access::ReadWrite, ro = Access::ReadOnly;

	for (detail::VmaLookup lookup : {detail::VmaLookup::Auto, detail::VmaLookup::Text}) {
		SCOPED_TRACE(lookup == detail::VmaLookup::Auto ? "auto" : "text");
		detail::set_vma_lookup(lookup);
		auto check = [](std::vector<KernelRange> r) { return detail::check_vmas(r); };

		EXPECT_EQ(check({range(a, 2, rw)}).err, 0);
		detail::VmaFault f = check({range(a, 2, rw), range(a + 3 * page, 4, rw)});
		EXPECT_EQ(f.err, EFAULT);
		EXPECT_EQ(f.range, 1u);
		EXPECT_EQ(f.addr, a + 5 * page);
		f = check({range(a + page, 2, ro)});
		EXPECT_EQ(f.err, EFAULT);
		EXPECT_EQ(f.addr, a + 2 * page);
		EXPECT_EQ(check({range(a + 6 * page, 2, ro)}).err, 0);
		f = check({range(a + 6 * page, 2, rw)});
		EXPECT_EQ(f.err, EFAULT);
		EXPECT_EQ(f.addr, a + 6 * page);
		EXPECT_EQ(check({range(ro_.addr(), 2, ro)}).err, 0);
		EXPECT_EQ(check({range(ro_.addr(), 2, rw)}).err, EFAULT);
		EXPECT_EQ(check({range(memfd_->addr(), 2, rw)}).err, 0);
		if (!file_)
			continue;
		f = check({range(a + 5 * page, 1, rw), range(file_->addr() + page, 1, rw)});
		EXPECT_EQ(f.err, EOPNOTSUPP);
		EXPECT_EQ(f.range, 1u);
		EXPECT_EQ(f.addr, file_->addr() + page);
		EXPECT_EQ(check({range(file_->addr(), 2, ro)}).err, 0);
		EXPECT_EQ(check({range(priv_->addr(), 2, rw)}).err, 0);
	}
	if (!file_)
		SVMBATCH_SKIP_ABSENT("writeback",
				     "no filesystem that writes back for the shared file; set "
				     "SVMBATCH_WRITEBACK_DIR");
}

TEST_F(VmaCheckTest, QueryAndTextAgree)
{
	if (!detail::vma_query_supported())
		SVMBATCH_SKIP_ABSENT("procmap_query",
				     "no PROCMAP_QUERY (Linux 6.11+): the text is the only lookup");
	for (const auto &ranges : cases()) {
		detail::set_vma_lookup(detail::VmaLookup::Auto);
		detail::VmaFault q = detail::check_vmas(ranges);
		detail::set_vma_lookup(detail::VmaLookup::Text);
		detail::VmaFault t = detail::check_vmas(ranges);

		SCOPED_TRACE("case of " + std::to_string(ranges.size()) + " ranges from " +
			     std::to_string(ranges[0].addr));
		EXPECT_EQ(q.err, t.err);
		EXPECT_EQ(q.range, t.range);
		EXPECT_EQ(q.addr, t.addr);
	}
}

/* PROCMAP_QUERY came with Linux 6.11: the check finds it where it is. */
TEST(VmaQueryTest, SupportedFromLinux611)
{
	struct utsname u {};
	unsigned major = 0, minor = 0;

	ASSERT_EQ(::uname(&u), 0);
	ASSERT_EQ(std::sscanf(u.release, "%u.%u", &major, &minor), 2);
	EXPECT_EQ(detail::vma_query_supported(), major > 6 || (major == 6 && minor >= 11))
		<< u.release;
}

} // namespace
} // namespace svmbatch
