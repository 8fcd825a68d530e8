// SPDX-License-Identifier: MIT
// RdmaBackend against the FAKE libibverbs (fake_ibverbs/: no RDMA device
// here): the loader, memory-region planning at max_mr_size, the dma-buf
// and per-range paths and the fallback between them, rollback of every
// region, read-only access, rdma_devices(), and a registration cache that
// drops its regions when the stale eventfd fires.  Real transfers over
// soft-RoCE run in the guests (rdma_rxe_test.cpp).  Runs in both modes.
#include <gtest/gtest.h>

#include <infiniband/verbs.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <svmbatch/capi.h>
#include <svmbatch/all.hpp>

#include "capi/c_api_internal.hpp"
#include "fake_ibverbs/fake_ibverbs.h"
#include "rdma/mr_plan.hpp"
#include "expect_error.hpp"
#include "test_util.hpp"

namespace svmbatch {
namespace {

using test::expect_error;
using Pages = test::MappedPages;

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
constexpr int rw_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

RdmaOptions fake(RdmaPath path = RdmaPath::Auto, std::uint64_t cap = 0)
{
	return {test::fake_ibverbs_library, path, cap};
}

std::uintptr_t addr(const void *p)
{
	return reinterpret_cast<std::uintptr_t>(p);
}

/* --- planning ------------------------------------------------------------ */

detail::MrPlan plan(const std::vector<detail::MrItem> &items, std::uint64_t cap)
{
	return detail::plan_memory_regions(items, items.size(), cap);
}

TEST(RdmaPlan, BuffersOfOneGroupShareARegionUpToTheCap)
{
	// Three buffers of 100 bytes, 50 apart; a cap that takes two.
	detail::MrPlan p = plan({{0, 100, 0, 0}, {150, 100, 1, 0}, {300, 100, 2, 0}}, 250);

	ASSERT_EQ(p.chunks.size(), 2U);
	EXPECT_EQ(p.chunks[0].start, 0U);
	EXPECT_EQ(p.chunks[0].len, 250U);
	EXPECT_EQ(p.chunks[1].start, 300U);
	EXPECT_EQ(p.chunks[1].len, 100U);
	EXPECT_EQ(p.chunk_of, (std::vector<std::size_t>{0, 0, 1}));
}

TEST(RdmaPlan, GroupsNeverShareARegion)
{
	// Buffer 1 lies between buffers 0 and 2 but belongs to another group.
	detail::MrPlan p = plan({{0, 10, 0, 1}, {10, 10, 1, 0}, {20, 10, 2, 1}}, 1000);

	ASSERT_EQ(p.chunks.size(), 2U);
	EXPECT_EQ(p.chunk_of, (std::vector<std::size_t>{1, 0, 1}));
	EXPECT_EQ(p.chunks[0].group, 0U);
	EXPECT_EQ(p.chunks[1].start, 0U);
	EXPECT_EQ(p.chunks[1].len, 30U);
}

TEST(RdmaPlan, CallerOrderDoesNotMatterAndTheLowestIndexIsNamed)
{
	detail::MrPlan p = plan({{300, 100, 0, 0}, {0, 100, 1, 0}, {150, 100, 2, 0}}, 1000);

	ASSERT_EQ(p.chunks.size(), 1U);
	EXPECT_EQ(p.chunks[0].start, 0U);
	EXPECT_EQ(p.chunks[0].len, 400U);
	EXPECT_EQ(p.chunks[0].first_buffer, 0U);
}

TEST(RdmaPlan, ABufferLongerThanTheCapIsE2BIGNamingIt)
{
	Error e = expect_error([] { (void)plan({{0, 10, 0, 0}, {100, 1001, 1, 0}}, 1000); });
	EXPECT_EQ(e.err(), E2BIG);
	EXPECT_EQ(e.step(), Step::RdmaRegister);
	EXPECT_EQ(e.buffer_index(), 1U);
	EXPECT_NE(std::string(e.what()).find("max_mr_size"), std::string::npos) << e.what();
}

TEST(RdmaPlan, OverlappingBuffersAreNeverCutApart)
{
	// 600 + 600 bytes overlapping by 200: 1000 bytes together, the cap.
	detail::MrPlan p = plan({{0, 600, 0, 0}, {400, 600, 1, 0}}, 1000);
	ASSERT_EQ(p.chunks.size(), 1U);
	EXPECT_EQ(p.chunks[0].len, 1000U);

	Error e = expect_error([] { (void)plan({{0, 600, 0, 0}, {400, 601, 1, 0}}, 1000); });
	EXPECT_EQ(e.err(), E2BIG);
	EXPECT_EQ(e.buffer_index(), 1U);
}

TEST(RdmaPlan, TouchingBuffersMayBeCutBetween)
{
	detail::MrPlan p = plan({{0, 600, 0, 0}, {600, 600, 1, 0}}, 1000);

	ASSERT_EQ(p.chunks.size(), 2U);
	EXPECT_EQ(p.chunks[1].start, 600U);
}

/* --- loading and the device ----------------------------------------------- */

TEST(RdmaBackendLoad, NoLibibverbsIsENODEV)
{
	Error e = expect_error([] {
		RdmaBackend b(fake_ibv_pd(),
			      {"libsvmbatch-no-such-ibverbs.so.1", RdmaPath::Auto, 0});
	});
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_EQ(e.step(), Step::RdmaOpen);
	EXPECT_NE(std::string(e.what()).find("no libibverbs"), std::string::npos) << e.what();
}

TEST(RdmaBackendLoad, ALibraryThatIsNotLibibverbsIsENODEV)
{
	Error e = expect_error([] {
		RdmaBackend b(fake_ibv_pd(), {"libc.so.6", RdmaPath::Auto, 0});
	});
	EXPECT_EQ(e.err(), ENODEV);
	EXPECT_NE(std::string(e.what()).find("has no ibv_"), std::string::npos) << e.what();
}

class FakeVerbs : public ::testing::Test {
protected:
	void SetUp() override
	{
		fake_ibv_reset();
		ctx_.emplace(test::make_context());
	}
	void TearDown() override
	{
		EXPECT_EQ(fake_ibv_live_regions(), 0) << "a memory region was left registered";
	}
	bool kernel() const { return ctx_->mode() == Mode::Kernel; }

	std::optional<Context> ctx_;
};

TEST_F(FakeVerbs, NoProtectionDomainIsEINVAL)
{
	Error e = expect_error([] { RdmaBackend b(nullptr, fake()); });
	EXPECT_EQ(e.err(), EINVAL);
	EXPECT_EQ(e.step(), Step::RdmaOpen);
}

TEST_F(FakeVerbs, QueryDeviceFailureCarriesItsErrno)
{
	fake_ibv_fail_query(EIO);
	Error e = expect_error([] { RdmaBackend b(fake_ibv_pd(), fake()); });
	EXPECT_EQ(e.err(), EIO);
	EXPECT_EQ(e.step(), Step::RdmaOpen);
}

TEST_F(FakeVerbs, TheCapIsTheDevicesOrASmallerOne)
{
	fake_ibv_set_max_mr_size(1 << 20);
	EXPECT_EQ(RdmaBackend(fake_ibv_pd(), fake()).max_mr_bytes(), 1U << 20);
	EXPECT_EQ(RdmaBackend(fake_ibv_pd(), fake(RdmaPath::Auto, 4096)).max_mr_bytes(), 4096U);
	EXPECT_EQ(RdmaBackend(fake_ibv_pd(), fake(RdmaPath::Auto, 1ULL << 30)).max_mr_bytes(),
		  1U << 20);
	EXPECT_EQ(RdmaBackend(fake_ibv_pd(), fake()).device_name(), "fake0");
}

TEST_F(FakeVerbs, DevicesAreListedWithWhatTheyTake)
{
	fake_ibv_set_max_mr_size(1ULL << 32);
	std::vector<RdmaDeviceInfo> devs = rdma_devices(test::fake_ibverbs_library);
	ASSERT_EQ(devs.size(), 1U);
	EXPECT_EQ(devs[0].name, "fake0");
	EXPECT_EQ(devs[0].max_mr_size, 1ULL << 32);
	EXPECT_FALSE(devs[0].dmabuf_mr);
	EXPECT_EQ(devs[0].error, "");

	fake_ibv_set_dmabuf_supported(1);
	EXPECT_TRUE(rdma_devices(test::fake_ibverbs_library)[0].dmabuf_mr);
	fake_ibv_fail_query(EIO);
	EXPECT_NE(rdma_devices(test::fake_ibverbs_library)[0].error.find("ibv_query_device"),
		  std::string::npos);
}

/* --- the per-range path ---------------------------------------------------- */

/// Three mappings of 2, 1 and 3 pages with holes between them (so three
/// kernel ranges); buffer 1 read-only.
struct ThreeRanges {
	Pages all{9};
	char *a = all.p, *b = all.p + 3 * page, *c = all.p + 5 * page;
	std::vector<Buffer> buffers;

	ThreeRanges()
	{
		for (std::size_t hole : {2, 4, 8})
			::munmap(all.p + hole * page, page);
		buffers = {{a + 100, 1000},
			   {b, 64, Access::ReadOnly},
			   {c + 16, 2 * page},
			   {a + page, 8}};
	}
};

TEST_F(FakeVerbs, PerRangeRegistersEachRangesBuffersWithTheirOwnAddresses)
{
	ThreeRanges t;
	Registration reg = ctx_->register_buffers(t.buffers);
	RdmaBackend backend(fake_ibv_pd(), fake(RdmaPath::PerRange));
	RdmaMemoryRegions mrs = backend.register_memory(reg, rw_access);

	EXPECT_EQ(mrs.path(), RdmaPath::PerRange);
	EXPECT_EQ(mrs.fallback_reason(), "");
	ASSERT_EQ(mrs.size(), t.buffers.size());
	ASSERT_EQ(mrs.regions().size(), reg.ranges().size());
	EXPECT_EQ(fake_ibv_live_regions(), 3);
	for (std::size_t i = 0; i < t.buffers.size(); i++) {
		RdmaKey k = mrs.key(i);
		const RdmaRegion &r = mrs.regions()[mrs.region_of(i)];

		EXPECT_EQ(k.addr, addr(t.buffers[i].ptr)) << i;
		EXPECT_EQ(k.lkey, r.mr->lkey);
		EXPECT_EQ(k.rkey, r.mr->rkey);
		EXPECT_GE(k.addr, r.addr);
		EXPECT_LE(k.addr + t.buffers[i].len, r.addr + r.len) << i;
	}
	// Buffers 0 and 3 share mapping a: one region from the first byte of
	// one to the last of the other, not the whole pages.
	EXPECT_EQ(mrs.region_of(0), mrs.region_of(3));
	const RdmaRegion &ra = mrs.regions()[mrs.region_of(0)];
	EXPECT_EQ(ra.addr, addr(t.a) + 100);
	EXPECT_EQ(ra.len, page + 8 - 100);
	// The read-only buffer's region has no write access.
	EXPECT_EQ(mrs.regions()[mrs.region_of(1)].access, IBV_ACCESS_REMOTE_READ);
	EXPECT_EQ(ra.access, rw_access);
	for (std::size_t k = 0; k < fake_ibv_calls(); k++)
		EXPECT_EQ(fake_ibv_call_at(k).dmabuf, 0);
	EXPECT_THROW((void)mrs.key(4), std::out_of_range);

	RdmaMemoryRegions moved(std::move(mrs));
	EXPECT_FALSE(mrs); // NOLINT(bugprone-use-after-move): moved-from is empty
	EXPECT_EQ(fake_ibv_live_regions(), 3);
	moved.reset();
	moved.reset();
	EXPECT_EQ(fake_ibv_live_regions(), 0);
}

TEST_F(FakeVerbs, PerRangeCutsAtTheCapBetweenBuffers)
{
	Pages m(8);
	std::vector<Buffer> bufs;
	for (std::size_t i = 0; i < 8; i++)
		bufs.push_back({m.p + i * page, page});
	Registration reg = ctx_->register_buffers(bufs);
	ASSERT_EQ(reg.ranges().size(), 1U);
	RdmaBackend backend(fake_ibv_pd(), fake(RdmaPath::PerRange, 3 * page));
	RdmaMemoryRegions mrs = backend.register_memory(reg, rw_access);

	ASSERT_EQ(mrs.regions().size(), 3U); // 3 + 3 + 2 pages
	for (const RdmaRegion &r : mrs.regions())
		EXPECT_LE(r.len, 3 * page);
	EXPECT_EQ(mrs.region_of(2), 0U);
	EXPECT_EQ(mrs.region_of(3), 1U);
	EXPECT_EQ(mrs.regions()[2].first_buffer, 6U);
}

TEST_F(FakeVerbs, ABufferLongerThanTheCapIsRefusedBeforeAnyRegistration)
{
	Pages m(4);
	const Buffer bufs[] = {{m.p, page}, {m.p + page, 3 * page}};
	Registration reg = ctx_->register_buffers(bufs);
	RdmaBackend backend(fake_ibv_pd(), fake(RdmaPath::PerRange, 2 * page));

	Error e = expect_error([&] { (void)backend.register_memory(reg, rw_access); });
	EXPECT_EQ(e.err(), E2BIG);
	EXPECT_EQ(e.buffer_index(), 1U);
	EXPECT_EQ(fake_ibv_calls(), 0U);
}

TEST_F(FakeVerbs, EveryPerRangeFailureRollsBackWhatWasRegistered)
{
	ThreeRanges t;
	Registration reg = ctx_->register_buffers(t.buffers);
	RdmaBackend backend(fake_ibv_pd(), fake(RdmaPath::PerRange));
	const std::size_t regions = reg.ranges().size();

	for (std::size_t k = 0; k < regions; k++) {
		fake_ibv_reset();
		fake_ibv_fail_registration(static_cast<int>(k), ENOMEM);
		Error e = expect_error([&] { (void)backend.register_memory(reg, rw_access); });
		EXPECT_EQ(e.err(), ENOMEM) << k;
		EXPECT_EQ(e.step(), Step::RdmaRegister);
		EXPECT_EQ(e.buffer_index(), reg.first_buffer(k)) << k;
		EXPECT_NE(std::string(e.what()).find("ibv_reg_mr of memory region " +
						     std::to_string(k)),
			  std::string::npos)
			<< e.what();
		EXPECT_EQ(fake_ibv_calls(), k + 1);
		EXPECT_EQ(fake_ibv_live_regions(), 0) << "after a failure at region " << k;
	}
	// The registration itself is untouched: it registers again.
	fake_ibv_reset();
	EXPECT_EQ(backend.register_memory(reg, rw_access).regions().size(), regions);
}

/* --- the dma-buf path and the fallback ------------------------------------- */

TEST_F(FakeVerbs, AutoFallsBackToPerRangeAndSaysWhy)
{
	ThreeRanges t;
	Registration reg = ctx_->register_buffers(t.buffers);
	RdmaBackend backend(fake_ibv_pd(), fake());
	RdmaMemoryRegions mrs = backend.register_memory(reg, rw_access);

	EXPECT_EQ(mrs.path(), RdmaPath::PerRange);
	// Userspace mode has no dma-buf; kernel mode has a read-only buffer
	// among writable ones here.
	EXPECT_NE(mrs.fallback_reason().find(kernel() ? "read-only" : "userspace"),
		  std::string::npos)
		<< mrs.fallback_reason();
}

TEST_F(FakeVerbs, ADeviceWithoutDmabufRegionsFallsBackOnEOPNOTSUPP)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	Pages a(2), b(2);
	const Buffer bufs[] = {{a.p, 100}, {b.p + 8, 200}};
	Registration reg = ctx_->register_buffers(bufs);
	RdmaBackend backend(fake_ibv_pd(), fake());
	RdmaMemoryRegions mrs = backend.register_memory(reg, rw_access);

	EXPECT_EQ(mrs.path(), RdmaPath::PerRange);
	EXPECT_NE(mrs.fallback_reason().find("EOPNOTSUPP"), std::string::npos)
		<< mrs.fallback_reason();
	EXPECT_EQ(mrs.key(1).addr, addr(b.p) + 8);

	Error e = expect_error([&] {
		RdmaBackend forced(fake_ibv_pd(), fake(RdmaPath::DmaBuf));
		(void)forced.register_memory(reg, rw_access);
	});
	EXPECT_EQ(e.err(), EOPNOTSUPP);
	EXPECT_EQ(e.step(), Step::RdmaRegister);
}

TEST_F(FakeVerbs, DmabufPathInUserspaceModeIsEOPNOTSUPP)
{
	if (kernel())
		GTEST_SKIP() << "userspace mode only";
	Pages a(1);
	Buffer b{a.p, 64};
	Registration reg = ctx_->register_buffers({&b, 1});
	RdmaBackend backend(fake_ibv_pd(), fake(RdmaPath::DmaBuf));

	Error e = expect_error([&] { (void)backend.register_memory(reg, rw_access); });
	EXPECT_EQ(e.err(), EOPNOTSUPP);
	EXPECT_EQ(fake_ibv_calls(), 0U);
}

TEST_F(FakeVerbs, DmabufRegionsAreCutAtTheCapAndKeyedByDmabufOffset)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	fake_ibv_set_dmabuf_supported(1);
	Pages a(2), b(3), c(1);
	const Buffer bufs[] = {{c.p + 10, 20}, {a.p, 2 * page}, {b.p + 1, 2 * page}};
	Registration reg = ctx_->register_buffers(bufs);
	RdmaBackend backend(fake_ibv_pd(), fake(RdmaPath::Auto, 3 * page));
	RdmaMemoryRegions mrs = backend.register_memory(reg, rw_access);

	ASSERT_EQ(mrs.path(), RdmaPath::DmaBuf) << mrs.fallback_reason();
	EXPECT_EQ(mrs.fallback_reason(), "");
	for (std::size_t i = 0; i < 3; i++) {
		const RdmaRegion &r = mrs.regions()[mrs.region_of(i)];
		EXPECT_EQ(mrs.key(i).addr, reg.dmabuf_offset(i)) << i;
		EXPECT_GE(mrs.key(i).addr, r.addr);
		EXPECT_LE(mrs.key(i).addr + bufs[i].len, r.addr + r.len);
		EXPECT_LE(r.len, 3 * page);
	}
	ASSERT_EQ(fake_ibv_calls(), mrs.regions().size());
	for (std::size_t k = 0; k < fake_ibv_calls(); k++) {
		fake_ibv_call call = fake_ibv_call_at(k);
		EXPECT_EQ(call.dmabuf, 1);
		EXPECT_EQ(call.iova, call.addr) << "the iova is the dma-buf offset";
		EXPECT_GE(call.fd, 0);
		EXPECT_EQ(call.access, rw_access);
	}
	// The dma-buf fd was the backend's to close once the regions held it.
	EXPECT_EQ(::fcntl(fake_ibv_call_at(0).fd, F_GETFD), -1);
}

TEST_F(FakeVerbs, EveryDmabufFailureRollsBackWithoutFallingBack)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	Pages a(2), b(2), c(2);
	const Buffer bufs[] = {{a.p, 2 * page}, {b.p, 2 * page}, {c.p, 2 * page}};
	Registration reg = ctx_->register_buffers(bufs);
	RdmaBackend backend(fake_ibv_pd(), fake(RdmaPath::Auto, 2 * page));

	for (int k = 0; k < 3; k++) {
		fake_ibv_reset();
		fake_ibv_set_dmabuf_supported(1);
		fake_ibv_fail_registration(k, EFAULT);
		Error e = expect_error([&] { (void)backend.register_memory(reg, rw_access); });
		EXPECT_EQ(e.err(), EFAULT);
		EXPECT_NE(std::string(e.what()).find("ibv_reg_dmabuf_mr"), std::string::npos);
		EXPECT_EQ(fake_ibv_calls(), static_cast<std::size_t>(k) + 1) << "no fallback";
		EXPECT_EQ(fake_ibv_live_regions(), 0) << k;
	}
}

TEST_F(FakeVerbs, AllReadOnlyBuffersGetAReadOnlyDmabufAndNoWriteAccess)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	fake_ibv_set_dmabuf_supported(1);
	Pages a(1, PROT_READ), b(1, PROT_READ);
	const Buffer bufs[] = {{a.p, 64, Access::ReadOnly}, {b.p, 64, Access::ReadOnly}};
	Registration reg = ctx_->register_buffers(bufs);
	RdmaBackend backend(fake_ibv_pd(), fake());
	RdmaMemoryRegions mrs = backend.register_memory(reg, rw_access);

	ASSERT_EQ(mrs.path(), RdmaPath::DmaBuf);
	EXPECT_EQ(fake_ibv_call_at(0).access, IBV_ACCESS_REMOTE_READ);
}

/* --- the C API ------------------------------------------------------------- */

TEST_F(FakeVerbs, TheCApiRegistersKeysAndRollsBack)
{
	ThreeRanges t;
	svmbatch_ctx *ctx = nullptr;
	ASSERT_EQ(svmbatch_ctx_open(kernel() ? SVMBATCH_MODE_KERNEL : SVMBATCH_MODE_USERSPACE,
				    nullptr, &ctx),
		  0);
	std::vector<svmbatch_buffer> cb;
	for (const Buffer &b : t.buffers)
		cb.push_back({b.ptr, b.len,
			      b.access == Access::ReadOnly ? SVMBATCH_ACCESS_READ_ONLY :
							     SVMBATCH_ACCESS_READ_WRITE});
	svmbatch_reg *reg = nullptr;
	ASSERT_EQ(svmbatch_reg_create(ctx, cb.data(), cb.size(), &reg, nullptr), 0);
	svmbatch_rdma_options opt = {SVMBATCH_RDMA_AUTO, 0, test::fake_ibverbs_library};
	svmbatch_rdma *rdma = nullptr;
	size_t bad = 0;

	ASSERT_EQ(svmbatch_rdma_create(reg, fake_ibv_pd(), rw_access, &opt, &rdma, &bad), 0)
		<< svmbatch_last_error();
	EXPECT_EQ(bad, SVMBATCH_LIB_NO_INDEX);
	svmbatch_rdma_info info{};
	ASSERT_EQ(svmbatch_rdma_get_info(rdma, &info), 0);
	EXPECT_EQ(info.path, SVMBATCH_RDMA_PER_RANGE);
	EXPECT_EQ(info.nr_buffers, t.buffers.size());
	EXPECT_EQ(info.nr_regions, 3U);
	EXPECT_STRNE(info.fallback_reason, "");
	svmbatch_rdma_key key{};
	ASSERT_EQ(svmbatch_rdma_get_key(rdma, 2, &key), 0);
	EXPECT_EQ(key.addr, addr(t.buffers[2].ptr));
	EXPECT_NE(key.rkey, 0U);
	EXPECT_EQ(svmbatch_rdma_get_key(rdma, 4, &key), -ERANGE);
	svmbatch_rdma_destroy(rdma);
	EXPECT_EQ(fake_ibv_live_regions(), 0);

	// Region 1 of 3 fails: -errno, its first buffer, nothing left.
	fake_ibv_reset();
	fake_ibv_fail_registration(1, ENOMEM);
	rdma = nullptr;
	EXPECT_EQ(svmbatch_rdma_create(reg, fake_ibv_pd(), rw_access, &opt, &rdma, &bad), -ENOMEM);
	EXPECT_EQ(rdma, nullptr);
	svmbatch::Registration &cxx = reg->reg;
	EXPECT_EQ(bad, cxx.first_buffer(1));
	EXPECT_NE(std::string(svmbatch_last_error()).find("rdma-register"), std::string::npos);
	EXPECT_EQ(fake_ibv_live_regions(), 0);

	opt.path = static_cast<svmbatch_rdma_path>(7);
	EXPECT_EQ(svmbatch_rdma_create(reg, fake_ibv_pd(), rw_access, &opt, &rdma, nullptr),
		  -EINVAL);
	EXPECT_EQ(svmbatch_rdma_create(reg, nullptr, rw_access, nullptr, &rdma, nullptr), -EINVAL);
	svmbatch_reg_destroy(reg);
	svmbatch_ctx_close(ctx);
}

/* --- a registration cache invalidated by the stale eventfd ------------------ */

/// What an RDMA engine's registration cache does with svmbatch: per entry
/// a registration with notify_stale and its memory regions; the entries'
/// stale eventfds in one epoll set; poll() drops every entry that went
/// STALE, and lookup() registers again on a miss.
class RegistrationCache {
public:
	RegistrationCache(Context &ctx, RdmaBackend &backend) : ctx_(ctx), backend_(backend) {}
	RegistrationCache(const RegistrationCache &) = delete;
	RegistrationCache &operator=(const RegistrationCache &) = delete;
	RegistrationCache(RegistrationCache &&) = delete;
	RegistrationCache &operator=(RegistrationCache &&) = delete;
	~RegistrationCache() { ::close(epfd_); }

	const RdmaMemoryRegions &lookup(void *ptr, std::size_t len)
	{
		auto it = entries_.find(ptr);
		if (it != entries_.end())
			return it->second.mrs;
		misses++;
		Buffer b{ptr, len};
		Registration reg =
			ctx_.register_buffers({&b, 1}, RegisterOptions{.notify_stale = true});
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.ptr = ptr;
		if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, reg.stale_fd(), &ev))
			throw std::runtime_error("epoll_ctl");
		RdmaMemoryRegions mrs = backend_.register_memory(reg, rw_access);
		return entries_.emplace(ptr, Entry{std::move(reg), std::move(mrs)})
			.first->second.mrs;
	}
	/// Drop the entries that went STALE; how many.
	int poll(int timeout_ms)
	{
		epoll_event ev[16];
		int n = ::epoll_wait(epfd_, ev, 16, timeout_ms);
		for (int i = 0; i < n; i++)
			entries_.erase(ev[i].data.ptr); // closing the eventfd leaves the set
		return n < 0 ? 0 : n;
	}
	std::size_t size() const { return entries_.size(); }
	bool contains(void *ptr) const { return entries_.count(ptr) != 0; }
	int misses = 0;

private:
	struct Entry {
		Registration reg;
		RdmaMemoryRegions mrs;
	};
	Context &ctx_;
	RdmaBackend &backend_;
	int epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
	std::map<void *, Entry> entries_;
};

TEST_F(FakeVerbs, ACacheDropsAStaleEntryWithinOnePollAndRegistersTheNewPages)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	const std::size_t len = 4 * page;
	void *p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(p, MAP_FAILED);
	Pages other(2);
	RdmaBackend backend(fake_ibv_pd(), fake());
	RegistrationCache cache(*ctx_, backend);

	(void)cache.lookup(other.p, other.len);
	(void)cache.lookup(p, len);
	(void)cache.lookup(p, len);
	EXPECT_EQ(cache.misses, 2);
	EXPECT_EQ(fake_ibv_live_regions(), 2);
	EXPECT_EQ(cache.poll(0), 0);

	// The application frees the buffer and maps new memory there.
	ASSERT_EQ(::munmap(p, len), 0);
	ASSERT_EQ(::mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			 -1, 0),
		  p);
	EXPECT_GE(cache.poll(5000), 1);
	EXPECT_FALSE(cache.contains(p)) << "the stale entry is dropped within one poll";
	// The module is conservative: an event it cannot tell from a change
	// of the pages marks an entry stale too, and the
	// cache registers that one again as well.  Seen once for the other
	// entry in the debug guest.
	EXPECT_EQ(fake_ibv_live_regions(), static_cast<int>(cache.size()))
		<< "a dropped entry's memory regions are gone";

	// A lookup misses and registers the memory now there.
	(void)cache.lookup(p, len);
	EXPECT_GE(cache.misses, 3);
	EXPECT_TRUE(cache.contains(p));
	EXPECT_EQ(fake_ibv_live_regions(), static_cast<int>(cache.size()));
	ASSERT_EQ(::munmap(p, len), 0);
	EXPECT_GE(cache.poll(5000), 1);
	EXPECT_FALSE(cache.contains(p));
}

} // namespace
} // namespace svmbatch
