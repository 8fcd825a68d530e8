// SPDX-License-Identifier: MIT
// svmbatch::Arena: carving (best fit, alignment, exact size, full against
// fragmented), the page kinds, the registration over the whole mapping,
// threads carving at once, and creation failures that leave nothing
// behind.  In the mode under test: userspace on the host, kernel in the
// guests (where the registration shows in VmPin).
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <svmbatch/all.hpp>
#include <svmbatch/arena.hpp>

#include "arena/arena_memlock.hpp"
#if SVMBATCH_HAS_CUDA
#include "fake_cuda/fake_cuda.h"
#endif
#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::expect_error;

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
constexpr std::size_t huge_page = std::size_t{2} << 20;

ArenaOptions small_pages(std::size_t alignment = 256)
{
	ArenaOptions o;
	o.pages = PageKind::Small;
	o.alignment = alignment;
	return o;
}

/* The ArenaFull that fn throws; a test failure if it throws none. */
template <typename Fn> ArenaFull expect_full(Fn fn)
{
	try {
		fn();
	} catch (const ArenaFull &e) {
		return e;
	}
	ADD_FAILURE() << "no ArenaFull thrown";
	return {"none", 0, 0, 0};
}

/* A field of /proc/self/status in kB (VmSize, VmPin...), as bytes. */
std::uint64_t status_bytes(const std::string &field)
{
	std::ifstream in("/proc/self/status");
	std::string line;
	while (std::getline(in, line))
		if (line.rfind(field + ":", 0) == 0)
			return std::stoull(line.substr(field.size() + 1)) * 1024;
	ADD_FAILURE() << "no " << field << " in /proc/self/status";
	return 0;
}

/* A "Name: N kB" field of the smaps entry of the VMA holding p, in kB. */
std::uint64_t smaps_kb(const void *p, const std::string &field)
{
	std::ifstream in("/proc/self/smaps");
	std::string line;
	const auto a = reinterpret_cast<std::uintptr_t>(p);
	bool inside = false;
	while (std::getline(in, line)) {
		unsigned long lo = 0, hi = 0;
		if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 &&
		    line.find(':') > line.find(' ')) {
			inside = a >= lo && a < hi;
			continue;
		}
		if (inside && line.rfind(field + ":", 0) == 0)
			return std::stoull(line.substr(field.size() + 1));
	}
	ADD_FAILURE() << "no " << field << " for " << p << " in /proc/self/smaps";
	return 0;
}

/* A "Name: N" line of /proc/meminfo (HugePages_Free...). */
std::uint64_t meminfo(const std::string &field)
{
	std::ifstream in("/proc/meminfo");
	std::string line;
	while (std::getline(in, line))
		if (line.rfind(field + ":", 0) == 0)
			return std::stoull(line.substr(field.size() + 1));
	return 0;
}

std::string read_line(const char *path)
{
	std::ifstream in(path);
	std::string line;
	std::getline(in, line);
	return line;
}

class ArenaTest : public ::testing::Test {
protected:
	void SetUp() override { ctx_.emplace(test::make_context()); }
	std::optional<Context> ctx_;
};

TEST_F(ArenaTest, BlocksAreAlignedDistinctAndInsideTheMapping)
{
	const std::size_t cap = 64 * page + 100;
	Arena a(*ctx_, cap, small_pages(512));

	ASSERT_TRUE(a);
	EXPECT_EQ(a.capacity(), cap);
	EXPECT_EQ(a.mapped_bytes(), 65 * page);
	EXPECT_EQ(a.alignment(), 512u);
	EXPECT_EQ(a.page_kind(), PageKind::Small);
	EXPECT_EQ(a.numa_node(), -1);
	EXPECT_EQ(a.gpu_mapping(), nullptr);
	std::vector<std::pair<char *, std::size_t>> blocks;
	for (std::size_t n : {1, 511, 512, 513, 4000, 7}) {
		char *p = static_cast<char *>(a.allocate(n));
		EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u) << n;
		EXPECT_GE(p, a.base());
		EXPECT_LE(p + n, a.base() + cap);
		std::memset(p, static_cast<int>(n & 0xff), n);
		blocks.emplace_back(p, n);
	}
	/* Rounded sizes: 512 512 512 1024 4096 512. */
	EXPECT_EQ(a.used(), 7168u);
	EXPECT_EQ(a.free_bytes(), cap - 7168);
	EXPECT_EQ(a.live_blocks(), 6u);
	for (auto &[p, n] : blocks)
		for (std::size_t i = 0; i < n; i++)
			ASSERT_EQ(static_cast<unsigned char>(p[i]), n & 0xff) << n << " at " << i;
	for (auto &[p, n] : blocks)
		a.deallocate(p);
	EXPECT_EQ(a.used(), 0u);
	EXPECT_EQ(a.live_blocks(), 0u);
	EXPECT_EQ(a.largest_free(), cap);
}

TEST_F(ArenaTest, ExactSizeBlocksFillTheArenaThenItIsFull)
{
	const std::size_t cap = 10 * page;
	Arena a(*ctx_, cap, small_pages(page));
	std::vector<void *> blocks;
	blocks.reserve(10);
	for (int i = 0; i < 10; i++)
		blocks.push_back(a.allocate(page));
	EXPECT_EQ(a.used(), cap);
	EXPECT_EQ(a.largest_free(), 0u);
	ArenaFull e = expect_full([&] { (void)a.allocate(1); });
	EXPECT_EQ(e.err(), ENOMEM);
	EXPECT_EQ(e.step(), Step::Arena);
	EXPECT_FALSE(e.fragmented());
	EXPECT_EQ(e.requested(), page);
	EXPECT_EQ(e.free_bytes(), 0u);
	EXPECT_NE(std::string(e.what()).find("arena full"), std::string::npos) << e.what();
	/* A failed allocation changes nothing. */
	EXPECT_EQ(a.live_blocks(), 10u);
	for (void *p : blocks)
		a.deallocate(p);
	/* One block of the whole capacity: the free pieces merged again. */
	EXPECT_EQ(a.largest_free(), cap);
	void *all = a.allocate(cap);
	EXPECT_EQ(all, a.base());
	a.deallocate(all);
}

TEST_F(ArenaTest, FragmentedIsToldFromFull)
{
	const std::size_t unit = 1024;
	Arena a(*ctx_, 8 * unit, small_pages(unit));
	std::vector<void *> blocks;
	blocks.reserve(8);
	for (int i = 0; i < 8; i++)
		blocks.push_back(a.allocate(unit));
	for (int i = 0; i < 8; i += 2)
		a.deallocate(blocks[i]);
	EXPECT_EQ(a.free_bytes(), 4 * unit);
	EXPECT_EQ(a.largest_free(), unit);
	ArenaFull e = expect_full([&] { (void)a.allocate(2 * unit); });
	EXPECT_TRUE(e.fragmented());
	EXPECT_EQ(e.requested(), 2 * unit);
	EXPECT_EQ(e.free_bytes(), 4 * unit);
	EXPECT_EQ(e.largest_free(), unit);
	EXPECT_NE(std::string(e.what()).find("fragmented"), std::string::npos) << e.what();
	for (int i = 1; i < 8; i += 2)
		a.deallocate(blocks[i]);
	EXPECT_EQ(a.largest_free(), 8 * unit);
}

TEST_F(ArenaTest, BestFitTakesTheSmallestHoleThatFits)
{
	const std::size_t unit = 256;
	Arena a(*ctx_, 16 * unit, small_pages(unit));
	char *b = a.base();
	/* Holes of 3 units at 0 and 1 unit at 4; the rest taken. */
	void *big = a.allocate(3 * unit);
	void *sep1 = a.allocate(unit);
	void *small = a.allocate(unit);
	void *rest = a.allocate(11 * unit);
	ASSERT_EQ(big, b);
	ASSERT_EQ(small, b + 4 * unit);
	a.deallocate(big);
	a.deallocate(small);
	EXPECT_EQ(a.allocate(unit), b + 4 * unit); /* not the 3-unit hole */
	EXPECT_EQ(a.allocate(2 * unit), b);
	(void)sep1;
	(void)rest;
}

TEST_F(ArenaTest, ZeroBytesAndHugeRequests)
{
	Arena a(*ctx_, 4 * page, small_pages());
	EXPECT_EQ(a.rounded(0), 256u);
	EXPECT_EQ(a.rounded(257), 512u);
	void *p = a.allocate(0);
	EXPECT_EQ(a.used(), 256u);
	a.deallocate(p);
	ArenaFull e = expect_full([&] { (void)a.allocate(SIZE_MAX); });
	EXPECT_FALSE(e.fragmented());
	e = expect_full([&] { (void)a.allocate(4 * page + 1); });
	EXPECT_EQ(e.requested(), 4 * page + 256);
	EXPECT_EQ(a.used(), 0u);
}

TEST_F(ArenaTest, DeallocateRefusesWhatIsNotALiveBlock)
{
	Arena a(*ctx_, 4 * page, small_pages());
	char *p = static_cast<char *>(a.allocate(1000));
	char *q = static_cast<char *>(a.allocate(1000));
	int outside = 0;
	for (void *bad : {static_cast<void *>(nullptr), static_cast<void *>(p + 256),
			  static_cast<void *>(&outside), static_cast<void *>(a.base() + 4 * page),
			  static_cast<void *>(q + 1024)}) {
		Error e = expect_error([&] { a.deallocate(bad); });
		EXPECT_EQ(e.err(), EINVAL) << bad;
	}
	a.deallocate(p);
	Error e = expect_error([&] { a.deallocate(p); }); /* twice */
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(a.live_blocks(), 1u);
	EXPECT_EQ(a.used(), 1024u);
	a.deallocate(q);
}

TEST_F(ArenaTest, BadArgumentsAndEmptyArenas)
{
	EXPECT_EQ(expect_error([&] { Arena a(*ctx_, 0, small_pages()); }).err(), EINVAL);
	for (std::size_t align : {std::size_t{0}, std::size_t{3}, std::size_t{768}}) {
		Error e = expect_error([&] { Arena a(*ctx_, page, small_pages(align)); });
		EXPECT_EQ(e.err(), EINVAL) << align;
		EXPECT_EQ(e.step(), Step::Validate);
	}
	ArenaOptions o;
	o.pages = static_cast<PageKind>(7);
	EXPECT_EQ(expect_error([&] { Arena a(*ctx_, page, o); }).err(), EINVAL);

	Arena a(*ctx_, page, small_pages());
	Arena b(std::move(a));
	/* A moved-from arena is empty: that is what is tested. */
	// NOLINTBEGIN(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
	EXPECT_FALSE(a);
	EXPECT_TRUE(b);
	EXPECT_EQ(expect_error([&] { (void)a.allocate(1); }).err(), EBADF);
	EXPECT_EQ(expect_error([&] { (void)a.capacity(); }).err(), EBADF);
	// NOLINTEND(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
	b.reset();
	b.reset();
	EXPECT_FALSE(b);
	EXPECT_EQ(expect_error([&] { (void)b.registration(); }).err(), EBADF);
	Arena empty;
	EXPECT_FALSE(empty);
}

TEST_F(ArenaTest, RegistrationCoversTheWholeMapping)
{
	const std::uint64_t pin = test::quiet_pinned_bytes();
	Arena a(*ctx_, 37 * page + 1, small_pages());
	const Registration &r = a.registration();

	ASSERT_EQ(r.ranges().size(), 1u);
	EXPECT_EQ(r.ranges()[0].addr, reinterpret_cast<std::uintptr_t>(a.base()));
	EXPECT_EQ(r.ranges()[0].len, a.mapped_bytes());
	EXPECT_EQ(r.buffers().size(), 1u);
	EXPECT_EQ(r.pages(), 38u);
	if (r.mode() == Mode::Kernel) {
		EXPECT_EQ(r.pinned_pages(), 38u);
		EXPECT_EQ(process_pinned_bytes() - pin, a.mapped_bytes());
	} else {
		EXPECT_EQ(r.pinned_pages(), 0u);
	}
	/* Prefaulted: every page resident before the first block. */
	std::vector<unsigned char> resident(38);
	ASSERT_EQ(::mincore(a.base(), a.mapped_bytes(), resident.data()), 0);
	EXPECT_EQ(std::count(resident.begin(), resident.end(), 1), 38);
	a.reset();
	EXPECT_EQ(test::settled_pinned_bytes(pin), pin);
}

TEST_F(ArenaTest, ThpArenaIsMadeOfHugePages)
{
	const std::size_t cap = 3 * huge_page + 1;
	Arena a(*ctx_, cap, ArenaOptions{}); /* THP is the default */

	EXPECT_EQ(a.page_kind(), PageKind::Thp);
	EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.base()) % huge_page, 0u);
	EXPECT_EQ(a.mapped_bytes(), 4 * huge_page);
	EXPECT_EQ(a.registration().pages(), 4 * huge_page / page);
	const std::string thp = read_line("/sys/kernel/mm/transparent_hugepage/enabled");
	if (thp.empty() || thp.find("[never]") != std::string::npos)
		SVMBATCH_SKIP_ABSENT("thp", "transparent huge pages are off (" +
						    (thp.empty() ? "no sysfs file" : thp) + ")");
	/* The kernel may fall back to small pages under fragmentation: one
	 * huge page of four proves MADV_HUGEPAGE reached it. */
	EXPECT_GE(smaps_kb(a.base(), "AnonHugePages"), huge_page / 1024);
	if (a.registration().mode() == Mode::Kernel) {
		RegistrationStats s = a.registration().query();
		EXPECT_EQ(s.pages, 4 * huge_page / page);
		EXPECT_LT(s.folios, s.pages); /* a huge folio counts once */
	}
}

TEST_F(ArenaTest, HugetlbArenaUsesThePool)
{
	const std::uint64_t size_kb = meminfo("Hugepagesize");
	const std::uint64_t free_pages = meminfo("HugePages_Free");
	if (size_kb != 2048 || free_pages < 2)
		SVMBATCH_SKIP_ABSENT("hugetlb",
				     "no two free 2 MiB hugetlb pages (Hugepagesize " +
					     std::to_string(size_kb) + " kB, HugePages_Free " +
					     std::to_string(free_pages) + "; vm.nr_hugepages)");
	ArenaOptions o;
	o.pages = PageKind::Hugetlb;
	{
		Arena a(*ctx_, huge_page + 1, o);
		EXPECT_EQ(a.mapped_bytes(), 2 * huge_page);
		EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.base()) % huge_page, 0u);
		EXPECT_EQ(smaps_kb(a.base(), "KernelPageSize"), 2048u);
		EXPECT_EQ(meminfo("HugePages_Free"), free_pages - 2);
		void *p = a.allocate(huge_page);
		std::memset(p, 0x5a, huge_page);
		a.deallocate(p);
	}
	EXPECT_EQ(meminfo("HugePages_Free"), free_pages);
}

TEST_F(ArenaTest, HugetlbPastThePoolFailsAndLeavesNothing)
{
	const std::uint64_t pin = test::quiet_pinned_bytes();
	const std::uint64_t vm = status_bytes("VmSize");
	const std::uint64_t pages = meminfo("HugePages_Free") + 1;
	ArenaOptions o;
	o.pages = PageKind::Hugetlb;
	Error e = expect_error([&] { Arena a(*ctx_, pages * huge_page, o); });
	EXPECT_EQ(e.err(), ENOMEM) << e.what();
	EXPECT_EQ(e.step(), Step::Arena);
	EXPECT_NE(std::string(e.what()).find("hugetlb"), std::string::npos) << e.what();
	EXPECT_EQ(process_pinned_bytes(), pin);
	EXPECT_LT(status_bytes("VmSize"), vm + pages * huge_page);
}

/*
 * What an arena of bytes costs: resident memory (RssAnon, or HugetlbPages
 * for hugetlb) and, in kernel mode, VmPin grow by bytes rounded up to the
 * page kind's page, which for 33 MiB + 1 (5 MiB + 1 of hugetlb, the guests'
 * pool is 32 MiB) is far from the power of two above.  The slack covers the
 * library's own small allocations in RssAnon and, below, the pages a
 * thread has faulted in but not yet added to the process's RssAnon (before
 * 6.2 each thread counts up to 64 faults before it does), never a
 * rounding; hugetlb pages are counted exactly.
 */
void expect_exact_growth(Context &ctx, PageKind kind, std::size_t bytes, const char *resident_field,
			 std::size_t unit, std::size_t slack)
{
	const std::size_t expected = (bytes + unit - 1) / unit * unit;
	ArenaOptions o;
	o.pages = kind;
	o.prefault_threads = 1;
	const std::uint64_t pin = test::quiet_pinned_bytes();
	const std::uint64_t resident = status_bytes(resident_field);
	{
		Arena a(ctx, bytes, o);
		ASSERT_EQ(a.mapped_bytes(), expected);
		const std::uint64_t grown = status_bytes(resident_field) - resident;
		EXPECT_GE(grown + slack, expected) << resident_field;
		EXPECT_LE(grown, expected + slack) << resident_field;
		const std::uint64_t pinned = process_pinned_bytes() - pin;
		EXPECT_EQ(pinned, ctx.mode() == Mode::Kernel ? expected : 0u);
	}
	EXPECT_EQ(test::settled_pinned_bytes(pin), pin);
	EXPECT_LE(status_bytes(resident_field), resident + slack) << resident_field;
}

constexpr std::size_t odd_size = (std::size_t{33} << 20) + 1;

TEST_F(ArenaTest, SmallPagesGrowRssAndVmPinByTheSizeRoundedToAPage)
{
	expect_exact_growth(*ctx_, PageKind::Small, odd_size, "RssAnon", page, 1 << 20);
}

TEST_F(ArenaTest, ThpGrowsRssAndVmPinByTheSizeRoundedToAHugePage)
{
	expect_exact_growth(*ctx_, PageKind::Thp, odd_size, "RssAnon", huge_page, 1 << 20);
}

TEST_F(ArenaTest, HugetlbGrowsHugetlbPagesAndVmPinByTheSizeRoundedToAHugePage)
{
	const std::uint64_t size_kb = meminfo("Hugepagesize");
	const std::uint64_t free_pages = meminfo("HugePages_Free");
	if (size_kb != 2048 || free_pages < 3)
		SVMBATCH_SKIP_ABSENT("hugetlb",
				     "no three free 2 MiB hugetlb pages (Hugepagesize " +
					     std::to_string(size_kb) + " kB, HugePages_Free " +
					     std::to_string(free_pages) + "; vm.nr_hugepages)");
	expect_exact_growth(*ctx_, PageKind::Hugetlb, (std::size_t{5} << 20) + 1, "HugetlbPages",
			    huge_page, 0);
}

TEST_F(ArenaTest, NumaBindingIsApplied)
{
	ArenaOptions o = small_pages();
	o.numa_node = 0;
	std::optional<Arena> a;
	try {
		a.emplace(*ctx_, 16 * page, o);
	} catch (const Error &e) {
		if (e.err() != ENOSYS)
			throw;
		SVMBATCH_SKIP_ABSENT("numa", std::string("mbind: ") + e.what());
	}
	EXPECT_EQ(a->numa_node(), 0);
	std::ifstream in("/proc/self/numa_maps");
	std::string line;
	std::ostringstream addr;
	addr << std::hex << reinterpret_cast<std::uintptr_t>(a->base()) << ' ';
	bool found = false;
	while (std::getline(in, line))
		if (line.rfind(addr.str(), 0) == 0) {
			found = true;
			EXPECT_NE(line.find("bind:0"), std::string::npos) << line;
		}
	EXPECT_TRUE(found) << "no numa_maps line for " << addr.str();
}

TEST_F(ArenaTest, BindingToANodeThatIsNotThereLeavesNothing)
{
	const std::uint64_t pin = test::quiet_pinned_bytes();
	const std::uint64_t vm = status_bytes("VmSize");
	ArenaOptions o = small_pages();
	o.numa_node = 1000;
	const std::size_t bytes = 64 << 20;
	Error e = expect_error([&] { Arena a(*ctx_, bytes, o); });
	EXPECT_TRUE(e.err() == EINVAL || e.err() == ENOSYS) << e.what();
	EXPECT_EQ(process_pinned_bytes(), pin);
	EXPECT_LT(status_bytes("VmSize"), vm + bytes);
}

/*
 * Threads carve, fill, check and give back blocks at once.  Every block is
 * filled with its owner's tag and checked before it goes back, so two
 * live blocks that overlap fail the test; the arena is large enough that
 * every allocation must succeed.
 */
TEST_F(ArenaTest, ThreadsCarveAndFreeAtOnce)
{
	constexpr int threads = 4, rounds = 3000, keep = 16;
	constexpr std::size_t max_block = std::size_t{3} * 1024;
	/* Five times the most that can be live: fragmentation cannot fail it. */
	Arena a(*ctx_, std::size_t{5} * threads * keep * max_block, small_pages());
	std::atomic<int> failures{0};
	auto worker = [&](int id) {
		std::mt19937 rng(static_cast<unsigned>(id) * 7919U + 1);
		struct Live {
			unsigned char *p;
			std::size_t n;
			unsigned char tag;
		};
		std::vector<Live> live;
		auto check_and_free = [&](const Live &b) {
			for (std::size_t i = 0; i < b.n; i++)
				if (b.p[i] != b.tag) {
					failures++;
					break;
				}
			a.deallocate(b.p);
		};
		for (int r = 0; r < rounds; r++) {
			if (live.size() == keep) {
				std::size_t k = rng() % live.size();
				check_and_free(live[k]);
				live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
			}
			std::size_t n = 1 + rng() % max_block;
			auto tag = static_cast<unsigned char>(id * 64 + r % 64);
			try {
				auto *p = static_cast<unsigned char *>(a.allocate(n));
				if (reinterpret_cast<std::uintptr_t>(p) % 256 != 0)
					failures++;
				std::memset(p, tag, n);
				live.push_back({p, n, tag});
			} catch (const Error &) {
				failures++;
			}
		}
		for (const Live &b : live)
			check_and_free(b);
	};
	std::vector<std::thread> pool;
	pool.reserve(threads);
	for (int t = 0; t < threads; t++)
		pool.emplace_back(worker, t);
	for (auto &t : pool)
		t.join();
	EXPECT_EQ(failures.load(), 0);
	EXPECT_EQ(a.live_blocks(), 0u);
	EXPECT_EQ(a.used(), 0u);
	EXPECT_EQ(a.largest_free(), a.capacity());
}

/* A budget of limit bytes with pinned bytes pinned already, no CAP_IPC_LOCK. */
detail::MemlockBudget budget(std::uint64_t limit, std::uint64_t pinned)
{
	detail::MemlockBudget b;
	b.soft_limit = limit;
	b.hard_limit = limit;
	b.pinned = pinned;
	b.page_size = page;
	return b;
}

bool says(const Error &e, const std::string &what)
{
	return std::string(e.what()).find(what) != std::string::npos;
}

/*
 * The check counts pages as the module's charge does (VmPin + the new pages
 * against the soft limit) and names the limit, what is pinned, the request
 * and how to raise the limit.  On its own, in any mode: the budget is given.
 */
TEST(ArenaMemlock, TheCheckCountsLikeTheModuleAndSaysWhatToChange)
{
	const std::uint64_t mib = 1 << 20;
	const detail::MemlockBudget b = budget(64 * mib, 8 * mib);

	detail::check_memlock(b, 56 * mib); /* exactly the limit: fits */
	Error e = expect_error([&] { detail::check_memlock(b, 56 * mib + page); });
	EXPECT_EQ(e.err(), ENOMEM) << e.what();
	EXPECT_EQ(e.step(), Step::Validate);
	EXPECT_EQ(e.buffer_index(), Error::no_index);
	const std::uint64_t need = 64 * mib + page;
	for (const std::string &what :
	     {std::string("RLIMIT_MEMLOCK, 64 MiB (67108864 bytes)"),
	      std::string("with 8 MiB (8388608 bytes) pinned already (VmPin)"),
	      "pinning " + std::to_string((56 * mib + page) / 1024) + " KiB (" +
		      std::to_string(56 * mib + page) + " bytes) would pass",
	      std::string("CAP_IPC_LOCK"), "`ulimit -l " + std::to_string(need / 1024) + "`",
	      "LimitMEMLOCK=" + std::to_string(need),
	      "`docker run --ulimit memlock=" + std::to_string(need) + ":" + std::to_string(need),
	      std::string("the hard limit, 64 MiB")})
		EXPECT_TRUE(says(e, what)) << "no \"" << what << "\" in: " << e.what();

	/* A part of a page counts as a page. */
	EXPECT_EQ(expect_error([&] { detail::check_memlock(b, 56 * mib + 1); }).err(), ENOMEM);
	/* Pinned past the limit already (it was lowered since): nothing fits. */
	EXPECT_EQ(expect_error([&] { detail::check_memlock(budget(mib, 2 * mib), page); }).err(),
		  ENOMEM);
	/* A raised hard limit is not asked for. */
	detail::MemlockBudget soft = b;
	soft.hard_unlimited = true;
	EXPECT_FALSE(
		says(expect_error([&] { detail::check_memlock(soft, 64 * mib); }), "hard limit"));
	/* CAP_IPC_LOCK and an unlimited soft limit bypass it, as in the module. */
	detail::MemlockBudget cap = b, unlimited = b;
	cap.cap_ipc_lock = true;
	unlimited.unlimited = true;
	detail::check_memlock(cap, 1024 * mib);
	detail::check_memlock(unlimited, 1024 * mib);
}

/* The budget is read from this process: the soft and hard limits, the
 * effective CAP_IPC_LOCK and VmPin. */
TEST(ArenaMemlock, TheBudgetIsReadFromTheProcess)
{
	int status = test::run_in_child([]() -> int {
		if (!test::drop_cap_ipc_lock())
			return 10;
		rlimit lim{1 << 20, 2 << 20}; /* lowered: no CAP_SYS_RESOURCE needed */
		if (::setrlimit(RLIMIT_MEMLOCK, &lim))
			return 11;
		detail::MemlockBudget b;
		if (!detail::read_memlock_budget(&b))
			return 12;
		if (b.soft_limit != lim.rlim_cur || b.hard_limit != lim.rlim_max || b.unlimited ||
		    b.hard_unlimited)
			return 13;
		if (b.cap_ipc_lock)
			return 14;
		if (b.pinned != process_pinned_bytes() || b.page_size != page)
			return 15;
		return 0;
	});
	EXPECT_EQ(status, 0);
}

/*
 * Userspace mode pins nothing itself (the GPU drivers that pin there charge
 * no memlock limit): an arena over RLIMIT_MEMLOCK is made there.
 */
TEST_F(ArenaTest, UserspaceModeIsNotHeldToTheMemlockLimit)
{
	if (ctx_->mode() != Mode::Userspace)
		GTEST_SKIP() << "userspace mode only (mode under test: " << mode_name(ctx_->mode())
			     << ")";
	int status = test::run_in_child([]() -> int {
		if (!test::drop_cap_ipc_lock())
			return 10;
		rlimit lim{page, page};
		if (::setrlimit(RLIMIT_MEMLOCK, &lim))
			return 11;
		Context ctx(Mode::Userspace);
		Arena a(ctx, 64 * page, small_pages());
		return a.mapped_bytes() == 64 * page ? 0 : 12;
	});
	EXPECT_EQ(status, 0);
}

/*
 * Kernel mode: RLIMIT_MEMLOCK of limit bytes without CAP_IPC_LOCK.  An
 * arena of exactly the limit fits (the module pins it); one page more is
 * refused before anything is mapped, faulted in or registered, and so is
 * REGISTER of the same page by the module itself.
 */
TEST_F(ArenaTest, MemlockLimitRefusesTheArenaBeforeAnyWork)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	int status = test::run_in_child([]() -> int {
		if (!test::drop_cap_ipc_lock())
			return 10;
		const std::size_t limit = 8 << 20;
		rlimit lim{limit, limit};
		if (::setrlimit(RLIMIT_MEMLOCK, &lim))
			return 11;
		Context ctx(Mode::Kernel); /* the parent's is bound to its mm */
		const std::uint64_t pin0 = process_pinned_bytes();
		if (pin0 % page != 0 || pin0 > limit / 2)
			return 12;
		Arena fits(ctx, limit - pin0, small_pages());
		if (process_pinned_bytes() != limit)
			return 13;

		const std::size_t bytes = 64 << 20;
		const std::uint64_t vm = status_bytes("VmSize");
		const std::uint64_t rss = status_bytes("VmRSS");
		try {
			Arena a(ctx, bytes, small_pages());
			return 14;
		} catch (const Error &e) {
			if (e.err() != ENOMEM || e.step() != Step::Validate ||
			    !says(e, "RLIMIT_MEMLOCK, 8 MiB") ||
			    !says(e, "pinning 64 MiB (67108864 bytes)") ||
			    !says(e, "with 8 MiB (8388608 bytes) pinned already") ||
			    !says(e, "ulimit -l 73728")) {
				std::fprintf(stderr, "unexpected: %s\n", e.what());
				return 15;
			}
		}
		if (process_pinned_bytes() != limit)
			return 16;
		/* Nothing mapped, nothing touched: not even a huge page's worth. */
		if (status_bytes("VmSize") >= vm + huge_page ||
		    status_bytes("VmRSS") >= rss + huge_page)
			return 17;
		/* One page more is what the module refuses too. */
		test::MappedPages one(1);
		Buffer b{one.p, page};
		try {
			(void)ctx.register_buffers({&b, 1});
			return 18;
		} catch (const Error &e) {
			if (e.err() != ENOMEM || e.step() != Step::Register)
				return 19;
		}
		fits.reset();
		if (test::settled_pinned_bytes(pin0) != pin0)
			return 20;
		Arena again(ctx, page, small_pages()); /* room again */
		return 0;
	});
	EXPECT_EQ(status, 0);
}

#if SVMBATCH_HAS_CUDA
CudaOptions fake_cuda()
{
	return {test::fake_cuda_library, 0};
}

TEST_F(ArenaTest, MappedOnceForTheGpu)
{
	fake_cuda_reset(1);
	CudaBackend cuda(fake_cuda());
	ArenaOptions o = small_pages();
	o.backend = &cuda;
	{
		Arena a(*ctx_, 16 * page, o);
		ASSERT_NE(a.gpu_mapping(), nullptr);
		EXPECT_EQ(a.gpu_mapping()->size(), 1u);
		EXPECT_EQ(fake_cuda_registered(), 1);
		char *p = static_cast<char *>(a.allocate(100));
		EXPECT_EQ(a.gpu_address(p),
			  a.gpu_mapping()->address(0) + static_cast<std::uint64_t>(p - a.base()));
		int outside = 0;
		EXPECT_EQ(expect_error([&] { (void)a.gpu_address(&outside); }).err(), EINVAL);
		a.deallocate(p);
	}
	EXPECT_EQ(fake_cuda_registered(), 0);
	Arena plain(*ctx_, page, small_pages());
	EXPECT_EQ(expect_error([&] { (void)plain.gpu_address(plain.base()); }).err(), EINVAL);
}

TEST_F(ArenaTest, AFailedGpuMappingLeavesNothing)
{
	fake_cuda_reset(1);
	CudaBackend cuda(fake_cuda());
	ArenaOptions o = small_pages();
	o.backend = &cuda;
	const std::size_t bytes = 32 << 20;
	const std::uint64_t pin = test::quiet_pinned_bytes();
	const std::uint64_t vm = status_bytes("VmSize");
	fake_cuda_fail_register_after(0, 2); /* CUDA_ERROR_OUT_OF_MEMORY */
	Error e = expect_error([&] { Arena a(*ctx_, bytes, o); });
	EXPECT_EQ(e.step(), Step::GpuMap) << e.what();
	EXPECT_EQ(e.err(), ENOMEM) << e.what();
	EXPECT_EQ(fake_cuda_registered(), 0);
	EXPECT_EQ(test::settled_pinned_bytes(pin), pin);
	EXPECT_LT(status_bytes("VmSize"), vm + bytes);
	fake_cuda_reset(1);
}
#endif

} // namespace
} // namespace svmbatch
