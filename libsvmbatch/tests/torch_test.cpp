// SPDX-License-Identifier: MIT
// <svmbatch/torch.hpp> against the libtorch it is built with (Debian's
// libtorch-dev here, torch 2.11's on the H100).
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <svmbatch/all.hpp>
#include <svmbatch/torch.hpp>

#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::expect_error;

using Span = std::pair<std::uintptr_t, std::size_t>; // address, length

// The ranges that buffers (address, length) must become: rounded out to
// pages, sorted, merged where their pages touch or overlap
// (src/core/range_plan.hpp; no range here nears max_range_bytes).
std::vector<Span> page_ranges(const std::vector<Span> &spans)
{
	const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
	std::vector<Span> pages; // [begin, end)
	for (const auto &[addr, len] : spans)
		pages.emplace_back(addr / page * page, (addr + len + page - 1) / page * page);
	std::sort(pages.begin(), pages.end());
	std::vector<Span> merged;
	for (const auto &[begin, end] : pages) {
		if (!merged.empty() && begin <= merged.back().second)
			merged.back().second = std::max<std::uintptr_t>(merged.back().second, end);
		else
			merged.emplace_back(begin, end);
	}
	for (auto &[begin, end] : merged)
		end -= begin;
	return merged;
}

std::vector<Span> registered_ranges(const Registration &reg)
{
	std::vector<Span> out;
	for (const KernelRange &r : reg.ranges())
		out.emplace_back(r.addr, r.len);
	return out;
}

TEST(TorchPin, EveryStorageOnceAndTheTensorsKeptAlive)
{
	Context ctx = test::make_context();
	std::vector<at::Tensor> tensors;
	for (int i = 0; i < 100; i++)
		tensors.push_back(at::full({4096}, static_cast<float>(i)));
	at::Tensor base = tensors[0];
	tensors.push_back(base.slice(0, 10, 20)); // the same storage again
	tensors.push_back(at::empty({0})); // nothing to register
	const void *first = base.data_ptr();
	// Wherever the allocator put the 100 storages: the ranges their
	// pages make.
	std::vector<Span> storages;
	for (int i = 0; i < 100; i++)
		storages.emplace_back(reinterpret_cast<std::uintptr_t>(tensors[i].data_ptr()),
				      tensors[i].nbytes());
	const std::vector<Span> expected = page_ranges(storages);

	torch::PinnedTensors pinned = torch::pin(ctx, std::move(tensors));
	base.reset();
	EXPECT_EQ(pinned.registration().buffers().size(), 100u);
	EXPECT_EQ(registered_ranges(pinned.registration()), expected);
	EXPECT_EQ(pinned.ranges(), expected.size());
	EXPECT_EQ(pinned.buffer_of(100), pinned.buffer_of(0));
	EXPECT_EQ(pinned.buffer_of(101), Error::no_index);
	EXPECT_EQ(pinned.registration().buffers()[pinned.buffer_of(0)].ptr, first);
	EXPECT_EQ(pinned.tensors()[0].data_ptr(), first) << "kept alive";
	EXPECT_EQ(pinned.tensors()[3][0].item<float>(), 3.0F);
	EXPECT_EQ(pinned.mapping(), nullptr);
	torch::PinnedTensors moved = std::move(pinned);
	EXPECT_EQ(moved.tensors().size(), 102u);
}

// Storages of a known layout, in pages of one mapping: [0, 2), [2, 3) and
// [3, 5) touch (one range); page 5 is a gap; [6, 8) and 100 bytes at 8
// share their pages' edge (one range); two pieces of page 10 overlap once
// rounded to pages (one range).  7 storages, 3 ranges.
TEST(TorchPin, TouchingStoragesMerge)
{
	Context ctx = test::make_context();
	const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
	void *mem = ::mmap(nullptr, 12 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			   -1, 0);
	ASSERT_NE(mem, MAP_FAILED);
	const auto base = reinterpret_cast<std::uintptr_t>(mem);
	const std::vector<Span> layout{
		{0, 2 * page},
		{2 * page, page},
		{3 * page, 2 * page},
		{6 * page, 2 * page},
		{8 * page, 100},
		{10 * page + 200, 100},
		{10 * page + 1000, 1000},
	};
	std::vector<at::Tensor> tensors;
	std::vector<Span> spans;
	for (const auto &[off, len] : layout) {
		tensors.push_back(at::from_blob(static_cast<char *>(mem) + off,
						{static_cast<std::int64_t>(len)}, at::kByte));
		spans.emplace_back(base + off, len);
	}
	{
		torch::PinnedTensors pinned = torch::pin(ctx, std::move(tensors));
		EXPECT_EQ(pinned.registration().buffers().size(), 7u);
		EXPECT_EQ(pinned.ranges(), 3u);
		const std::vector<Span> want{{base, 5 * page},
					     {base + 6 * page, 3 * page},
					     {base + 10 * page, page}};
		EXPECT_EQ(registered_ranges(pinned.registration()), want);
		EXPECT_EQ(page_ranges(spans), want);
	}
	::munmap(mem, 12 * page);
}

TEST(TorchPin, AFailureNamesTheTensorAndLeavesNothing)
{
	Context ctx = test::make_context();
	const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
	void *ro = ::mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(ro, MAP_FAILED);
	std::uint64_t vmpin = process_pinned_bytes();
	std::vector<at::Tensor> tensors{at::ones({1000}), at::ones({1000}),
					at::from_blob(ro, {static_cast<std::int64_t>(page)},
						      at::kByte)};
	Error e = expect_error([&] { (void)torch::pin(ctx, tensors); });
	EXPECT_EQ(e.err(), EFAULT);
	EXPECT_EQ(e.buffer_index(), 2u);
	EXPECT_NE(std::string(e.what()).find("tensor 2"), std::string::npos) << e.what();
	EXPECT_EQ(process_pinned_bytes(), vmpin);

	e = expect_error([&] { (void)torch::pin(ctx, {at::ones({2}), at::Tensor()}); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.buffer_index(), 1u);
	::munmap(ro, page);
}

/* A backend that maps nothing and counts the pages in memory when asked to map. */
class ResidencyProbe : public GpuBackend {
public:
	const char *name() const noexcept override { return "probe"; }
	GpuMapping map(const Registration &registration) override
	{
		const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
		resident = 0;
		for (const KernelRange &r : registration.ranges()) {
			std::vector<unsigned char> vec(r.len / page);
			// NOLINTNEXTLINE(performance-no-int-to-ptr): the registered address
			if (::mincore(reinterpret_cast<void *>(r.addr), r.len, vec.data()))
				ADD_FAILURE() << "mincore: " << errno;
			for (unsigned char v : vec)
				resident += v & 1;
		}
		return {"probe", GpuAddressKind::DevicePointer,
			std::vector<std::uint64_t>(registration.buffers().size()),
			std::make_unique<GpuMappingOwner>()};
	}

	long resident = -1;
};

/* Mapped at once, the pages are left to the runtime's pinning to fault in. */
TEST(TorchPin, AMappedPinLeavesFaultingInToTheBackend)
{
	Context ctx = test::make_context();
	const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
	const std::size_t len = 4 * page;
	void *mem = ::mmap(nullptr, 2 * len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			   -1, 0);
	ASSERT_NE(mem, MAP_FAILED);
	auto *bytes = static_cast<char *>(mem);
	const auto n = static_cast<std::int64_t>(len);
	ResidencyProbe probe;

	{
		torch::PinnedTensors p =
			torch::pin(ctx, {at::from_blob(bytes, {n}, at::kByte)}, &probe);
		ASSERT_NE(p.mapping(), nullptr);
		/* Kernel mode pins, which faults the pages in. */
		EXPECT_EQ(probe.resident, ctx.mode() == Mode::Kernel ? 4 : 0);
	}
	{
		torch::PinnedTensors p =
			torch::pin(ctx, {at::from_blob(bytes + len, {n}, at::kByte)});
		std::vector<unsigned char> vec(4);
		ASSERT_EQ(::mincore(bytes + len, len, vec.data()), 0);
		EXPECT_EQ(std::count_if(vec.begin(), vec.end(),
					[](unsigned char v) { return v & 1; }),
			  4)
			<< "without a backend the registration faults the pages in";
	}
	::munmap(mem, 2 * len);
}

} // namespace
} // namespace svmbatch
