// SPDX-License-Identifier: MIT
// The fixture of the tests that read and write through a caller's ring
// (reader_test.cpp, parallel_io_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <liburing.h>

#include <memory>
#include <optional>

#include <svmbatch/all.hpp>

#include "test_util.hpp"

namespace svmbatch::test {

/// A context of the suite's mode and a 64-entry ring of the caller's, in
/// which every test must leave nothing: each request it submitted was also
/// reaped, by a batch or a Reader/Writer.
class RingFixture : public ::testing::Test {
protected:
	void SetUp() override
	{
		ctx_.emplace(make_context());
		ring_ = std::make_unique<Ring>(64);
	}
	void TearDown() override
	{
		EXPECT_EQ(io_uring_cq_ready(&ring_->get()), 0u);
		EXPECT_EQ(io_uring_sq_ready(&ring_->get()), 0u);
	}
	std::optional<Context> ctx_;
	std::unique_ptr<Ring> ring_;
};

} // namespace svmbatch::test
