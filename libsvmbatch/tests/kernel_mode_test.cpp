// SPDX-License-Identifier: MIT
// What only the module does: pinning that shows in VmPin and in its
// counters, transactional failure, the mm binding of the fd.  Run in the
// guests (SVMBATCH_TEST_MODE=kernel); skipped on a host without the module.
// ScatteredReadFixed runs in both modes.
#include <gtest/gtest.h>

#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

/* The module's gauges (debugfs stats): what must not move on failure. */
std::map<std::string, std::uint64_t> module_gauges()
{
	std::map<std::string, std::uint64_t> all = read_module_stats(), gauges;

	for (const char *g : {"contexts", "registrations", "pinned_pages", "meta_bytes"})
		if (all.count(g))
			gauges[g] = all[g];
	return gauges;
}

class KernelModeTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
		ctx_.emplace(Mode::Kernel);
		(void)test::quiet_pinned_bytes(); /* earlier io_uring teardowns */
	}
	std::optional<Context> ctx_;
};

TEST_F(KernelModeTest, RegistrationIsCountedInVmPinAndTheModule)
{
	std::vector<char> mem(64 * page);
	auto before = module_gauges();
	std::uint64_t pin = process_pinned_bytes();

	ASSERT_FALSE(before.empty()) << "debugfs stats missing";
	{
		Registration r =
			ctx_->register_buffers(std::vector<Buffer>{{mem.data() + 1, 40 * page}});
		EXPECT_EQ(process_pinned_bytes() - pin, r.pages() * page);
		auto during = module_gauges();
		EXPECT_EQ(during["registrations"], before["registrations"] + 1);
		EXPECT_EQ(during["pinned_pages"], before["pinned_pages"] + r.pages());
	}
	EXPECT_EQ(process_pinned_bytes(), pin);
	EXPECT_EQ(module_gauges(), before);
}

TEST_F(KernelModeTest, AFailingBatchLeavesNothingBehind)
{
	const std::size_t n = 500;
	std::vector<std::unique_ptr<char[]>> mem;
	std::vector<Buffer> b;

	for (std::size_t i = 0; i < n; i++) {
		mem.emplace_back(new char[3 * page]);
		b.push_back({mem.back().get(), 3 * page});
	}
	/* PROT_NONE and kept mapped: an unmapped hole could be taken by an
	 * allocation (the library's, the sanitizer's) before the call. */
	void *hole = ::mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(hole, MAP_FAILED);
	std::unique_ptr<void, std::function<void(void *)>> unmap(hole, [](void *p) {
		::munmap(p, page);
	});
	b.insert(b.begin() + 321, Buffer{hole, 8});

	auto before = module_gauges();
	std::uint64_t pin = process_pinned_bytes();
	Error e = test::expect_error([&] { (void)ctx_->register_buffers(b); });
	EXPECT_EQ(e.err(), EFAULT);
	EXPECT_EQ(e.buffer_index(), 321u);
	EXPECT_EQ(process_pinned_bytes(), pin);
	EXPECT_EQ(module_gauges(), before);
}

/*
 * The module's test knob: the next K pin attempts of this process end as if
 * an invalidation had raced them; the module gives EAGAIN after 4 attempts.
 */
constexpr const char *fake_invalidations = "/sys/kernel/debug/svmbatch/fake_invalidations";
constexpr int module_pin_attempts = 4;
constexpr int library_register_calls = 5; /* the first and 4 retries */

void set_fake_invalidations(int k)
{
	std::FILE *f = std::fopen(fake_invalidations, "w");

	ASSERT_NE(f, nullptr) << fake_invalidations << ": " << std::strerror(errno);
	ASSERT_GT(std::fprintf(f, "%d", k), 0);
	ASSERT_EQ(std::fclose(f), 0) << std::strerror(errno);
}

int get_fake_invalidations()
{
	std::FILE *f = std::fopen(fake_invalidations, "r");
	int k = -1;

	if (f) {
		if (std::fscanf(f, "%d", &k) != 1)
			k = -1;
		std::fclose(f);
	}
	return k;
}

TEST_F(KernelModeTest, EagainIsRetriedBeforeItIsReported)
{
	if (::access(fake_invalidations, W_OK) != 0)
		SVMBATCH_SKIP_ABSENT(
			"faultinject",
			std::string("probe: access(") + fake_invalidations +
				", W_OK): " + std::strerror(errno) +
				" (module built without CONFIG_SVMBATCH_FAULT_INJECTION)");
	std::vector<char> mem(8 * page);
	std::vector<Buffer> b{{mem.data(), 8 * page}};
	auto before = module_gauges();
	std::uint64_t pin = process_pinned_bytes();
	std::uint64_t retries = read_module_stats()["pin_retries"];

	/* One call's attempts all raced: the library's second call succeeds. */
	set_fake_invalidations(module_pin_attempts);
	{
		Registration r = ctx_->register_buffers(b);
		EXPECT_EQ(get_fake_invalidations(), 0);
		EXPECT_EQ(read_module_stats()["pin_retries"], retries + module_pin_attempts - 1);
		EXPECT_EQ(process_pinned_bytes() - pin, r.pinned_pages() * page);
	}

	/* Every call raced: EAGAIN after the last retry, nothing left behind. */
	set_fake_invalidations(library_register_calls * module_pin_attempts + 1);
	Error e = test::expect_error([&] { (void)ctx_->register_buffers(b); });
	EXPECT_EQ(e.err(), EAGAIN);
	EXPECT_EQ(e.step(), Step::Register);
	EXPECT_EQ(e.buffer_index(), Error::no_index);
	/* Exactly library_register_calls calls were made: one attempt is left. */
	EXPECT_EQ(get_fake_invalidations(), 1);
	set_fake_invalidations(0);
	EXPECT_EQ(process_pinned_bytes(), pin);
	EXPECT_EQ(module_gauges(), before);
}

TEST_F(KernelModeTest, AForkedChildCannotUseItsParentsContext)
{
	std::vector<char> mem(page);
	int status = test::run_in_child([&] {
		try {
			Registration r =
				ctx_->register_buffers(std::vector<Buffer>{{mem.data(), page}});
		} catch (const Error &e) {
			return e.err() == EPERM && e.step() == Step::Register ? 0 : 1;
		}
		return 2;
	});
	EXPECT_EQ(status, 0);
}

TEST_F(KernelModeTest, QueryAgreesWithThePlan)
{
	std::vector<char> mem(32 * page);
	char *base = mem.data() + page - reinterpret_cast<std::uintptr_t>(mem.data()) % page;
	std::vector<Buffer> b{{base, page}, {base + page, 100}, {base + 4 * page, 2 * page}};
	Registration r = ctx_->register_buffers(b);
	RegistrationStats s = r.query();

	EXPECT_EQ(r.ranges().size(), 2u);
	EXPECT_EQ(s.pages, 4u);
	EXPECT_EQ(s.pages, r.pinned_pages());
	EXPECT_GE(s.segments, 1u);
	EXPECT_LE(s.segments, s.pages);
}

TEST_F(KernelModeTest, StaleAfterTheBufferIsUnmapped)
{
	void *p = ::mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			 0);
	ASSERT_NE(p, MAP_FAILED);
	Registration r = ctx_->register_buffers(
		std::vector<Buffer>{{static_cast<char *>(p) + 10, 3 * page}});

	EXPECT_FALSE(r.stale());
	static_cast<char *>(p)[100] = 1; /* accesses do not count */
	EXPECT_FALSE(r.stale());
	ASSERT_EQ(::munmap(p, 4 * page), 0);
	EXPECT_TRUE(r.stale());
}

TEST_F(KernelModeTest, DmaBufHoldsTheBuffersInRangeOrder)
{
	std::vector<char> a(3 * page, 'a'), b(5000, 'b'), c(100, 'c');
	std::vector<Buffer> bufs{{c.data(), c.size()},
				 {a.data() + 7, 2 * page},
				 {b.data(), b.size()}};
	Registration r = ctx_->register_buffers(bufs);
	DmaBuf d = r.export_dmabuf();

	ASSERT_TRUE(d);
	EXPECT_EQ(d.size(), r.pages() * page);
	auto *map = static_cast<char *>(
		::mmap(nullptr, d.size(), PROT_READ | PROT_WRITE, MAP_SHARED, d.fd(), 0));
	ASSERT_NE(map, MAP_FAILED);
	for (std::size_t i = 0; i < bufs.size(); i++) {
		const char *p = map + r.dmabuf_offset(i);

		EXPECT_EQ(std::memcmp(p, bufs[i].ptr, bufs[i].len), 0) << "buffer " << i;
	}
	map[r.dmabuf_offset(2) + 10] = 'X'; /* through the dma-buf */
	EXPECT_EQ(b[10], 'X');
	::munmap(map, d.size());

	/* The dma-buf outlives the registration; the pages stay pinned. */
	std::uint64_t pin = process_pinned_bytes();
	std::uint64_t pages = r.pages();
	r.reset();
	EXPECT_EQ(process_pinned_bytes(), pin);
	d = DmaBuf();
	EXPECT_EQ(process_pinned_bytes(), pin - pages * page);
}

/*
 * 2000 scattered malloc'd buffers, 4 KiB .. 64 KiB, read from a file with
 * READ_FIXED through the library's fixed buffers: byte-exact.
 */
TEST(ScatteredReadFixed, TwoThousandBuffersGetTheFileByteForByte)
{
	if (test::mode_under_test() == Mode::Kernel && !test::kernel_available())
		GTEST_SKIP() << "no /dev/svmbatch";
	struct FreeDeleter {
		void operator()(void *p) const { std::free(p); }
	};
	const std::size_t n = 2000;
	std::mt19937 rng(2000);
	std::vector<std::unique_ptr<char, FreeDeleter>> mem, spacers;
	std::vector<Buffer> b;
	std::size_t total = 0;

	for (std::size_t i = 0; i < n; i++) {
		std::size_t len = 4096 + rng() % (std::size_t{60} * 1024);

		mem.emplace_back(static_cast<char *>(std::malloc(len)));
		spacers.emplace_back(static_cast<char *>(std::malloc(1 + rng() % 8192)));
		b.push_back({mem.back().get(), len});
		total += len;
	}
	test::ScratchFile file(total);
	Context ctx = test::make_context();
	Registration reg = ctx.register_buffers(b);
	test::Ring ring(128);
	FixedBuffers fixed = register_fixed(reg, ring.get());
	std::uint64_t pin_with_both = process_pinned_bytes();

	EXPECT_GT(pin_with_both, 0u);
	std::size_t submitted = 0, completed = 0, next = 0;
	std::vector<std::size_t> offsets(n); /* buffer i holds file[offsets[i]..] */
	for (std::size_t i = 1; i < n; i++)
		offsets[i] = offsets[i - 1] + b[i - 1].len;
	while (completed < n) {
		io_uring_sqe *sqe;

		while (next < n && submitted - completed < 64 &&
		       (sqe = io_uring_get_sqe(&ring.get()))) {
			const FixedSlice &s = fixed[next];

			ASSERT_EQ(s.len, b[next].len);
			io_uring_prep_read_fixed(sqe, file.fd(), s.addr,
						 static_cast<unsigned>(s.len), offsets[next],
						 static_cast<int>(s.index));
			sqe->user_data = next++;
			submitted++;
		}
		ASSERT_GE(io_uring_submit(&ring.get()), 0);
		io_uring_cqe *cqe;
		ASSERT_EQ(io_uring_wait_cqe(&ring.get(), &cqe), 0);
		ASSERT_EQ(cqe->res, static_cast<int>(b[cqe->user_data].len))
			<< "buffer " << cqe->user_data;
		io_uring_cqe_seen(&ring.get(), cqe);
		completed++;
	}
	std::size_t bad = 0;
	for (std::size_t i = 0; i < n; i++) {
		const auto *p = static_cast<const std::uint8_t *>(b[i].ptr);

		for (std::size_t k = 0; k < b[i].len; k++)
			bad += p[k] != test::pattern_byte(offsets[i] + k);
	}
	EXPECT_EQ(bad, 0u);
}

} // namespace
} // namespace svmbatch
