// SPDX-License-Identifier: MIT
// storage_buffers(): the walk over tensor storages that <svmbatch/torch.hpp>
// and svmbatch.torch share.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include <svmbatch/storage_spans.hpp>

namespace svmbatch {
namespace {

TEST(StorageBuffers, EachStorageOnceAsLongAsItsLongestSpan)
{
	std::array<char, 64> a{}, b{};
	const std::vector<StorageSpan> storages{
		{a.data(), 16}, {b.data(), 8}, {nullptr, 0},
		{a.data(), 64}, {b.data(), 4}, {a.data(), 0},
	};
	const StorageBuffers w = storage_buffers(storages, Access::ReadOnly);

	ASSERT_EQ(w.buffers.size(), 2u);
	EXPECT_EQ(w.buffers[0].ptr, a.data());
	EXPECT_EQ(w.buffers[0].len, 64u); /* the longest of 16 and 64 */
	EXPECT_EQ(w.buffers[1].ptr, b.data());
	EXPECT_EQ(w.buffers[1].len, 8u);
	EXPECT_EQ(w.buffers[0].access, Access::ReadOnly);
	EXPECT_EQ(w.owner, (std::vector<std::size_t>{0, 1}));
	EXPECT_EQ(w.buffer_of,
		  (std::vector<std::size_t>{0, 1, Error::no_index, 0, 1, Error::no_index}));
}

TEST(StorageBuffers, NoStoragesNoBuffers)
{
	const StorageBuffers w = storage_buffers({});
	EXPECT_TRUE(w.buffers.empty());
	EXPECT_TRUE(w.owner.empty());
	EXPECT_TRUE(w.buffer_of.empty());
}

} // namespace
} // namespace svmbatch
