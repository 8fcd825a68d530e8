// SPDX-License-Identifier: MIT
// <svmbatch/torch.hpp> against the libtorch it is built with (Debian's
// libtorch-dev here, torch 2.11's on the H100).
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include <svmbatch/svmbatch.hpp>
#include <svmbatch/torch.hpp>

#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::expect_error;

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

	torch::PinnedTensors pinned = torch::pin(ctx, std::move(tensors));
	base.reset();
	EXPECT_EQ(pinned.registration().buffers().size(), 100u);
	EXPECT_LE(pinned.ranges(), 100u);
	EXPECT_EQ(pinned.buffer_of(100), pinned.buffer_of(0));
	EXPECT_EQ(pinned.buffer_of(101), Error::no_index);
	EXPECT_EQ(pinned.registration().buffers()[pinned.buffer_of(0)].ptr, first);
	EXPECT_EQ(pinned.tensors()[0].data_ptr(), first) << "kept alive";
	EXPECT_EQ(pinned.tensors()[3][0].item<float>(), 3.0F);
	EXPECT_EQ(pinned.mapping(), nullptr);
	torch::PinnedTensors moved = std::move(pinned);
	EXPECT_EQ(moved.tensors().size(), 102u);
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

} // namespace
} // namespace svmbatch
