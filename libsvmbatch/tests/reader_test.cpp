// SPDX-License-Identifier: MIT
// Reader: queued READ_FIXED reads into registered buffers (both modes).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "ring_fixture.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

class ReaderTest : public test::RingFixture {};

using test::expect_error;

TEST_F(ReaderTest, ThreeHundredScatteredRequestsLandByteForByte)
{
	const std::size_t file_len = 8 << 20;
	test::ScratchFile file(file_len);
	std::mt19937_64 rng(42);
	std::vector<std::vector<std::uint8_t>> mem(300);
	std::vector<Buffer> bufs;
	for (auto &m : mem) {
		m.assign(1 + rng() % (96 << 10), 0);
		bufs.push_back({m.data(), m.size()});
	}
	Registration r = ctx_->register_buffers(bufs);
	FixedBuffers fixed = register_fixed(r, ring_->get());
	/* Small pieces and depth: exercises splitting and slot reuse. */
	Reader reader(ring_->get(), fixed, {8, 16 << 10, 512});

	std::vector<ReadRequest> rq;
	for (std::size_t i = 0; i < mem.size(); i++) {
		std::size_t boff = rng() % mem[i].size();
		std::size_t len = 1 + rng() % (mem[i].size() - boff);
		rq.push_back({file.fd(), rng() % (file_len - len), len, i, boff});
	}
	std::vector<ReadResult> res = reader.read(rq);
	ASSERT_EQ(res.size(), rq.size());
	EXPECT_GE(reader.submitted(), rq.size());
	for (std::size_t i = 0; i < rq.size(); i++) {
		ASSERT_EQ(res[i].err, 0) << "request " << i << ": " << std::strerror(res[i].err);
		ASSERT_EQ(res[i].bytes, rq[i].length);
		for (std::size_t b = 0; b < rq[i].length; b++)
			ASSERT_EQ(mem[i][rq[i].buffer_offset + b],
				  test::pattern_byte(rq[i].file_offset + b))
				<< "request " << i << " byte " << b;
	}
}

TEST_F(ReaderTest, FailedRequestsCompleteWithErrnoAndTheRestStillLand)
{
	test::ScratchFile file(1 << 20);
	std::vector<std::uint8_t> a(64 << 10), b(64 << 10), c(64 << 10);
	Buffer bufs[] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
	Registration r = ctx_->register_buffers(bufs);
	FixedBuffers fixed = register_fixed(r, ring_->get());
	Reader reader(ring_->get(), fixed, {4, 8 << 10, 512});
	int closed = ::dup(file.fd());
	ASSERT_GE(closed, 0);
	::close(closed); /* a descriptor number that is not open */

	std::vector<ReadRequest> rq{
		{file.fd(), 0, a.size(), 0, 0},
		{closed, 0, 4096, 1, 0}, /* EBADF */
		{file.fd(), (1 << 20) - 1000, 5000, 2, 0}, /* file ends: ENODATA */
		{file.fd(), 4096, 4096, 1, 4096},
	};
	std::vector<ReadResult> res = reader.read(rq);
	EXPECT_EQ(res[0].err, 0);
	EXPECT_EQ(res[0].bytes, a.size());
	EXPECT_EQ(res[1].err, EBADF);
	EXPECT_EQ(res[1].bytes, 0u);
	EXPECT_EQ(res[2].err, ENODATA);
	EXPECT_EQ(res[2].bytes, 1000u);
	EXPECT_EQ(res[3].err, 0);
	for (std::size_t i = 0; i < 1000; i++)
		ASSERT_EQ(c[i], test::pattern_byte((1 << 20) - 1000 + i));
	EXPECT_EQ(b[4096], test::pattern_byte(4096));

	/* The reader and the ring go on working. */
	std::vector<ReadRequest> again{{file.fd(), 100, 100, 1, 0}};
	res = reader.read(again);
	EXPECT_EQ(res[0].err, 0);
	EXPECT_EQ(b[0], test::pattern_byte(100));
}

TEST_F(ReaderTest, InvalidRequestsAreRefusedBeforeAnythingIsSubmitted)
{
	test::ScratchFile file(1 << 20);
	std::vector<std::uint8_t> a(8192), b(100);
	Buffer bufs[] = {{a.data(), a.size()}, {b.data(), b.size()}};
	Registration r = ctx_->register_buffers(bufs);
	FixedBuffers fixed = register_fixed(r, ring_->get());
	Reader reader(ring_->get(), fixed);

	std::vector<ReadRequest> bad_index{{file.fd(), 0, 10, 0, 0}, {file.fd(), 0, 10, 2, 0}};
	Error e = expect_error([&] { (void)reader.read(bad_index); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_NE(std::string(e.what()).find("request 1"), std::string::npos) << e.what();
	EXPECT_EQ(e.buffer_index(), Error::no_index) << "buffer 2 does not exist";
	EXPECT_EQ(reader.submitted(), 0u);

	std::vector<ReadRequest> too_long{{file.fd(), 0, 50, 1, 51}};
	e = expect_error([&] { (void)reader.read(too_long); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_EQ(a[0], 0) << "nothing was read";
}

TEST_F(ReaderTest, ReadingIntoAReadOnlyBufferIsRefused)
{
	test::ScratchFile file(1 << 20);
	std::vector<std::uint8_t> a(8192), source(8192, 7);
	Buffer bufs[] = {{a.data(), a.size()}, {source.data(), source.size(), Access::ReadOnly}};
	Registration r = ctx_->register_buffers(bufs);
	FixedBuffers fixed = register_fixed(r, ring_->get());
	Reader reader(ring_->get(), fixed);

	std::vector<ReadRequest> rq{{file.fd(), 0, 4096, 0, 0}, {file.fd(), 0, 4096, 1, 0}};
	Error e = expect_error([&] { (void)reader.read(rq); });
	EXPECT_EQ(e.err(), EACCES);
	EXPECT_EQ(e.buffer_index(), 1u);
	EXPECT_EQ(reader.submitted(), 0u);
	EXPECT_EQ(source[0], 7) << "the read-only buffer was not written";
}

TEST_F(ReaderTest, ODirectReadsAlignedRequestsAndRefusesOthers)
{
	/* On the guests' ext4 where set: their /tmp, a tmpfs, has no O_DIRECT
	 * before Linux 6.6. */
	test::ScratchFile file(1 << 20, test::writeback_dir());
	int fd = ::open(file.path().c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0 && errno == EINVAL)
		SVMBATCH_SKIP_ABSENT("odirect",
				     "this filesystem (" + file.path() + ") has no O_DIRECT");
	ASSERT_GE(fd, 0) << std::strerror(errno);
	void *mem = nullptr;
	ASSERT_EQ(::posix_memalign(&mem, 4096, 64 << 10), 0);
	std::unique_ptr<void, void (*)(void *)> owner(mem, std::free);
	auto *p = static_cast<std::uint8_t *>(mem);
	Buffer bufs[] = {{p, 64 << 10}};
	Registration r = ctx_->register_buffers(bufs);
	FixedBuffers fixed = register_fixed(r, ring_->get());
	Reader reader(ring_->get(), fixed, {8, 16 << 10, 4096});

	std::vector<ReadRequest> ok{{fd, 8192, 32 << 10, 0, 4096}};
	std::vector<ReadResult> res = reader.read(ok);
	EXPECT_EQ(res[0].err, 0) << std::strerror(res[0].err);
	EXPECT_EQ(p[4096], test::pattern_byte(8192));
	EXPECT_EQ(p[4096 + (32 << 10) - 1], test::pattern_byte(8192 + (32 << 10) - 1));

	std::vector<ReadRequest> misaligned{{fd, 100, 4096, 0, 0}};
	Error e = expect_error([&] { (void)reader.read(misaligned); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_NE(std::string(e.what()).find("O_DIRECT"), std::string::npos);
	::close(fd);
}

} // namespace
} // namespace svmbatch
