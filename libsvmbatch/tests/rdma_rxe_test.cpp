// SPDX-License-Identifier: MIT
// RdmaBackend against a real RDMA device: soft-RoCE (rdma_rxe) bound to a
// dummy netdev in the guests, where the guest runner ships the modules,
// iproute2's ip and rdma, and rxe's libibverbs provider.  Two processes,
// each with its own Context and its own scattered registered buffers,
// connect RC queue pairs over the one rxe device (rxe loops back packets
// for its own addresses) and move bytes with RDMA WRITE and READ.  Also:
// rxe takes no dma-buf memory regions, so Auto falls back with EOPNOTSUPP;
// a region that fails mid-way rolls back (VmPin says so); a stale
// registration's replacement carries the new pages.  Skips only where this
// machine lacks what rxe needs (the kernel's rdma_rxe, rxe's provider,
// iproute2, CAP_NET_ADMIN: the skip names the probe), and fails there too
// where the guest runner built the machine to have it (SVMBATCH_EXPECT has
// rxe); any setup step that fails is a failure with its output.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <glob.h>
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "expect_error.hpp"
#include "test_util.hpp"

extern char **environ; // NOLINT(readability-redundant-declaration): for posix_spawn

namespace svmbatch {
namespace {

using test::expect_error;

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
constexpr int rw_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
// The guest runner ships iproute2's tools here (busybox has its own ip).
constexpr const char *tool_dir = "/usr/libexec/svmbatch";
constexpr const char *netdev = "svmb0";
constexpr const char *rxe_name = "svmb_rxe0";
constexpr const char *ip_addr = "10.199.0.1";

/// A tool's path: the guest runner's copy in tool_dir, else iproute2's or
/// kmod's own place on a host; "" when none is there.
std::string tool_path(const std::string &name)
{
	for (const char *dir : {tool_dir, "/usr/sbin", "/usr/bin", "/sbin"}) {
		std::string p = std::string(dir) + "/" + name;
		if (::access(p.c_str(), X_OK) == 0)
			return p;
	}
	return "";
}

/// Run argv (argv[0] by tool_path); "" when it exited 0, else the command,
/// how it ended and what it printed.
std::string run_tool(std::vector<std::string> argv)
{
	std::string cmd;
	for (const auto &w : argv)
		cmd += (cmd.empty() ? "" : " ") + w;
	argv[0] = tool_path(argv[0]);
	if (argv[0].empty())
		return cmd + ": not found in " + tool_dir + ", /usr/sbin, /usr/bin or /sbin";
	std::vector<char *> args;
	args.reserve(argv.size() + 1);
	for (std::string &a : argv)
		args.push_back(a.data());
	args.push_back(nullptr);

	int out[2];
	if (::pipe2(out, O_CLOEXEC))
		return cmd + ": pipe: " + std::strerror(errno);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_adddup2(&fa, out[1], 2);
	pid_t pid = -1;
	int err = ::posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
	posix_spawn_file_actions_destroy(&fa);
	::close(out[1]);
	std::string text;
	char chunk[512];
	for (ssize_t n; err == 0 && (n = ::read(out[0], chunk, sizeof(chunk))) > 0;)
		text.append(chunk, static_cast<std::size_t>(n));
	::close(out[0]);
	if (err)
		return cmd + ": cannot run " + args[0] + ": " + std::strerror(err);
	int status = 0;
	if (::waitpid(pid, &status, 0) != pid)
		return cmd + ": waitpid: " + std::strerror(errno);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return "";
	std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) :
					      "signal " + std::to_string(WTERMSIG(status));
	while (!text.empty() && text.back() == '\n')
		text.pop_back();
	return cmd + ": " + how + (text.empty() ? ", no output" : ": " + text);
}

/// Whether file has a line that line_matches.
template <typename Match> bool file_has_line(const std::string &file, Match line_matches)
{
	std::ifstream in(file);
	std::string line;
	while (std::getline(in, line))
		if (line_matches(line))
			return true;
	return false;
}

/// Where this kernel has rdma_rxe: "loaded" (or built in, with its
/// /sys/module entry), "built in" (modules.builtin), "module" (modules.dep:
/// can be loaded), or "" (nowhere: the kernel lacks it).
std::string rxe_in_kernel(std::string *probed)
{
	::utsname u{};
	::uname(&u);
	const std::string dir = std::string("/lib/modules/") + u.release;
	*probed = "/sys/module/rdma_rxe, " + dir + "/modules.builtin, " + dir + "/modules.dep";
	if (::access("/sys/module/rdma_rxe", F_OK) == 0)
		return "loaded";
	auto is_rxe = [](const std::string &path) {
		const std::size_t slash = path.rfind('/');
		const std::string base = path.substr(slash == std::string::npos ? 0 : slash + 1);
		return base.starts_with("rdma_rxe.ko");
	};
	if (file_has_line(dir + "/modules.builtin", is_rxe))
		return "built in";
	if (file_has_line(dir + "/modules.dep",
			  [&](const std::string &l) { return is_rxe(l.substr(0, l.find(':'))); }))
		return "module";
	return "";
}

/// rxe's libibverbs provider: its driver file and its library.  *probed
/// says what was looked for.
bool rxe_provider_installed(std::string *probed)
{
	const char *driver = "/etc/libibverbs.d/rxe.driver";
	const char *libs = "/usr/lib{,64,/*}/libibverbs/librxe-rdmav*.so";
	*probed = std::string(driver) + " or " + libs;
	::glob_t g{};
	const bool lib = ::glob(libs, GLOB_BRACE, nullptr, &g) == 0;
	::globfree(&g);
	return ::access(driver, F_OK) == 0 && lib;
}

/// The rxe device, or why there is none: absent (this machine lacks
/// something rxe needs, as the probe in why found) or failed (a setup step
/// failed: the step and its output).
struct RxeDevice {
	std::string name;
	bool absent = false;
	std::string why;
};

RxeDevice make_rxe_device();

/// The rxe device, made once per process: a dummy netdev with an IPv4
/// address and an rxe link on it.
const RxeDevice &rxe_device()
{
	static const RxeDevice device = make_rxe_device();
	return device;
}

RxeDevice make_rxe_device()
{
	std::unique_ptr<ibv_device *, decltype(&ibv_free_device_list)> list(nullptr,
									    ibv_free_device_list);
	int n = 0;
	auto find = [&]() -> bool {
		list.reset(ibv_get_device_list(&n));
		for (int i = 0; list && i < n; i++)
			if (std::string(ibv_get_device_name(list.get()[i])) == rxe_name)
				return true;
		return false;
	};
	if (find())
		return {rxe_name, false, ""};

	/* What this machine lacks: each probe names what it looked at. */
	std::string probed;
	const std::string kernel = rxe_in_kernel(&probed);
	if (kernel.empty())
		return {"", true, "this kernel has no rdma_rxe (not in " + probed + ")"};
	if (!rxe_provider_installed(&probed))
		return {"", true, "libibverbs has no rxe provider (no " + probed + ")"};
	for (const char *tool : {"ip", "rdma"})
		if (tool_path(tool).empty())
			return {"", true,
				std::string("no iproute2 ") + tool + " (" + run_tool({tool}) + ")"};
	if (!test::has_capability(CAP_NET_ADMIN))
		return {"", true, "no CAP_NET_ADMIN to add the dummy netdev and the rxe link"};

	/* Everything is here: from now on, a step that fails is a failure. */
	std::vector<std::vector<std::string>> steps;
	if (kernel == "module")
		steps.push_back({"modprobe", "rdma_rxe"});
	steps.push_back({"ip", "link", "set", "lo", "up"});
	steps.push_back({"ip", "link", "add", netdev, "type", "dummy"});
	steps.push_back({"ip", "addr", "add", std::string(ip_addr) + "/24", "dev", netdev});
	steps.push_back({"ip", "link", "set", netdev, "up"});
	steps.push_back({"rdma", "link", "add", rxe_name, "type", "rxe", "netdev", netdev});
	for (const auto &s : steps)
		if (std::string failed = run_tool(s); !failed.empty())
			return {"", false, "soft-RoCE setup failed: " + failed};
	if (!find())
		return {"", false,
			"rdma link add succeeded but libibverbs lists no " + std::string(rxe_name) +
				" (" + std::to_string(n) +
				" devices; rxe's provider is installed)"};
	return {rxe_name, false, ""};
}

/// The GID index of ip_addr (IPv4-mapped, RoCE v2) on port 1.
int ipv4_gid_index(ibv_context *ctx, ibv_gid *gid)
{
	in_addr want{};
	ibv_port_attr port{};

	::inet_pton(AF_INET, ip_addr, &want);
	if (ibv_query_port(ctx, 1, &port))
		return -1;
	for (int i = 0; i < port.gid_tbl_len; i++) {
		if (ibv_query_gid(ctx, 1, i, gid))
			continue;
		static const std::uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (!std::memcmp(gid->raw, prefix, 12) && !std::memcmp(gid->raw + 12, &want, 4))
			return i;
	}
	return -1;
}

/// What one side tells the other.
struct Wire {
	std::uint32_t qpn = 0;
	std::uint32_t psn = 0;
	ibv_gid gid{};
	std::uint32_t nbuffers = 0;
	std::array<RdmaKey, 32> keys{};
	std::array<std::uint64_t, 32> lens{};
};

void send_all(int fd, const void *p, std::size_t n)
{
	if (::send(fd, p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n))
		throw std::runtime_error("send: " + std::string(std::strerror(errno)));
}

void recv_all(int fd, void *p, std::size_t n)
{
	if (::recv(fd, p, n, MSG_WAITALL) != static_cast<ssize_t>(n))
		throw std::runtime_error("recv: peer gone");
}

/// One RC queue pair on the rxe device, with its CQ and PD.
class Endpoint {
public:
	explicit Endpoint(const std::string &device)
	{
		int n = 0;
		std::unique_ptr<ibv_device *, decltype(&ibv_free_device_list)>
			list(ibv_get_device_list(&n), ibv_free_device_list);
		for (int i = 0; list && i < n; i++)
			if (device == ibv_get_device_name(list.get()[i]))
				ctx_ = ibv_open_device(list.get()[i]);
		check(ctx_ != nullptr, "ibv_open_device");
		pd_ = ibv_alloc_pd(ctx_);
		check(pd_ != nullptr, "ibv_alloc_pd");
		cq_ = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0);
		check(cq_ != nullptr, "ibv_create_cq");
		ibv_qp_init_attr qa{};
		qa.send_cq = cq_;
		qa.recv_cq = cq_;
		qa.qp_type = IBV_QPT_RC;
		qa.cap.max_send_wr = 64;
		qa.cap.max_recv_wr = 1;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		qp_ = ibv_create_qp(pd_, &qa);
		check(qp_ != nullptr, "ibv_create_qp");
		gid_index_ = ipv4_gid_index(ctx_, &gid_);
		check(gid_index_ >= 0, "no IPv4 GID on the rxe port");
	}
	~Endpoint()
	{
		if (qp_)
			ibv_destroy_qp(qp_);
		if (cq_)
			ibv_destroy_cq(cq_);
		if (pd_)
			ibv_dealloc_pd(pd_);
		if (ctx_)
			ibv_close_device(ctx_);
	}
	Endpoint(const Endpoint &) = delete;
	Endpoint &operator=(const Endpoint &) = delete;
	Endpoint(Endpoint &&) = delete;
	Endpoint &operator=(Endpoint &&) = delete;

	ibv_pd *pd() const { return pd_; }
	void describe(Wire &w) const
	{
		w.qpn = qp_->qp_num;
		w.psn = 0x1234;
		w.gid = gid_;
	}
	/// INIT, RTR towards peer, RTS.
	void connect(const Wire &peer)
	{
		ibv_qp_attr a{};
		a.qp_state = IBV_QPS_INIT;
		a.port_num = 1;
		a.qp_access_flags = rw_access;
		check(!ibv_modify_qp(qp_, &a,
				     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS),
		      "INIT");
		a = {};
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = peer.qpn;
		a.rq_psn = peer.psn;
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 12;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = peer.gid;
		a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(gid_index_);
		a.ah_attr.grh.hop_limit = 1;
		a.ah_attr.port_num = 1;
		check(!ibv_modify_qp(qp_, &a,
				     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER),
		      "RTR");
		a = {};
		a.qp_state = IBV_QPS_RTS;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.sq_psn = 0x1234;
		a.max_rd_atomic = 4;
		check(!ibv_modify_qp(qp_, &a,
				     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					     IBV_QP_MAX_QP_RD_ATOMIC),
		      "RTS");
	}
	/// One RDMA WRITE or READ between a local buffer and a remote one,
	/// waited for.
	void transfer(ibv_wr_opcode op, void *local, std::uint32_t len, std::uint32_t lkey,
		      const RdmaKey &remote)
	{
		ibv_sge sge{reinterpret_cast<std::uintptr_t>(local), len, lkey};
		ibv_send_wr wr{};
		ibv_send_wr *bad = nullptr;
		wr.wr_id = 1;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = op;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.rdma.remote_addr = remote.addr;
		wr.wr.rdma.rkey = remote.rkey;
		check(!ibv_post_send(qp_, &wr, &bad), "ibv_post_send");
		ibv_wc wc{};
		int n = 0;
		for (int spin = 0; spin < 20000000 && !(n = ibv_poll_cq(cq_, 1, &wc)); spin++)
			if (spin > 1000)
				::usleep(100);
		check(n == 1, "no completion");
		check(wc.status == IBV_WC_SUCCESS,
		      std::string("completion: ") + ibv_wc_status_str(wc.status));
	}

private:
	static void check(bool ok, const std::string &what)
	{
		if (!ok)
			throw std::runtime_error(what + ": " + std::strerror(errno));
	}
	ibv_context *ctx_ = nullptr;
	ibv_pd *pd_ = nullptr;
	ibv_cq *cq_ = nullptr;
	ibv_qp *qp_ = nullptr;
	ibv_gid gid_{};
	int gid_index_ = -1;
};

/// Scattered buffers of the given sizes: each in a mapping of its own,
/// every third one at an odd offset, filled with seed's pattern.
class Scattered {
public:
	Scattered(const std::vector<std::size_t> &sizes, std::uint8_t seed)
	{
		for (std::size_t i = 0; i < sizes.size(); i++) {
			const std::size_t off = i % 3 == 0 ? 37 : 0;
			const std::size_t len = (off + sizes[i] + page - 1) / page * page;
			void *m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (m == MAP_FAILED)
				throw std::runtime_error("mmap");
			maps_.emplace_back(static_cast<char *>(m), len);
			buffers.push_back({static_cast<char *>(m) + off, sizes[i]});
			fill(i, seed);
		}
	}
	~Scattered()
	{
		for (auto &[p, len] : maps_)
			::munmap(p, len);
	}
	Scattered(const Scattered &) = delete;
	Scattered &operator=(const Scattered &) = delete;
	Scattered(Scattered &&) = delete;
	Scattered &operator=(Scattered &&) = delete;

	static std::uint8_t byte(std::size_t buffer, std::size_t at, std::uint8_t seed)
	{
		return static_cast<std::uint8_t>(std::size_t{seed} * 31 + buffer * 7 + at * 13 +
						 at / 251);
	}
	void fill(std::size_t i, std::uint8_t seed)
	{
		auto *p = static_cast<std::uint8_t *>(buffers[i].ptr);
		for (std::size_t at = 0; at < buffers[i].len; at++)
			p[at] = byte(i, at, seed);
	}
	/// The first byte of buffer i that is not seed's pattern, or -1.
	long mismatch(std::size_t i, std::uint8_t seed) const
	{
		const auto *p = static_cast<const std::uint8_t *>(buffers[i].ptr);
		for (std::size_t at = 0; at < buffers[i].len; at++)
			if (p[at] != byte(i, at, seed))
				return static_cast<long>(at);
		return -1;
	}

	std::vector<Buffer> buffers;

private:
	std::vector<std::pair<char *, std::size_t>> maps_;
};

// NOLINTNEXTLINE(cert-err58-cpp): a test's constant; no exception to catch at start
const std::vector<std::size_t> sizes = {1, 4096, 100, 65536 + 3, 7, 300000, 4095, 12288, 999};

class Rxe : public ::testing::Test {
protected:
	void SetUp() override
	{
		const RxeDevice &d = rxe_device();
		if (d.absent)
			SVMBATCH_SKIP_ABSENT("rxe", d.why);
		ASSERT_FALSE(d.name.empty()) << d.why;
		device_ = d.name;
	}
	std::string device_;
};

/// The peer process: registers its own buffers (seed 2) and answers with
/// their keys; after the other side's WRITEs and READs it reports how its
/// buffers look.  Exit status 0 when all went well.
int serve(const std::string &device, int sock, std::uint64_t max_mr_bytes)
{
	try {
		Scattered mine(sizes, 2);
		Context ctx = test::make_context();
		Registration reg = ctx.register_buffers(mine.buffers);
		Endpoint ep(device);
		RdmaBackend backend(ep.pd(), {"libibverbs.so.1", RdmaPath::Auto, max_mr_bytes});
		RdmaMemoryRegions mrs = backend.register_memory(reg, rw_access);
		Wire me, peer;

		ep.describe(me);
		me.nbuffers = static_cast<std::uint32_t>(sizes.size());
		for (std::size_t i = 0; i < sizes.size(); i++) {
			me.keys[i] = mrs.key(i);
			me.lens[i] = sizes[i];
		}
		recv_all(sock, &peer, sizeof(peer));
		send_all(sock, &me, sizeof(me));
		ep.connect(peer);
		char done = 0;
		recv_all(sock, &done, 1); // the peer wrote seed 1 into every buffer
		long bad = 0;
		for (std::size_t i = 0; i < sizes.size(); i++)
			if (mine.mismatch(i, 1) >= 0)
				bad++;
		send_all(sock, &bad, sizeof(bad));
		recv_all(sock, &done, 1); // the peer is done: tear down
		return bad ? 2 : 0;
	} catch (const std::exception &e) {
		std::fprintf(stderr, "serve: %s\n", e.what());
		return 1;
	}
}

/// Fork a peer that serves; wait for it on destruction.
class Peer {
public:
	Peer(const std::string &device, std::uint64_t max_mr_bytes = 0)
	{
		int sv[2];
		if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
			throw std::runtime_error("socketpair");
		pid_ = ::fork();
		if (pid_ == 0) {
			::close(sv[0]);
			::_exit(serve(device, sv[1], max_mr_bytes));
		}
		::close(sv[1]);
		sock = sv[0];
	}
	/// The peer's exit status.
	int wait()
	{
		int status = 0;
		if (sock >= 0)
			::close(sock);
		sock = -1;
		if (pid_ > 0 && ::waitpid(pid_, &status, 0) == pid_) {
			pid_ = -1;
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		}
		return -1;
	}
	~Peer() { (void)wait(); }
	Peer(const Peer &) = delete;
	Peer &operator=(const Peer &) = delete;
	Peer(Peer &&) = delete;
	Peer &operator=(Peer &&) = delete;

	int sock = -1;

private:
	pid_t pid_ = -1;
};

/// WRITE every buffer of ours into the peer's, READ every one of the
/// peer's back into a second set, byte for byte; both sides scattered
/// and registered through svmbatch; max_mr_bytes for both sides' backends.
void write_and_read(const std::string &device, std::uint64_t max_mr_bytes)
{
	const std::uint64_t pinned0 = test::quiet_pinned_bytes();
	const bool kernel = test::mode_under_test() == Mode::Kernel;
	std::map<std::string, std::uint64_t> stats0;
	if (kernel)
		stats0 = read_module_stats();
	{
		Peer peer(device, max_mr_bytes);
		Scattered src(sizes, 1), back(sizes, 0);
		std::vector<Buffer> all = src.buffers;
		all.insert(all.end(), back.buffers.begin(), back.buffers.end());
		Context ctx = test::make_context();
		Registration reg = ctx.register_buffers(all);
		Endpoint ep(device);
		RdmaBackend backend(ep.pd(), {"libibverbs.so.1", RdmaPath::Auto, max_mr_bytes});
		RdmaMemoryRegions mrs = backend.register_memory(reg, rw_access);
		Wire me, remote;

		EXPECT_EQ(mrs.path(), RdmaPath::PerRange);
		if (kernel) {
			EXPECT_NE(mrs.fallback_reason().find("EOPNOTSUPP"), std::string::npos)
				<< "rxe takes no dma-buf memory regions: " << mrs.fallback_reason();
		}
		for (const RdmaRegion &r : mrs.regions())
			EXPECT_LE(r.len, backend.max_mr_bytes());
		ep.describe(me);
		send_all(peer.sock, &me, sizeof(me));
		recv_all(peer.sock, &remote, sizeof(remote));
		ASSERT_EQ(remote.nbuffers, sizes.size());
		ep.connect(remote);
		for (std::size_t i = 0; i < sizes.size(); i++)
			ep.transfer(IBV_WR_RDMA_WRITE, src.buffers[i].ptr,
				    static_cast<std::uint32_t>(sizes[i]), mrs.key(i).lkey,
				    remote.keys[i]);
		for (std::size_t i = 0; i < sizes.size(); i++)
			ep.transfer(IBV_WR_RDMA_READ, back.buffers[i].ptr,
				    static_cast<std::uint32_t>(sizes[i]),
				    mrs.key(sizes.size() + i).lkey, remote.keys[i]);
		// READ ran after WRITE on one queue pair: the peer's buffers hold
		// seed 1 now, and so does what came back.
		for (std::size_t i = 0; i < sizes.size(); i++)
			EXPECT_EQ(back.mismatch(i, 1), -1) << "READ of buffer " << i;
		char go = 1;
		long peer_bad = -1;
		send_all(peer.sock, &go, 1);
		recv_all(peer.sock, &peer_bad, sizeof(peer_bad));
		EXPECT_EQ(peer_bad, 0) << "buffers of the peer that the WRITEs did not fill";
		send_all(peer.sock, &go, 1);
		EXPECT_EQ(peer.wait(), 0);
	}
	// Every pin is gone: svmbatch's and the memory regions'.
	EXPECT_EQ(test::settled_pinned_bytes(pinned0), pinned0);
	if (kernel) {
		std::map<std::string, std::uint64_t> stats = read_module_stats();
		for (const char *gauge :
		     {"registrations", "pinned_pages", "meta_bytes", "contexts"})
			EXPECT_EQ(stats[gauge], stats0[gauge]) << gauge;
	}
}

TEST_F(Rxe, WriteAndReadBetweenScatteredRegisteredBuffersOfTwoProcesses)
{
	write_and_read(device_, 0);
}

TEST_F(Rxe, RegionsCutAtASmallCapCarryTheSameBytes)
{
	write_and_read(device_, std::uint64_t{74} * page); // the largest buffer's pages
}

TEST_F(Rxe, ForcedDmabufIsEOPNOTSUPPOnRxe)
{
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	Scattered s({page, 3 * page}, 0);
	Context ctx = test::make_context();
	Registration reg = ctx.register_buffers(s.buffers);
	Endpoint ep(device_);
	RdmaBackend backend(ep.pd(), {"libibverbs.so.1", RdmaPath::DmaBuf, 0});
	const std::uint64_t pinned = process_pinned_bytes();

	Error e = expect_error([&] { (void)backend.register_memory(reg, rw_access); });
	EXPECT_EQ(e.err(), EOPNOTSUPP);
	EXPECT_EQ(e.step(), Step::RdmaRegister);
	EXPECT_EQ(process_pinned_bytes(), pinned);
	for (const RdmaDeviceInfo &d : rdma_devices())
		if (d.name == device_) {
			EXPECT_FALSE(d.dmabuf_mr);
			EXPECT_GT(d.max_mr_size, 0U);
			EXPECT_EQ(d.error, "");
		}
}

TEST_F(Rxe, ARegionThatFailsRollsBackTheOthers)
{
	// Kernel mode keeps the pages of an unmapped buffer pinned, so the
	// registration stands while ibv_reg_mr of that range fails (EFAULT):
	// the regions before it must be gone again.  Nine pages with holes at
	// 2, 4 and 6: four ranges, the last one (pages 7-8) unmapped.
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	test::MappedPages m(9);
	ASSERT_NE(m.p, nullptr);
	for (std::size_t hole : {2, 4, 6})
		ASSERT_EQ(::munmap(m.p + hole * page, page), 0);
	const Buffer bufs[] = {{m.p + 7 * page, 2 * page},
			       {m.p, 2 * page},
			       {m.p + 3 * page, 8},
			       {m.p + 5 * page + 8, 100}};
	Context ctx = test::make_context();
	Registration reg = ctx.register_buffers(bufs);
	ASSERT_EQ(reg.ranges().size(), 4U);
	ASSERT_EQ(reg.location(0).range, 3U);
	Endpoint ep(device_);
	RdmaBackend backend(ep.pd(), {"libibverbs.so.1", RdmaPath::PerRange, 0});
	ASSERT_EQ(::munmap(m.p + 7 * page, 2 * page), 0);
	const std::uint64_t pinned = test::quiet_pinned_bytes();

	Error e = expect_error([&] { (void)backend.register_memory(reg, rw_access); });
	EXPECT_EQ(e.err(), EFAULT) << e.what();
	EXPECT_EQ(e.step(), Step::RdmaRegister);
	EXPECT_EQ(e.buffer_index(), 0U);
	EXPECT_NE(std::string(e.what()).find("memory region 3"), std::string::npos) << e.what();
	EXPECT_EQ(process_pinned_bytes(), pinned) << "a region before the failing one stayed";
}

TEST_F(Rxe, AStaleRegistrationsReplacementCarriesTheNewPages)
{
	// A READ through the old memory region returns the old pages (they
	// stay pinned); after the stale eventfd fires, registering again gives
	// a region over what the process now sees at that address.
	SVMBATCH_SKIP_UNLESS_KERNEL_MODE();
	const std::size_t len = 2 * page;
	auto *p = static_cast<char *>(
		::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	ASSERT_NE(p, MAP_FAILED);
	std::memset(p, 'o', len);
	Scattered sink({len}, 0);
	Context ctx = test::make_context();
	Endpoint ep(device_);
	RdmaBackend backend(ep.pd(), {"libibverbs.so.1", RdmaPath::Auto, 0});
	Registration sink_reg = ctx.register_buffers(sink.buffers);
	RdmaMemoryRegions sink_mrs = backend.register_memory(sink_reg, rw_access);
	Buffer b{p, len};
	Registration reg = ctx.register_buffers({&b, 1}, RegisterOptions{.notify_stale = true});
	RdmaMemoryRegions mrs = backend.register_memory(reg, rw_access);
	Wire me;

	// Loop the queue pair back to itself: READ from p into the sink.
	ep.describe(me);
	ep.connect(me);
	ASSERT_EQ(::mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			 -1, 0),
		  p);
	std::memset(p, 'n', len);
	pollfd pfd{reg.stale_fd(), POLLIN, 0};
	ASSERT_EQ(::poll(&pfd, 1, 5000), 1) << "the stale eventfd did not fire";
	ep.transfer(IBV_WR_RDMA_READ, sink.buffers[0].ptr, len, sink_mrs.key(0).lkey, mrs.key(0));
	EXPECT_EQ(static_cast<char *>(sink.buffers[0].ptr)[0], 'o') << "the old region, old pages";

	mrs.reset();
	reg = ctx.register_buffers({&b, 1}, RegisterOptions{.notify_stale = true});
	mrs = backend.register_memory(reg, rw_access);
	ep.transfer(IBV_WR_RDMA_READ, sink.buffers[0].ptr, len, sink_mrs.key(0).lkey, mrs.key(0));
	EXPECT_EQ(std::memcmp(sink.buffers[0].ptr, p, len), 0) << "the new region, new pages";
	EXPECT_FALSE(reg.stale());
	mrs.reset();
	reg.reset();
	::munmap(p, len);
}

} // namespace
} // namespace svmbatch
