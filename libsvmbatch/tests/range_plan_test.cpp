// SPDX-License-Identifier: MIT
// The merge/split planner on its own: fake addresses, nothing is touched.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include <svmbatch/error.hpp>

#include "core/range_plan.hpp"

namespace svmbatch::detail {
namespace {

constexpr std::size_t page = 4096;
constexpr std::size_t no_limit = std::size_t{1} << 40;

Buffer buf(std::uintptr_t addr, std::size_t len, Access access = Access::ReadWrite)
{
	return {reinterpret_cast<void *>(addr), len, access};
}

int plan_errno(const std::vector<Buffer> &b, std::size_t *index)
{
	try {
		plan_ranges(b, page, no_limit);
	} catch (const Error &e) {
		EXPECT_EQ(e.step(), Step::Validate);
		*index = e.buffer_index();
		return e.err();
	}
	return 0;
}

TEST(RangePlan, UnalignedBufferIsRoundedToPages)
{
	auto p = plan_ranges(std::vector{buf(0x10100, 0x1f00 + 1)}, page, no_limit);

	ASSERT_EQ(p.ranges.size(), 1u);
	EXPECT_EQ(p.ranges[0].addr, 0x10000u);
	EXPECT_EQ(p.ranges[0].len, 3 * page); /* 0x10100..0x12000 inclusive */
	EXPECT_EQ(p.locations[0].range, 0u);
	EXPECT_EQ(p.locations[0].offset, 0x100u);
}

TEST(RangePlan, AdjacentPagesMergeAndAGapSplits)
{
	std::vector b{buf(0x20000, page), buf(0x21000, 10), buf(0x23000, page)};
	auto p = plan_ranges(b, page, no_limit);

	ASSERT_EQ(p.ranges.size(), 2u);
	EXPECT_EQ(p.ranges[0].addr, 0x20000u);
	EXPECT_EQ(p.ranges[0].len, 2 * page);
	EXPECT_EQ(p.ranges[1].addr, 0x23000u);
	EXPECT_EQ(p.locations[1].range, 0u);
	EXPECT_EQ(p.locations[1].offset, page);
	EXPECT_EQ(p.locations[2].range, 1u);
}

TEST(RangePlan, OverlappingAndSamePageBuffersShareOneRange)
{
	std::vector b{buf(0x30010, 100), buf(0x30200, 100), buf(0x30000, 3 * page),
		      buf(0x31ff0, 0x20)};
	auto p = plan_ranges(b, page, no_limit);

	ASSERT_EQ(p.ranges.size(), 1u);
	EXPECT_EQ(p.ranges[0].len, 3 * page);
	EXPECT_EQ(p.locations[0].offset, 0x10u);
	EXPECT_EQ(p.locations[1].offset, 0x200u);
	EXPECT_EQ(p.locations[3].offset, 0x1ff0u);
	EXPECT_EQ(p.last_range[3], 0u);
}

TEST(RangePlan, RangesAreSortedWhateverTheCallerOrder)
{
	std::vector b{buf(0x90000, 1), buf(0x10000, 1), buf(0x50000, 1)};
	auto p = plan_ranges(b, page, no_limit);

	ASSERT_EQ(p.ranges.size(), 3u);
	EXPECT_EQ(p.locations[0].range, 2u);
	EXPECT_EQ(p.locations[1].range, 0u);
	EXPECT_EQ(p.locations[2].range, 1u);
}

TEST(RangePlan, ReadOnlyOnlyWhenEveryBufferIsReadOnly)
{
	std::vector b{buf(0x10000, page, Access::ReadOnly), buf(0x11000, page, Access::ReadWrite),
		      buf(0x40000, page, Access::ReadOnly), buf(0x40800, 16, Access::ReadOnly)};
	auto p = plan_ranges(b, page, no_limit);

	ASSERT_EQ(p.ranges.size(), 2u);
	EXPECT_EQ(p.ranges[0].access, Access::ReadWrite);
	EXPECT_EQ(p.ranges[1].access, Access::ReadOnly);
}

TEST(RangePlan, BadBuffersNameTheirIndex)
{
	std::size_t index = 0;

	EXPECT_EQ(plan_errno({buf(0x1000, 1), buf(0x2000, 0)}, &index), EINVAL);
	EXPECT_EQ(index, 1u);
	EXPECT_EQ(plan_errno({buf(0, 5)}, &index), EINVAL);
	EXPECT_EQ(index, 0u);
	EXPECT_EQ(plan_errno({buf(0x1000, 1), buf(0x2000, 1), buf(UINTPTR_MAX - 10, 100)}, &index),
		  EOVERFLOW);
	EXPECT_EQ(index, 2u);
	/* The last page of the address space has no end address. */
	EXPECT_EQ(plan_errno({buf(UINTPTR_MAX - 10, 5)}, &index), EOVERFLOW);
}

TEST(RangePlan, LimitCutsBetweenBuffers)
{
	/* Three touching 3-page buffers, limit 4 pages: no buffer is cut. */
	std::vector b{buf(0x100000, 3 * page), buf(0x103000, 3 * page), buf(0x106000, 3 * page)};
	auto p = plan_ranges(b, page, 4 * page);

	ASSERT_EQ(p.ranges.size(), 3u);
	for (std::size_t i = 0; i < 3; i++) {
		EXPECT_EQ(p.ranges[i].len, 3 * page);
		EXPECT_EQ(p.locations[i].range, i);
		EXPECT_EQ(p.locations[i].offset, 0u);
		EXPECT_EQ(p.last_range[i], i);
	}
}

TEST(RangePlan, LimitPacksSmallBuffersTogether)
{
	std::vector<Buffer> b;
	for (std::size_t i = 0; i < 10; i++)
		b.push_back(buf(0x100000 + i * page, page));
	auto p = plan_ranges(b, page, 4 * page);

	ASSERT_EQ(p.ranges.size(), 3u); /* 4 + 4 + 2 pages */
	EXPECT_EQ(p.ranges[2].len, 2 * page);
	EXPECT_EQ(p.locations[9].range, 2u);
	EXPECT_EQ(p.locations[9].offset, page);
}

TEST(RangePlan, OneBufferLongerThanTheLimitSpansRanges)
{
	const std::size_t gib = std::size_t{1} << 30;
	std::vector b{buf(0x7f0000000000, 2 * gib + 5 * page + 7)};
	auto p = plan_ranges(b, page, gib);

	ASSERT_EQ(p.ranges.size(), 3u);
	EXPECT_EQ(p.ranges[0].len, gib);
	EXPECT_EQ(p.ranges[1].len, gib);
	EXPECT_EQ(p.ranges[2].len, 6 * page);
	EXPECT_EQ(p.locations[0].range, 0u);
	EXPECT_EQ(p.last_range[0], 2u);
}

TEST(RangePlan, OverGibBuffersOfTouchingTensors)
{
	const std::size_t mib = std::size_t{1} << 20;
	std::vector b{buf(0x7f0000000000, 600 * mib), buf(0x7f0000000000 + 600 * mib, 600 * mib),
		      buf(0x7f0000000000 + 1200 * mib, 100 * mib)};
	auto p = plan_ranges(b, page, 1024 * mib);

	ASSERT_EQ(p.ranges.size(), 2u); /* 600 | 600 + 100 */
	EXPECT_EQ(p.ranges[1].len, 700 * mib);
	EXPECT_EQ(p.locations[2].range, 1u);
	EXPECT_EQ(p.locations[2].offset, 600 * mib);
}

/* Invariants over random inputs: coverage, order, limits, no lost pages. */
TEST(RangePlan, RandomInputsKeepEveryInvariant)
{
	std::mt19937_64 rng(42);

	for (int round = 0; round < 300; round++) {
		std::size_t limit = page * (1 + rng() % 64);
		std::vector<Buffer> b(1 + rng() % 200);

		for (Buffer &x : b)
			x = buf(0x100000 + (rng() % 4096) * 256, 1 + rng() % (20 * page),
				rng() % 3 ? Access::ReadWrite : Access::ReadOnly);
		auto p = plan_ranges(b, page, limit);

		for (std::size_t r = 0; r < p.ranges.size(); r++) {
			ASSERT_EQ(p.ranges[r].addr % page, 0u);
			ASSERT_EQ(p.ranges[r].len % page, 0u);
			ASSERT_GT(p.ranges[r].len, 0u);
			ASSERT_LE(p.ranges[r].len, limit);
			if (r) {
				ASSERT_GE(p.ranges[r].addr,
					  p.ranges[r - 1].addr + p.ranges[r - 1].len);
			}
		}
		std::uint64_t covered = 0;
		for (const auto &r : p.ranges)
			covered += r.len;
		std::vector<std::uintptr_t> pages;
		for (std::size_t i = 0; i < b.size(); i++) {
			auto a = reinterpret_cast<std::uintptr_t>(b[i].ptr);
			const auto &first = p.ranges[p.locations[i].range];
			const auto &last = p.ranges[p.last_range[i]];

			ASSERT_EQ(first.addr + p.locations[i].offset, a);
			ASSERT_LT(p.locations[i].offset, first.len);
			ASSERT_GE(last.addr + last.len, a + b[i].len);
			/* Contiguous ranges only: the buffer's VA has no hole. */
			for (std::size_t r = p.locations[i].range; r < p.last_range[i]; r++)
				ASSERT_EQ(p.ranges[r].addr + p.ranges[r].len, p.ranges[r + 1].addr);
			for (std::size_t r = p.locations[i].range; r <= p.last_range[i]; r++) {
				if (b[i].access == Access::ReadWrite) {
					ASSERT_EQ(p.ranges[r].access, Access::ReadWrite);
				}
			}
			for (auto x = a & ~(page - 1); x < a + b[i].len; x += page)
				pages.push_back(x);
		}
		std::sort(pages.begin(), pages.end());
		pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
		ASSERT_EQ(covered, pages.size() * page); /* no extra page */
	}
}

} // namespace
} // namespace svmbatch::detail
