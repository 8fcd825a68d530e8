// SPDX-License-Identifier: MIT
// ExtentReader into host memory (both modes): plan_extents against a
// byte-by-byte reference, random extents through a staging far smaller
// than what they read, the end of the file, O_DIRECT, invalid extents and
// options, and a StreamCopier of the test's own that runs each copy only
// at the fence wait after it, as a copy engine does, and catches a chunk
// read into again before its copies ended.  Every byte is checked, not a
// sample.  The CUDA copier over the FAKE driver: extent_reader_device_test.cpp.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "extent_fixture.hpp"
#include "test_util.hpp"
#include "transfer/extent_plan.hpp"

namespace svmbatch {
namespace {

using detail::ChunkRead;
using detail::ExtentPiece;
using detail::ExtentPlan;
using detail::plan_extents;
using test::Destinations;
using test::expect_error;
using test::kib;
using test::lengths_of;
using test::pattern_byte;
using test::random_extents;
using test::small_options;

// ---------------------------------------------------------------------
// plan_extents
// ---------------------------------------------------------------------

/// What plan_extents must give, worked out byte by byte: the runs (an
/// extent of the same fd and O_DIRECT flag that begins where the run
/// ends; an empty one of the same fd neither ends a run nor adds to it),
/// their reads in chunks from the run's start (rounded down to align for
/// O_DIRECT) to its end (rounded up), and per read the extent each byte
/// it needs belongs to, in pieces where the owner changes.
struct RefRead {
	ChunkRead read;
	std::vector<ExtentPiece> pieces;
};

std::vector<RefRead> reference_plan(const std::vector<Extent> &extents,
				    const std::vector<bool> &direct, std::size_t chunk,
				    std::size_t align)
{
	std::vector<RefRead> out;
	std::size_t i = 0;
	while (i < extents.size()) {
		if (extents[i].length == 0) {
			i++;
			continue;
		}
		const int fd = extents[i].fd;
		const bool d = direct[i];
		const std::uint64_t begin = extents[i].file_offset;
		std::uint64_t end = begin;
		std::vector<std::size_t> members;
		std::size_t j = i;
		for (; j < extents.size(); j++) {
			const Extent &e = extents[j];
			if (e.fd != fd || direct[j] != d)
				break;
			if (e.length == 0)
				continue;
			if (e.file_offset != end)
				break;
			members.push_back(j);
			end += e.length;
		}
		// The owner of every byte of the run.
		std::vector<std::size_t> owner;
		for (std::size_t m : members)
			owner.insert(owner.end(), extents[m].length, m);
		const std::uint64_t a = d ? align : 1;
		const std::uint64_t low = begin / a * a;
		const std::uint64_t high = (end + a - 1) / a * a;
		for (std::uint64_t at = low; at < high; at += chunk) {
			RefRead r;
			r.read.fd = fd;
			r.read.file_offset = at;
			r.read.length =
				static_cast<std::size_t>(std::min<std::uint64_t>(chunk, high - at));
			const std::uint64_t from = std::max(at, begin);
			const std::uint64_t to = std::min<std::uint64_t>(at + r.read.length, end);
			r.read.needed = static_cast<std::size_t>(to - at);
			for (std::uint64_t p = from; p < to; p++) {
				const std::size_t m = owner[p - begin];
				if (r.pieces.empty() || r.pieces.back().extent != m)
					r.pieces.push_back(
						{m, static_cast<std::size_t>(p - at), 0,
						 extents[m].dst + (p - extents[m].file_offset)});
				r.pieces.back().length++;
			}
			out.push_back(std::move(r));
		}
		i = j;
	}
	return out;
}

/// plan against the reference, read by read and piece by piece.
void expect_plan(const ExtentPlan &plan, const std::vector<RefRead> &want)
{
	ASSERT_EQ(plan.reads.size(), want.size());
	std::size_t pieces = 0;
	for (std::size_t k = 0; k < want.size(); k++) {
		const ChunkRead &r = plan.reads[k];
		const ChunkRead &w = want[k].read;
		SCOPED_TRACE("read " + std::to_string(k));
		ASSERT_EQ(r.fd, w.fd);
		ASSERT_EQ(r.file_offset, w.file_offset);
		ASSERT_EQ(r.length, w.length);
		ASSERT_EQ(r.needed, w.needed);
		ASSERT_EQ(r.first, pieces) << "pieces are listed in read order";
		ASSERT_EQ(r.count, want[k].pieces.size());
		for (std::size_t p = 0; p < r.count; p++) {
			const ExtentPiece &got = plan.pieces[r.first + p];
			const ExtentPiece &exp = want[k].pieces[p];
			SCOPED_TRACE("piece " + std::to_string(p));
			ASSERT_EQ(got.extent, exp.extent);
			ASSERT_EQ(got.at, exp.at);
			ASSERT_EQ(got.length, exp.length);
			ASSERT_EQ(got.dst, exp.dst);
		}
		pieces += r.count;
	}
	EXPECT_EQ(plan.pieces.size(), pieces);
}

ExtentPlan plan_of(const std::vector<Extent> &extents, const std::vector<bool> &direct,
		   std::size_t chunk, std::size_t align)
{
	std::unique_ptr<bool[]> d(new bool[extents.size() + 1]);
	for (std::size_t i = 0; i < extents.size(); i++)
		d[i] = direct[i];
	return plan_extents(extents, std::span<const bool>(d.get(), extents.size()), chunk, align);
}

TEST(ExtentPlan, AdjacentExtentsOfOneFdAreOneRunCutInChunks)
{
	const std::vector<Extent> e{{3, 1000, 5000, 0x10000},
				    {3, 6000, 10000, 0x20000},
				    {3, 16000, 20000, 0x30000}};
	const ExtentPlan plan = plan_of(e, {false, false, false}, 8192, 4096);
	// One run [1000, 36000): reads of 8192 from 1000, the last 2232.
	ASSERT_EQ(plan.reads.size(), 5u);
	const std::uint64_t offsets[] = {1000, 9192, 17384, 25576, 33768};
	for (std::size_t k = 0; k < 5; k++) {
		EXPECT_EQ(plan.reads[k].fd, 3);
		EXPECT_EQ(plan.reads[k].file_offset, offsets[k]);
		EXPECT_EQ(plan.reads[k].length, k < 4 ? 8192u : 2232u);
		EXPECT_EQ(plan.reads[k].needed, plan.reads[k].length);
	}
	// Read 0: all of extent 0, the first 3192 bytes of extent 1.
	ASSERT_EQ(plan.reads[0].count, 2u);
	const ExtentPiece &a = plan.pieces[0];
	const ExtentPiece &b = plan.pieces[1];
	EXPECT_EQ(a.extent, 0u);
	EXPECT_EQ(a.at, 0u);
	EXPECT_EQ(a.length, 5000u);
	EXPECT_EQ(a.dst, 0x10000u);
	EXPECT_EQ(b.extent, 1u);
	EXPECT_EQ(b.at, 5000u);
	EXPECT_EQ(b.length, 3192u);
	EXPECT_EQ(b.dst, 0x20000u);
	// Read 1: extent 1 from its byte 3192 to its end (6808 bytes), then
	// extent 2's first 1384.
	ASSERT_EQ(plan.reads[1].count, 2u);
	EXPECT_EQ(plan.pieces[2].extent, 1u);
	EXPECT_EQ(plan.pieces[2].at, 0u);
	EXPECT_EQ(plan.pieces[2].length, 6808u);
	EXPECT_EQ(plan.pieces[2].dst, 0x20000u + 3192);
	EXPECT_EQ(plan.pieces[3].extent, 2u);
	EXPECT_EQ(plan.pieces[3].at, 6808u);
	EXPECT_EQ(plan.pieces[3].length, 1384u);
	EXPECT_EQ(plan.pieces[3].dst, 0x30000u);
	EXPECT_EQ(plan.pieces.size(), 7u);
}

TEST(ExtentPlan, AGapAnotherFdOrAnOverlapStartsANewRun)
{
	const std::vector<Extent> e{
		{3, 0, 100, 0x1000}, // a run of its own
		{3, 101, 100, 0x2000}, // a gap of one byte
		{4, 201, 100, 0x3000}, // where fd 3 would go on, but fd 4
		{4, 250, 100, 0x4000}, // overlaps the one before
		{4, 350, 100, 0x5000}, // follows it: same run
	};
	const ExtentPlan plan = plan_of(e, std::vector<bool>(e.size(), false), 4096, 4096);
	ASSERT_EQ(plan.reads.size(), 4u);
	const std::pair<int, std::uint64_t> want[] = {{3, 0}, {3, 101}, {4, 201}, {4, 250}};
	const std::size_t lengths[] = {100, 100, 100, 200};
	for (std::size_t k = 0; k < 4; k++) {
		EXPECT_EQ(plan.reads[k].fd, want[k].first) << k;
		EXPECT_EQ(plan.reads[k].file_offset, want[k].second) << k;
		EXPECT_EQ(plan.reads[k].length, lengths[k]) << k;
	}
	EXPECT_EQ(plan.reads[3].count, 2u);
	expect_plan(plan, reference_plan(e, std::vector<bool>(e.size(), false), 4096, 4096));
}

/* Empty extents get no piece, wherever they claim to be: one between two
 * extents that follow each other must not hide the second. */
TEST(ExtentPlan, EmptyExtentsGetNoPieceAndHideNothing)
{
	const std::vector<Extent> e{
		{3, 777, 0, 0}, // empty, leading: no read of its own
		{3, 0, 8192, 0x10000},
		{3, 1u << 30, 0, 0x20000}, // empty, far away, same fd
		{3, 8192, 4096, 0x30000}, // follows extent 1
		{3, 0, 0, 0}, // empty again, trailing
	};
	const std::vector<bool> direct(e.size(), false);
	const ExtentPlan plan = plan_of(e, direct, 16384, 4096);
	ASSERT_EQ(plan.reads.size(), 1u);
	EXPECT_EQ(plan.reads[0].file_offset, 0u);
	EXPECT_EQ(plan.reads[0].length, 12288u);
	ASSERT_EQ(plan.pieces.size(), 2u);
	EXPECT_EQ(plan.pieces[0].extent, 1u);
	EXPECT_EQ(plan.pieces[1].extent, 3u);
	EXPECT_EQ(plan.pieces[1].at, 8192u);
	EXPECT_EQ(plan.pieces[1].length, 4096u);
	EXPECT_EQ(plan.pieces[1].dst, 0x30000u);
	for (const ExtentPiece &p : plan.pieces)
		EXPECT_NE(p.length, 0u);
	expect_plan(plan, reference_plan(e, direct, 16384, 4096));

	const std::vector<Extent> only_empty{{3, 0, 0, 0}, {4, 100, 0, 0x1000}};
	EXPECT_TRUE(plan_of(only_empty, {false, false}, 4096, 4096).reads.empty());
	EXPECT_TRUE(plan_of({}, {}, 4096, 4096).reads.empty());
}

TEST(ExtentPlan, ODirectReadsAreAlignedOnBothEnds)
{
	const std::vector<Extent> e{
		{5, 1000, 5000, 0x10000}, // [1000, 6000): one read [0, 8192)
		{5, 6000, 9000, 0x20000}, // goes on to 15000: [8192, 16384)
		{6, 20000, 1, 0x30000}, // buffered: exactly its byte
	};
	const std::vector<bool> direct{true, true, false};
	const ExtentPlan plan = plan_of(e, direct, 8192, 4096);
	ASSERT_EQ(plan.reads.size(), 3u);
	EXPECT_EQ(plan.reads[0].file_offset, 0u);
	EXPECT_EQ(plan.reads[0].length, 8192u);
	EXPECT_EQ(plan.reads[0].needed, 8192u);
	EXPECT_EQ(plan.reads[1].file_offset, 8192u);
	EXPECT_EQ(plan.reads[1].length, 8192u);
	EXPECT_EQ(plan.reads[1].needed, 15000u - 8192u);
	EXPECT_EQ(plan.reads[2].file_offset, 20000u);
	EXPECT_EQ(plan.reads[2].length, 1u);
	ASSERT_EQ(plan.reads[0].count, 2u);
	EXPECT_EQ(plan.pieces[0].at, 1000u);
	EXPECT_EQ(plan.pieces[0].length, 5000u);
	EXPECT_EQ(plan.pieces[1].at, 6000u);
	EXPECT_EQ(plan.pieces[1].length, 2192u);
	expect_plan(plan, reference_plan(e, direct, 8192, 4096));

	// An alignment larger than the page: reads on multiples of it.
	const std::vector<Extent> big{{5, 12345, 100000, 0x40000}};
	const ExtentPlan p2 = plan_of(big, {true}, 32768, 16384);
	for (const ChunkRead &r : p2.reads) {
		EXPECT_EQ(r.file_offset % 16384, 0u);
		EXPECT_EQ(r.length % 16384, 0u);
	}
	EXPECT_EQ(p2.reads.front().file_offset, 0u);
	EXPECT_EQ(p2.reads.back().file_offset + p2.reads.back().length, 114688u);
	expect_plan(p2, reference_plan(big, {true}, 32768, 16384));
}

/* Random lists against the reference: runs of adjacent extents, gaps,
 * other fds, O_DIRECT fds, overlaps, empty extents anywhere. */
TEST(ExtentPlan, RandomListsMatchTheReferenceByteForByte)
{
	for (unsigned seed = 0; seed < 300; seed++) {
		SCOPED_TRACE("seed " + std::to_string(seed));
		std::mt19937_64 rng(seed);
		const std::size_t chunk = std::size_t{4096} << (rng() % 3);
		const std::size_t align = 4096;
		const std::size_t n = rng() % 40;
		std::vector<Extent> e;
		std::vector<bool> direct;
		std::size_t last_index = SIZE_MAX; // of the last non-empty one
		for (std::size_t i = 0; i < n; i++) {
			const Extent *last = last_index != SIZE_MAX ? &e[last_index] : nullptr;
			Extent x;
			const unsigned kind = rng() % 10;
			x.fd = 3 + static_cast<int>(rng() % 3);
			if (kind < 4 && last) { // follows it, past any empty ones
				x.fd = last->fd;
				x.file_offset = last->file_offset + last->length;
			} else if (kind == 4 && last) { // overlaps it
				x.fd = last->fd;
				x.file_offset = last->file_offset + rng() % (last->length + 1);
			} else {
				x.file_offset = rng() % (1 << 20);
			}
			switch (rng() % 8) {
			case 0:
				x.length = 0;
				break;
			case 1:
			case 2:
				x.length = 1 + rng() % 64;
				break;
			default:
				x.length = 1 + rng() % (3 * chunk);
			}
			x.dst = (std::uint64_t{i} + 1) << 32 | (rng() & 0xffff);
			e.push_back(x);
			direct.push_back(x.fd == 5); // fd 5 is the O_DIRECT one
			if (x.length != 0)
				last_index = i;
		}
		const ExtentPlan plan = plan_of(e, direct, chunk, align);
		expect_plan(plan, reference_plan(e, direct, chunk, align));
		if (HasFatalFailure())
			return;
		// Every byte of every extent in exactly one piece.
		std::vector<std::size_t> covered(n);
		for (const ChunkRead &r : plan.reads) {
			EXPECT_LE(r.length, chunk);
			EXPECT_LE(r.needed, r.length);
			if (r.fd == 5) {
				EXPECT_EQ(r.file_offset % align, 0u);
				EXPECT_EQ(r.length % align, 0u);
			}
			for (std::size_t p = r.first; p < r.first + r.count; p++)
				covered[plan.pieces[p].extent] += plan.pieces[p].length;
		}
		for (std::size_t i = 0; i < n; i++)
			EXPECT_EQ(covered[i], e[i].length) << "extent " << i;
	}
}

TEST(ExtentPlan, DirectFdSaysWhetherAnFdIsODirect)
{
	test::ScratchFile file(4096, test::writeback_dir());
	EXPECT_EQ(detail::direct_fd(file.fd()), 0);
	const int closed = ::dup(file.fd());
	ASSERT_GE(closed, 0);
	::close(closed);
	EXPECT_EQ(detail::direct_fd(closed), -EBADF);
	const int fd = ::open(file.path().c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0 && errno == EINVAL)
		SVMBATCH_SKIP_ABSENT("odirect",
				     "this filesystem (" + file.path() + ") has no O_DIRECT");
	ASSERT_GE(fd, 0) << std::strerror(errno);
	EXPECT_EQ(detail::direct_fd(fd), 1);
	::close(fd);
}

// ---------------------------------------------------------------------
// ExtentReader into host memory
// ---------------------------------------------------------------------

/// A StreamCopier whose "device" is host memory and whose copies move
/// only when a wait() passes a fence recorded after them, reading their
/// source then, as a copy engine does.  It remembers each copy's source
/// bytes as they were when queued, and counts the copies whose source
/// changed before they ran: a staging chunk read into again too early.
class DeferredCopier final : public StreamCopier {
public:
	explicit DeferredCopier(unsigned slots = 4) : fences_(slots), recorded_(slots) {}
	DeferredCopier(const DeferredCopier &) = delete;
	DeferredCopier &operator=(const DeferredCopier &) = delete;
	DeferredCopier(DeferredCopier &&) = delete;
	DeferredCopier &operator=(DeferredCopier &&) = delete;
	~DeferredCopier() override { run(queued_.size()); }

	const char *name() const noexcept override { return "deferred"; }
	int copy(std::uint64_t dst, const void *src, std::size_t n) noexcept override
	{
		if (fail_copy_at_ != 0 && ++copy_calls_ >= fail_copy_at_)
			return fail_copy_;
		try {
			const auto *s = static_cast<const std::uint8_t *>(src);
			queued_.push_back({dst, s, std::vector<std::uint8_t>(s, s + n)});
		} catch (...) {
			return -ENOMEM;
		}
		return 0;
	}
	int fence(unsigned slot) noexcept override
	{
		if (slot >= fences_.size())
			return -EINVAL;
		fences_[slot] = queued_.size();
		recorded_[slot] = true;
		fenced_++;
		return 0;
	}
	int wait(unsigned slot) noexcept override
	{
		if (slot >= fences_.size())
			return -EINVAL;
		if (!recorded_[slot])
			return 0;
		recorded_[slot] = false;
		if (fail_wait_ != 0)
			return fail_wait_;
		run(fences_[slot]);
		return 0;
	}
	int synchronize() noexcept override
	{
		if (fail_wait_ != 0)
			return fail_wait_;
		std::fill(recorded_.begin(), recorded_.end(), false);
		run(queued_.size());
		return 0;
	}
	unsigned slots() const noexcept override { return static_cast<unsigned>(fences_.size()); }
	long driver_status() const noexcept override { return 0; }

	/// Copies not run yet; copies whose source changed before they ran.
	std::size_t pending() const { return queued_.size() - done_; }
	std::size_t stale() const { return stale_; }
	std::size_t copies() const { return queued_.size(); }
	std::size_t fences() const { return fenced_; }
	/// From the at-th copy() call on, copy() fails with err (0: never).
	void fail_copies_from(std::size_t at, int err)
	{
		fail_copy_at_ = at;
		fail_copy_ = err;
		copy_calls_ = 0;
	}
	void fail_waits(int err) { fail_wait_ = err; }

private:
	struct Copy {
		std::uint64_t dst;
		const std::uint8_t *src;
		std::vector<std::uint8_t> then;
	};
	void run(std::size_t upto) noexcept
	{
		for (; done_ < upto; done_++) {
			Copy &c = queued_[done_];
			if (!std::equal(c.then.begin(), c.then.end(), c.src))
				stale_++;
			// NOLINTNEXTLINE(performance-no-int-to-ptr): the "device" is host memory
			std::memcpy(reinterpret_cast<void *>(static_cast<std::uintptr_t>(c.dst)),
				    c.src, c.then.size());
			c.then = {};
		}
	}

	std::vector<std::size_t> fences_;
	std::vector<bool> recorded_;
	std::vector<Copy> queued_;
	std::size_t done_ = 0;
	std::size_t stale_ = 0;
	std::size_t fenced_ = 0;
	std::size_t copy_calls_ = 0;
	std::size_t fail_copy_at_ = 0;
	int fail_copy_ = 0;
	int fail_wait_ = 0;
};

class ExtentReaderTest : public ::testing::Test {
protected:
	void SetUp() override { ctx_.emplace(test::make_context()); }
	std::optional<Context> ctx_;
};

/* The set-up steps are named in order, and the sizes are what was asked. */
TEST_F(ExtentReaderTest, SetupNamesItsStepsAndTheStaging)
{
	ExtentReader r(*ctx_, small_options(64 * kib, 8));
	std::vector<std::string> names;
	for (const ExtentReaderStep &s : r.setup())
		names.push_back(s.name);
	EXPECT_EQ(names,
		  (std::vector<std::string>{"staging", "register", "ring", "fixed", "reader"}));
	EXPECT_EQ(r.chunk_bytes(), 64 * kib);
	EXPECT_EQ(r.chunks(), 8u);
	EXPECT_EQ(r.threads(), 2u);

	// Chunks the groups cannot share evenly are left unused.
	ExtentReader odd(*ctx_, small_options(64 * kib, 11, 1));
	EXPECT_EQ(odd.chunks(), 8u) << "four groups of two";
	ExtentReader three(*ctx_, small_options(64 * kib, 3, 1));
	EXPECT_EQ(three.chunks(), 2u) << "two groups of one";
	EXPECT_EQ(three.threads(), 1u);
}

/*
 * Hundreds of random extents of three files, read through staging of a
 * small fraction of their bytes (the ring wraps many times), at several
 * sizes of staging: each lands whole where it asked, nothing else is
 * written, and a reader serves one read() after another.
 */
TEST_F(ExtentReaderTest, RandomExtentsLandByteForByteThroughASmallStaging)
{
	constexpr std::size_t chunk = 64 * kib;
	const std::vector<std::size_t> sizes{(3 << 20) + 4321, (1 << 20) + 1, 777 * kib};
	test::ScratchFile a(sizes[0]), b(sizes[1]), c(sizes[2]);
	const std::vector<const test::ScratchFile *> files{&a, &b, &c};
	struct Case {
		std::size_t chunks;
		unsigned threads;
	};
	const Case cases[] = {{2, 1}, {3, 2}, {8, 2}, {13, 4}};
	for (const Case &k : cases) {
		SCOPED_TRACE("chunks " + std::to_string(k.chunks) + " threads " +
			     std::to_string(k.threads));
		ExtentReader reader(*ctx_, small_options(chunk, k.chunks, k.threads));
		for (unsigned round = 0; round < 2; round++) {
			std::mt19937_64 rng(k.chunks * 10 + round);
			std::vector<Extent> e = random_extents(rng, 150, files, sizes, chunk);
			std::uint64_t total = 0;
			for (const Extent &x : e)
				total += x.length;
			Destinations dst(lengths_of(e));
			dst.place(e);
			ASSERT_GT(total, 4 * reader.chunks() * chunk) << "the ring must wrap";

			const std::vector<ExtentResult> res = reader.read(e);
			ASSERT_EQ(res.size(), e.size());
			for (std::size_t i = 0; i < e.size(); i++) {
				ASSERT_EQ(res[i].err, 0)
					<< "extent " << i << ": " << std::strerror(res[i].err);
				ASSERT_EQ(res[i].bytes, e[i].length) << "extent " << i;
				ASSERT_FALSE(res[i].copy);
				ASSERT_TRUE(dst.holds(i, e[i].file_offset, e[i].length));
			}
			ASSERT_TRUE(dst.guards_intact());

			// The counters: what the plan says, worked out here.
			std::vector<bool> direct(e.size(), false);
			const std::vector<RefRead> want = reference_plan(e, direct, chunk, 4096);
			std::uint64_t asked = 0;
			std::size_t pieces = 0;
			for (const RefRead &w : want) {
				asked += w.read.length;
				pieces += w.pieces.size();
			}
			const ExtentReadStats &s = reader.last_read();
			EXPECT_EQ(s.reads, want.size());
			EXPECT_EQ(s.copies, pieces);
			EXPECT_EQ(s.bytes_read, asked);
			EXPECT_GT(s.ns, 0u);
			EXPECT_LE(s.wait_read_ns, s.ns);
			EXPECT_EQ(s.wait_copy_ns, 0u) << "no copier, no copies to wait for";
		}
	}
}

/* Extents of the same bytes, and the same extent twice: each gets its own
 * copy; an empty extent reports 0 bytes and no error. */
TEST_F(ExtentReaderTest, OverlappingAndEmptyExtents)
{
	test::ScratchFile file(1 << 20);
	ExtentReader reader(*ctx_, small_options(16 * kib, 4));
	const std::vector<Extent> shape{
		{file.fd(), 1000, 50000, 0}, {file.fd(), 1000, 50000, 0}, {file.fd(), 20000, 3, 0},
		{file.fd(), 5, 0, 0},	     {file.fd(), 51000, 1, 0},
	};
	Destinations dst(lengths_of(shape));
	std::vector<Extent> e = shape;
	dst.place(e);
	const std::vector<ExtentResult> res = reader.read(e);
	for (std::size_t i = 0; i < e.size(); i++) {
		EXPECT_EQ(res[i].err, 0) << i;
		EXPECT_EQ(res[i].bytes, e[i].length) << i;
		EXPECT_TRUE(dst.holds(i, e[i].file_offset, e[i].length));
	}
	EXPECT_TRUE(dst.guards_intact());
	EXPECT_TRUE(reader.read({}).empty());
	EXPECT_EQ(reader.last_read().reads, 0u);
}

/*
 * Extents at and past the end of the file: the one that reaches past it
 * ends with ENODATA and counts the bytes of its whole pieces that
 * arrived; the others of the same call, before and after it, land whole.
 */
TEST_F(ExtentReaderTest, TheEndOfTheFileIsENODATAForItsExtentsOnly)
{
	constexpr std::size_t chunk = 16 * kib;
	const std::size_t size = 3 * chunk;
	test::ScratchFile file(size), other(100 * kib);
	ExtentReader reader(*ctx_, small_options(chunk, 2));
	const std::vector<Extent> shape{
		{file.fd(), 0, 5000, 0},
		// Two chunks from 2 * chunk: the first arrives, the second is all
		// past the end: chunk bytes arrived.
		{file.fd(), 2 * chunk, 2 * chunk, 0},
		{other.fd(), 3, 90 * kib, 0},
		{file.fd(), size + 5000, 100, 0}, // wholly past the end
		{file.fd(), size - 1000, 2000, 0}, // straddles it: one piece
		{file.fd(), size - 10, 10, 0}, // ends at the end exactly
	};
	Destinations dst(lengths_of(shape));
	std::vector<Extent> e = shape;
	dst.place(e);
	const std::vector<ExtentResult> res = reader.read(e);
	const int want_err[] = {0, ENODATA, 0, ENODATA, ENODATA, 0};
	// A piece that did not arrive whole is not copied.
	const std::size_t want_bytes[] = {5000, chunk, 90 * kib, 0, 0, 10};
	for (std::size_t i = 0; i < e.size(); i++) {
		SCOPED_TRACE("extent " + std::to_string(i));
		EXPECT_EQ(res[i].err, want_err[i]) << std::strerror(res[i].err);
		EXPECT_EQ(res[i].bytes, want_bytes[i]);
		EXPECT_FALSE(res[i].copy);
		EXPECT_TRUE(dst.holds(i, e[i].file_offset, want_bytes[i]));
	}
	EXPECT_TRUE(dst.guards_intact());
}

/* Invalid extents are refused, naming the first, before anything is read. */
TEST_F(ExtentReaderTest, InvalidExtentsAreRefusedBeforeAnythingIsRead)
{
	test::ScratchFile file(1 << 20);
	ExtentReader reader(*ctx_, small_options(16 * kib, 2, 1));
	Destinations dst({100, 100, 100});
	const int closed = ::dup(file.fd());
	ASSERT_GE(closed, 0);
	::close(closed);
	struct Case {
		const char *what = nullptr;
		Extent bad;
		int err = 0;
	};
	const Case cases[] = {
		{"fd -1", {-1, 0, 10, dst.address(2)}, EINVAL},
		{"no destination", {file.fd(), 0, 10, 0}, EINVAL},
		{"an fd that is not open", {closed, 0, 10, dst.address(2)}, EBADF},
		{"an offset past 2^62",
		 {file.fd(), (std::uint64_t{1} << 62) + 1, 1, dst.address(2)},
		 EINVAL},
		{"a length past 2^62",
		 {file.fd(), 0, (std::size_t{1} << 62) + 1, dst.address(2)},
		 EINVAL},
	};
	for (const Case &c : cases) {
		SCOPED_TRACE(c.what);
		const std::vector<Extent> e{{file.fd(), 0, 100, dst.address(0)},
					    {file.fd(), 100, 100, dst.address(1)},
					    c.bad};
		const Error err = expect_error([&] { (void)reader.read(e); });
		EXPECT_EQ(err.err(), c.err);
		EXPECT_EQ(err.step(), Step::Validate);
		EXPECT_EQ(err.buffer_index(), 2u);
		EXPECT_NE(std::string(err.what()).find("extent 2"), std::string::npos)
			<< err.what();
		EXPECT_EQ(reader.last_read().reads, 0u) << "nothing was read";
		EXPECT_TRUE(dst.holds(0, 0, 0)) << "nothing was written";
		EXPECT_TRUE(dst.holds(1, 0, 0));
		EXPECT_TRUE(dst.guards_intact());
	}
	// An empty extent needs no destination, and the reader still works.
	const std::vector<Extent> ok{{file.fd(), 0, 0, 0}, {file.fd(), 7, 100, dst.address(0)}};
	const std::vector<ExtentResult> res = reader.read(ok);
	EXPECT_EQ(res[0].err, 0);
	EXPECT_EQ(res[0].bytes, 0u);
	EXPECT_EQ(res[1].bytes, 100u);
	EXPECT_TRUE(dst.holds(0, 7, 100));
}

TEST_F(ExtentReaderTest, BadOptionsAreEINVAL)
{
	struct Case {
		const char *what;
		std::size_t chunk_bytes;
		std::size_t staging_bytes;
		std::size_t direct_alignment;
	};
	const Case cases[] = {
		{"chunks of 0 bytes", 0, 1 << 20, 512},
		{"chunks smaller than a page", 2048, 1 << 20, 512},
		{"chunks not a multiple of 4096", 4096 + 512, 1 << 20, 512},
		{"chunks not a multiple of the O_DIRECT alignment", 12 * kib, 1 << 20, 8192},
		{"staging of one chunk", 64 * kib, 64 * kib, 512},
		{"staging of less than two chunks", 64 * kib, 128 * kib - 1, 512},
		{"no staging", 64 * kib, 0, 512},
	};
	const std::size_t fds = test::open_fds();
	for (const Case &c : cases) {
		ExtentReaderOptions o;
		o.chunk_bytes = c.chunk_bytes;
		o.staging_bytes = c.staging_bytes;
		o.io.direct_alignment = c.direct_alignment;
		const Error e = expect_error([&] { ExtentReader r(*ctx_, o); });
		EXPECT_EQ(e.err(), EINVAL) << c.what;
		EXPECT_EQ(e.step(), Step::Validate) << c.what;
	}
	EXPECT_EQ(test::open_fds(), fds);
	// Just enough: two chunks of a page.
	ExtentReaderOptions o;
	o.chunk_bytes = 4096;
	o.staging_bytes = 8192;
	ExtentReader r(*ctx_, o);
	EXPECT_EQ(r.chunks(), 2u);
}

/*
 * With a copier whose copies run only when a fence is waited for: every
 * chunk's copies ended before the chunk was read into again (no copy's
 * source changed before it ran), every copy ran by the time read()
 * returned, and every byte is there.
 */
TEST_F(ExtentReaderTest, ACopiersCopiesEndBeforeTheirChunkIsReadAgain)
{
	constexpr std::size_t chunk = 16 * kib;
	const std::vector<std::size_t> sizes{1 << 20, 300 * kib};
	test::ScratchFile a(sizes[0]), b(sizes[1]);
	for (std::size_t chunks : {2, 8, 16}) {
		SCOPED_TRACE("chunks " + std::to_string(chunks));
		ExtentReader reader(*ctx_, small_options(chunk, chunks));
		DeferredCopier copier;
		std::mt19937_64 rng(chunks);
		std::vector<Extent> e = random_extents(rng, 120, {&a, &b}, sizes, chunk);
		// And one file whole, in one run of many extents.
		for (std::uint64_t off = 0; off < sizes[0];) {
			const std::size_t len =
				std::min<std::size_t>(1 + rng() % (2 * chunk), sizes[0] - off);
			e.push_back({a.fd(), off, len, 0});
			off += len;
		}
		Destinations dst(lengths_of(e));
		dst.place(e);

		const std::vector<ExtentResult> res = reader.read(e, &copier);
		EXPECT_EQ(copier.pending(), 0u) << "read() returned before its copies ended";
		EXPECT_EQ(copier.stale(), 0u)
			<< "chunks were read into while copies from them waited";
		EXPECT_EQ(copier.copies(), reader.last_read().copies);
		EXPECT_GT(copier.fences(), 0u);
		for (std::size_t i = 0; i < e.size(); i++) {
			ASSERT_EQ(res[i].err, 0) << "extent " << i;
			ASSERT_EQ(res[i].bytes, e[i].length) << "extent " << i;
			ASSERT_TRUE(dst.holds(i, e[i].file_offset, e[i].length));
		}
		EXPECT_TRUE(dst.guards_intact());
	}
}

/* A copy that cannot be queued fails its extent, marked as the copy's, and
 * only its extent; a fence wait that fails throws Step::GpuCopy, after
 * which the reader serves the next read. */
TEST_F(ExtentReaderTest, ACopiersFailuresAreTheExtentsOrTheCalls)
{
	test::ScratchFile file(1 << 20);
	ExtentReader reader(*ctx_, small_options(16 * kib, 4));
	Destinations dst({1000, 40000, 3000});
	const std::vector<Extent> e{{file.fd(), 0, 1000, dst.address(0)},
				    {file.fd(), 100000, 40000, dst.address(1)},
				    {file.fd(), 500000, 3000, dst.address(2)}};
	{
		DeferredCopier copier;
		copier.fail_copies_from(2, -ENOSPC); // extent 1's first piece, and after
		const std::vector<ExtentResult> res = reader.read(e, &copier);
		EXPECT_EQ(res[0].err, 0);
		EXPECT_EQ(res[0].bytes, 1000u);
		EXPECT_FALSE(res[0].copy);
		for (std::size_t i : {1u, 2u}) {
			EXPECT_EQ(res[i].err, ENOSPC) << i;
			EXPECT_TRUE(res[i].copy) << i;
			EXPECT_EQ(res[i].bytes, 0u) << i;
		}
		EXPECT_TRUE(dst.holds(0, 0, 1000));
		EXPECT_TRUE(dst.holds(1, 0, 0));
		EXPECT_TRUE(dst.holds(2, 0, 0));
	}
	{
		DeferredCopier copier;
		copier.fail_waits(-EIO);
		const Error err = expect_error([&] { (void)reader.read(e, &copier); });
		EXPECT_EQ(err.err(), EIO);
		EXPECT_EQ(err.step(), Step::GpuCopy);
		EXPECT_NE(std::string(err.what()).find("deferred"), std::string::npos)
			<< err.what();
	}
	{
		DeferredCopier copier(1);
		const Error err = expect_error([&] { (void)reader.read(e, &copier); });
		EXPECT_EQ(err.err(), EINVAL) << "one fence for two groups of chunks";
		EXPECT_EQ(err.step(), Step::Validate);
	}
	dst.reset();
	DeferredCopier copier;
	const std::vector<ExtentResult> res = reader.read(e, &copier);
	for (std::size_t i = 0; i < e.size(); i++) {
		EXPECT_EQ(res[i].err, 0) << i;
		EXPECT_TRUE(dst.holds(i, e[i].file_offset, e[i].length));
	}
	EXPECT_TRUE(dst.guards_intact());
}

/*
 * O_DIRECT: unaligned extents (adjacent, scattered, up to the unaligned
 * end of the file) are read in whole aligned blocks and land exactly,
 * beside extents of a buffered fd of the same file.
 */
TEST_F(ExtentReaderTest, ODirectExtentsLandExactly)
{
	// On the guests' ext4 where set: their /tmp, a tmpfs, has no O_DIRECT
	// before Linux 6.6.
	const std::size_t size = (2 << 20) + 777;
	test::ScratchFile file(size, test::writeback_dir());
	const int fd = ::open(file.path().c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0 && errno == EINVAL)
		SVMBATCH_SKIP_ABSENT("odirect",
				     "this filesystem (" + file.path() + ") has no O_DIRECT");
	ASSERT_GE(fd, 0) << std::strerror(errno);
	ASSERT_EQ(detail::direct_fd(fd), 1);
	ExtentReader reader(*ctx_, small_options(64 * kib, 4));
	std::mt19937_64 rng(7);
	std::vector<Extent> e;
	for (int i = 0; i < 80; i++) {
		const std::size_t len = 1 + rng() % (150 * kib);
		const bool follow = !e.empty() && rng() % 2 == 0 &&
				    e.back().file_offset + e.back().length + len <= size;
		const std::uint64_t off = follow ? e.back().file_offset + e.back().length :
						   rng() % (size - len + 1);
		e.push_back({rng() % 4 == 0 ? file.fd() : fd, off, len, 0});
	}
	e.push_back({fd, size - 5000, 5000, 0}); // to the unaligned end
	e.push_back({fd, size - 1, 1, 0});
	e.push_back({fd, 4095, 2, 0}); // across a block boundary
	Destinations dst(lengths_of(e));
	dst.place(e);
	const std::vector<ExtentResult> res = reader.read(e);
	for (std::size_t i = 0; i < e.size(); i++) {
		ASSERT_EQ(res[i].err, 0) << "extent " << i << ": " << std::strerror(res[i].err);
		ASSERT_EQ(res[i].bytes, e[i].length) << "extent " << i;
		ASSERT_TRUE(dst.holds(i, e[i].file_offset, e[i].length));
	}
	EXPECT_TRUE(dst.guards_intact());
	EXPECT_GT(reader.last_read().bytes_read, 0u);
	::close(fd);
}

/* Nothing stays behind a reader: no fd, no pin. */
TEST_F(ExtentReaderTest, LeavesNoFdAndNoPinBehind)
{
	test::ScratchFile file(1 << 20);
	const std::size_t staging = 512 * kib;
	const std::size_t fds = test::open_fds();
	const std::uint64_t before = test::quiet_pinned_bytes();
	{
		ExtentReaderOptions o = small_options(64 * kib, 8, 1);
		ExtentReader reader(*ctx_, o);
		std::vector<std::uint8_t> mem(1 << 20);
		const std::vector<Extent> e{
			{file.fd(), 0, mem.size(), reinterpret_cast<std::uintptr_t>(mem.data())}};
		EXPECT_EQ(reader.read(e)[0].bytes, mem.size());
		EXPECT_EQ(mem[12345], pattern_byte(12345));
		EXPECT_GT(test::open_fds(), fds) << "the reader's ring";
		const std::uint64_t with = test::quiet_pinned_bytes();
		if (test::mode_under_test() == Mode::Userspace)
			EXPECT_EQ(with - before, staging) << "io_uring's pin of the staging";
		else
			EXPECT_GE(with, before + staging);
	}
	EXPECT_EQ(test::open_fds(), fds);
	EXPECT_EQ(test::pinned_bytes_at_most(before), before) << "a pin was left behind";
}

} // namespace
} // namespace svmbatch
