// SPDX-License-Identifier: MIT
// Registration in the mode under test (userspace on the host, kernel in the
// guests): the same input is accepted or refused with the same errno.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "core/vma_check.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

/* An anonymous or file mapping, unmapped on destruction. */
class Mapping {
public:
	Mapping(std::size_t len, int prot, int flags, int fd = -1) : len_(len)
	{
		void *p = ::mmap(nullptr, len, prot, flags, fd, 0);

		if (p != MAP_FAILED)
			addr_ = static_cast<char *>(p);
	}
	~Mapping()
	{
		if (addr_)
			::munmap(addr_, len_);
	}
	Mapping(const Mapping &) = delete;
	Mapping &operator=(const Mapping &) = delete;
	Mapping(Mapping &&) = delete;
	Mapping &operator=(Mapping &&) = delete;
	char *get() const { return addr_; }

private:
	char *addr_ = nullptr;
	std::size_t len_;
};

struct FreeDeleter {
	void operator()(void *p) const { std::free(p); }
};
using MallocPtr = std::unique_ptr<char, FreeDeleter>;

/* Pages of [p, p + len) in memory (mincore), or -1. */
long resident_pages(const void *p, std::size_t len)
{
	std::vector<unsigned char> vec((len + page - 1) / page);
	long n = 0;

	if (::mincore(const_cast<void *>(p), len, vec.data()))
		return -1;
	for (unsigned char v : vec)
		n += v & 1;
	return n;
}

/* The Error of registering b, or a failed expectation. */
Error register_error(Context &ctx, const std::vector<Buffer> &b,
		     const RegisterOptions &options = {})
{
	try {
		Registration r = ctx.register_buffers(b, options);
	} catch (const Error &e) {
		return e;
	}
	ADD_FAILURE() << "registration succeeded";
	return {0, Step::Register, "none"};
}

class RegistrationTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		if (test::mode_under_test() == Mode::Kernel && !test::kernel_available())
			GTEST_SKIP() << "kernel mode: no /dev/svmbatch";
		pin_before_ = test::quiet_pinned_bytes(); /* earlier io_uring teardowns */
	}
	/* "Nothing left behind" after every test, as after every failure. */
	void TearDown() override
	{
		if (!IsSkipped()) {
			EXPECT_EQ(process_pinned_bytes(), pin_before_);
		}
	}
	void expect_nothing_pinned() { EXPECT_EQ(process_pinned_bytes(), pin_before_); }

	Context ctx_ = test::make_context();
	std::uint64_t pin_before_ = 0;
};

/*
 * The tests of what the VMA check refuses, once with each lookup: the
 * kernel's PROCMAP_QUERY where it has one, and the text of
 * /proc/self/maps that older kernels leave.
 */
class RegistrationVmaTest : public RegistrationTest,
			    public ::testing::WithParamInterface<detail::VmaLookup> {
protected:
	void SetUp() override
	{
		RegistrationTest::SetUp();
		detail::set_vma_lookup(GetParam());
	}
	void TearDown() override
	{
		detail::set_vma_lookup(detail::VmaLookup::Auto);
		RegistrationTest::TearDown();
	}
};

INSTANTIATE_TEST_SUITE_P(Lookup, RegistrationVmaTest,
			 ::testing::Values(detail::VmaLookup::Auto, detail::VmaLookup::Text),
			 [](const ::testing::TestParamInfo<detail::VmaLookup> &info) {
				 return info.param == detail::VmaLookup::Auto ? "Auto" : "Text";
			 });

TEST_P(RegistrationVmaTest, ScatteredMallocBuffersMapBackToTheirRanges)
{
	std::mt19937 rng(7);
	std::vector<MallocPtr> mem;
	std::vector<Buffer> b;

	for (int i = 0; i < 300; i++) {
		std::size_t len = 1 + rng() % (std::size_t{64} * 1024);

		mem.emplace_back(static_cast<char *>(std::malloc(len)));
		ASSERT_TRUE(mem.back());
		b.push_back({mem.back().get(), len, Access::ReadWrite});
	}
	Registration reg = ctx_.register_buffers(b);

	EXPECT_EQ(reg.mode(), test::mode_under_test());
	EXPECT_LE(reg.ranges().size(), b.size());
	ASSERT_EQ(reg.buffers().size(), b.size());
	std::uint64_t pages = 0;
	for (const KernelRange &r : reg.ranges())
		pages += r.len / page;
	EXPECT_EQ(reg.pages(), pages);
	for (std::size_t i = 0; i < b.size(); i++) {
		BufferLocation loc = reg.location(i);

		ASSERT_LT(loc.range, reg.ranges().size());
		EXPECT_EQ(reg.ranges()[loc.range].addr + loc.offset,
			  reinterpret_cast<std::uintptr_t>(b[i].ptr));
	}
	EXPECT_THROW(reg.location(b.size()), std::out_of_range);
	if (reg.mode() == Mode::Kernel) {
		EXPECT_NE(reg.handle(), 0u);
		EXPECT_EQ(reg.pinned_pages(), reg.pages());
		EXPECT_EQ(process_pinned_bytes() - pin_before_, reg.pages() * page);
	} else {
		EXPECT_EQ(reg.handle(), 0u);
		EXPECT_EQ(reg.pinned_pages(), 0u);
	}
}

TEST_P(RegistrationVmaTest, UnmappedBufferIsEfaultAndNamesTheCallersIndex)
{
	Mapping m(8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	ASSERT_TRUE(m.get());
	ASSERT_EQ(::munmap(m.get() + 2 * page, page), 0); /* a hole */

	/* The bad buffer sorts first but is the caller's index 3. */
	std::vector<Buffer> b{{m.get() + 5 * page, 100},
			      {m.get() + 6 * page, page},
			      {m.get() + 4 * page, 10},
			      {m.get() + 2 * page + 8, 16},
			      {m.get(), page}};
	Error e = register_error(ctx_, b);

	EXPECT_EQ(e.err(), EFAULT);
	EXPECT_EQ(e.step(), Step::Register);
	EXPECT_EQ(e.buffer_index(), 3u);
	expect_nothing_pinned();
}

TEST_P(RegistrationVmaTest, HoleInsideAMergedRangeBlamesTheBufferOverIt)
{
	Mapping m(8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	ASSERT_TRUE(m.get());
	std::vector<Buffer> b{{m.get(), 3 * page}, {m.get() + 3 * page, 3 * page}};

	ASSERT_EQ(::munmap(m.get() + 4 * page, page), 0);
	Error e = register_error(ctx_, b);
	EXPECT_EQ(e.err(), EFAULT);
	EXPECT_EQ(e.buffer_index(), 1u);
}

TEST_P(RegistrationVmaTest, ProtNoneIsEfault)
{
	Mapping m(2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS);
	Mapping ok(page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	Error e = register_error(ctx_, {{ok.get(), 1}, {m.get() + 100, 10}});

	EXPECT_EQ(e.err(), EFAULT);
	EXPECT_EQ(e.buffer_index(), 1u);
}

TEST_P(RegistrationVmaTest, ReadOnlyMemoryNeedsReadOnlyAccess)
{
	Mapping m(2 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS);
	ASSERT_TRUE(m.get());

	Error e = register_error(ctx_, {{m.get(), 2 * page}});
	EXPECT_EQ(e.err(), EFAULT);
	Registration r =
		ctx_.register_buffers(std::vector<Buffer>{{m.get(), 2 * page, Access::ReadOnly}});
	EXPECT_EQ(r.ranges()[0].access, Access::ReadOnly);
}

TEST_P(RegistrationVmaTest, WritableSharedFileMappingIsEopnotsupp)
{
	/* A file on a filesystem that writes back: the guests mount ext4. */
	const char *env = std::getenv("SVMBATCH_WRITEBACK_DIR");
	std::string dir = env && *env ? env : ".";
	struct statfs fs {};
	ASSERT_EQ(::statfs(dir.c_str(), &fs), 0);
	if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)
		SVMBATCH_SKIP_ABSENT(
			"writeback",
			dir + " is tmpfs/ramfs (no writeback); set SVMBATCH_WRITEBACK_DIR");
	std::string tmpl = dir + "/svmbatch-shared-XXXXXX";
	std::vector<char> name(tmpl.begin(), tmpl.end());
	name.push_back('\0');
	int fd = ::mkstemp(name.data());
	ASSERT_GE(fd, 0);
	::unlink(name.data());
	ASSERT_EQ(::ftruncate(fd, 4 * page), 0);
	Mapping m(4 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
	::close(fd);
	ASSERT_TRUE(m.get());
	Mapping anon(page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);

	Error e = register_error(ctx_, {{anon.get(), page}, {m.get(), page}});
	EXPECT_EQ(e.err(), EOPNOTSUPP);
	EXPECT_EQ(e.buffer_index(), 1u);
	Registration r =
		ctx_.register_buffers(std::vector<Buffer>{{m.get(), 4 * page, Access::ReadOnly}});
	EXPECT_EQ(r.pages(), 4u);
}

/* Without the prefault, the VMA checks refuse the same buffers alike. */
TEST_P(RegistrationVmaTest, WithoutPrefaultTheChecksStillRefuse)
{
	RegisterOptions no_prefault;
	no_prefault.prefault = false;
	Mapping m(8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	Mapping none(2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS);
	Mapping ro(2 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS);
	ASSERT_TRUE(m.get() && none.get() && ro.get());
	ASSERT_EQ(::munmap(m.get() + 4 * page, page), 0);
	std::vector<std::vector<Buffer>> refused{
		{{m.get(), 3 * page}, {m.get() + 3 * page, 3 * page}}, /* a hole under 1 */
		{{m.get(), 10}, {none.get() + 100, 10}}, /* PROT_NONE */
		{{m.get(), 10}, {ro.get() + page, 10}}, /* read-only, for writing */
	};

	for (const auto &b : refused) {
		Error with = register_error(ctx_, b);
		Error without = register_error(ctx_, b, no_prefault);

		EXPECT_EQ(without.err(), EFAULT);
		EXPECT_EQ(without.err(), with.err());
		EXPECT_EQ(without.step(), with.step());
		EXPECT_EQ(without.buffer_index(), 1u);
		EXPECT_EQ(without.buffer_index(), with.buffer_index());
		EXPECT_STREQ(without.what(), with.what());
	}
	expect_nothing_pinned();
}

/*
 * Userspace mode faults the pages in unless told not to; kernel mode
 * ignores the option, as pinning faults them in.
 */
TEST_F(RegistrationTest, PrefaultFaultsInUnlessToldNotTo)
{
	Mapping fresh(8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	Mapping other(8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	ASSERT_TRUE(fresh.get() && other.get());
	ASSERT_EQ(resident_pages(fresh.get(), 8 * page), 0);
	RegisterOptions no_prefault;
	no_prefault.prefault = false;

	{
		Registration r =
			ctx_.register_buffers(std::vector<Buffer>{{fresh.get() + 10, 6 * page}},
					      no_prefault);
		long expected = r.mode() == Mode::Kernel ? 7 : 0;
		EXPECT_EQ(resident_pages(fresh.get(), 8 * page), expected);
	}
	Registration r = ctx_.register_buffers(std::vector<Buffer>{{other.get() + 10, 6 * page}});
	EXPECT_EQ(resident_pages(other.get(), 8 * page), 7) << "the pages under the buffer";
}

TEST_P(RegistrationVmaTest, SharedMemfdIsFine)
{
	int fd = ::memfd_create("svmbatch-test", MFD_CLOEXEC);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(::ftruncate(fd, 4 * page), 0);
	Mapping m(4 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
	::close(fd);
	ASSERT_TRUE(m.get());

	Registration r = ctx_.register_buffers(std::vector<Buffer>{{m.get(), 4 * page}});
	EXPECT_EQ(r.ranges().size(), 1u);
}

TEST_F(RegistrationTest, EmptyInputIsEinval)
{
	char x[16];

	Error e = register_error(ctx_, {});
	EXPECT_EQ(e.err(), EINVAL);
	e = register_error(ctx_, {{x, 1}, {x + 1, 0}});
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.step(), Step::Validate);
	EXPECT_EQ(e.buffer_index(), 1u);
}

TEST_F(RegistrationTest, MoreRangesThanTheModuleTakesIsE2big)
{
	std::size_t n = ctx_.info().max_ranges + 1;
	/* Every other page: n separate ranges; nothing is touched. */
	Mapping m(2 * n * page, PROT_READ | PROT_WRITE,
		  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
	ASSERT_TRUE(m.get());
	std::vector<Buffer> b;
	for (std::size_t i = 0; i < n; i++)
		b.push_back({m.get() + 2 * i * page, page});

	Error e = register_error(ctx_, b);
	EXPECT_EQ(e.err(), E2BIG);
	EXPECT_EQ(e.step(), Step::Validate);
	b.pop_back();
	Registration r = ctx_.register_buffers(b); /* exactly the limit */
	EXPECT_EQ(r.ranges().size(), n - 1);
}

TEST_F(RegistrationTest, MoveAndResetLeaveNoDoubleUnregister)
{
	Mapping m(4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	std::vector<Buffer> b{{m.get(), page}, {m.get() + 2 * page, page}};
	Registration a = ctx_.register_buffers(b);
	Registration moved(std::move(a));

	EXPECT_FALSE(a); // NOLINT(bugprone-use-after-move): testing it
	EXPECT_TRUE(moved);
	EXPECT_EQ(moved.ranges().size(), 2u);
	Registration other = ctx_.register_buffers(std::vector<Buffer>{{m.get(), 1}});
	other = std::move(moved); /* releases other's registration */
	EXPECT_EQ(other.ranges().size(), 2u);
	other.reset();
	other.reset();
	EXPECT_FALSE(other);
	EXPECT_TRUE(other.ranges().empty());
	try {
		other.location(0);
		FAIL() << "location() of an empty registration";
	} catch (const Error &e) {
		EXPECT_EQ(e.err(), EBADF);
	}
}

TEST_F(RegistrationTest, OutlivesItsContext)
{
	Mapping m(page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	std::optional<Registration> r;
	{
		Context ctx = test::make_context();
		r.emplace(ctx.register_buffers(std::vector<Buffer>{{m.get(), page}}));
	}
	EXPECT_EQ(r->pages(), 1u);
	if (r->mode() == Mode::Kernel) {
		EXPECT_EQ(r->query().pages, 1u);
	}
}

TEST_F(RegistrationTest, QueryNeedsTheKernel)
{
	Mapping m(4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	std::vector<Buffer> b{{m.get(), page}, {m.get() + 2 * page, 2 * page}};
	Registration r = ctx_.register_buffers(b);

	if (r.mode() != Mode::Kernel) {
		try {
			(void)r.query();
			FAIL() << "QUERY in userspace mode";
		} catch (const Error &e) {
			EXPECT_EQ(e.err(), EOPNOTSUPP);
			EXPECT_EQ(e.step(), Step::Query);
		}
		try {
			(void)r.export_dmabuf();
			FAIL() << "a dma-buf in userspace mode";
		} catch (const Error &e) {
			EXPECT_EQ(e.err(), EOPNOTSUPP);
			EXPECT_EQ(e.step(), Step::Export);
		}
		return;
	}
	RegistrationStats s = r.query();
	EXPECT_EQ(s.pages, 3u);
	EXPECT_GE(s.segments, 1u);
	EXPECT_GT(s.meta_bytes, 0u);
}

TEST_F(RegistrationTest, MemoryUnmappedWhileRegisteredIsReleasedLater)
{
	std::optional<Registration> r;
	{
		Mapping m(16 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
		r.emplace(ctx_.register_buffers(std::vector<Buffer>{{m.get(), 16 * page}}));
	}
	/* The mapping is gone; in kernel mode the pages stay pinned. */
	if (r->mode() == Mode::Kernel) {
		EXPECT_EQ(process_pinned_bytes() - pin_before_, 16 * page);
	}
	r.reset();
}

} // namespace
} // namespace svmbatch
