// SPDX-License-Identifier: MIT
// UCX over a registration: one process registers scattered buffers with
// svmbatch, maps the registration's merged ranges with ucp_mem_map (one
// UCX memory handle and rkey per range, not per buffer) and hands a peer
// the packed rkeys and where each buffer lies; the peer ucp_put_nbx'es its
// own scattered buffers into them and ucp_get_nbx'es them back, and both
// sides check every byte.  UCX picks the transport: UCX_TLS and
// UCX_NET_DEVICES select one (tcp on the build host; rc_verbs over
// soft-RoCE in the guests).  Prints TAP; exits 1 on any failure.
//
//   ucx_put_get [--buffers N] [--server-ip IPV4] [--expect-transport NAME]
//
// Without --server-ip the peer connects to the target's worker address;
// with it, to a listener on that address (UCX's client-server mode, whose
// connection manager is rdmacm on an RDMA device).  --expect-transport
// checks that a lane of the endpoint uses that transport (e.g. rc_verbs).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <svmbatch/all.hpp>

namespace {

using svmbatch::Buffer;

int tap_n = 0, tap_failed = 0;

void tap(bool ok, const std::string &what)
{
	tap_n++;
	tap_failed += ok ? 0 : 1;
	std::printf("%s %d %s\n", ok ? "ok" : "not ok", tap_n, what.c_str());
	std::fflush(stdout);
}

void check(ucs_status_t s, const char *what)
{
	if (s != UCS_OK)
		throw std::runtime_error(std::string(what) + ": " + ucs_status_string(s));
}

/// Messages between the two processes, length-prefixed, over a socketpair.
void send_blob(int fd, const void *p, std::uint64_t n)
{
	if (::send(fd, &n, sizeof(n), MSG_NOSIGNAL) != sizeof(n) ||
	    (n && ::send(fd, p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)))
		throw std::runtime_error("send to the peer");
}

std::vector<char> recv_blob(int fd)
{
	std::uint64_t n = 0;
	if (::recv(fd, &n, sizeof(n), MSG_WAITALL) != sizeof(n))
		throw std::runtime_error("the peer is gone");
	std::vector<char> v(n);
	if (n && ::recv(fd, v.data(), n, MSG_WAITALL) != static_cast<ssize_t>(n))
		throw std::runtime_error("the peer is gone");
	return v;
}

/// recv_blob, progressing worker meanwhile: transports without remote
/// memory access in hardware (tcp, shared memory) serve a peer's puts and
/// gets from the target's progress.
std::vector<char> recv_blob_progressing(int fd, ucp_worker_h worker,
					const std::function<void()> &each = {})
{
	pollfd p{fd, POLLIN, 0};

	while (::poll(&p, 1, 0) == 0) {
		ucp_worker_progress(worker);
		if (each)
			each();
	}
	return recv_blob(fd);
}

/// A UCP context and worker with RMA, released on destruction.
class Ucp {
public:
	Ucp()
	{
		ucp_params_t params{};
		params.field_mask = UCP_PARAM_FIELD_FEATURES;
		params.features = UCP_FEATURE_RMA;
		check(ucp_init(&params, nullptr, &context_), "ucp_init");
		ucp_worker_params_t wp{};
		wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
		wp.thread_mode = UCS_THREAD_MODE_SINGLE;
		check(ucp_worker_create(context_, &wp, &worker_), "ucp_worker_create");
	}
	~Ucp()
	{
		if (worker_)
			ucp_worker_destroy(worker_);
		if (context_)
			ucp_cleanup(context_);
	}
	Ucp(const Ucp &) = delete;
	Ucp &operator=(const Ucp &) = delete;
	Ucp(Ucp &&) = delete;
	Ucp &operator=(Ucp &&) = delete;

	ucp_context_h context() const { return context_; }
	ucp_worker_h worker() const { return worker_; }
	/// Progress until request (a ucs_status_ptr_t) completes.
	ucs_status_t wait(void *request) const
	{
		if (request == nullptr)
			return UCS_OK;
		if (UCS_PTR_IS_ERR(request))
			return UCS_PTR_STATUS(request);
		ucs_status_t s;
		while ((s = ucp_request_check_status(request)) == UCS_INPROGRESS)
			ucp_worker_progress(worker_);
		ucp_request_free(request);
		return s;
	}

private:
	ucp_context_h context_ = nullptr;
	ucp_worker_h worker_ = nullptr;
};

/// Memory handles of ucp_mem_map, unmapped on destruction (before the
/// context is cleaned up: declare after the Ucp).
class MemMaps {
public:
	explicit MemMaps(ucp_context_h context) : context_(context) {}
	~MemMaps()
	{
		for (ucp_mem_h h : handles)
			(void)ucp_mem_unmap(context_, h);
	}
	MemMaps(const MemMaps &) = delete;
	MemMaps &operator=(const MemMaps &) = delete;
	MemMaps(MemMaps &&) = delete;
	MemMaps &operator=(MemMaps &&) = delete;

	void map(std::uintptr_t addr, std::size_t len)
	{
		ucp_mem_map_params_t mp{};
		mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
		// NOLINTNEXTLINE(performance-no-int-to-ptr): a range's address
		mp.address = reinterpret_cast<void *>(addr);
		mp.length = len;
		ucp_mem_h h = nullptr;
		check(ucp_mem_map(context_, &mp, &h), "ucp_mem_map");
		handles.push_back(h);
	}

	std::vector<ucp_mem_h> handles;

private:
	ucp_context_h context_;
};

/// n scattered buffers of varied sizes (a few bytes to 256 KiB), each in
/// an anonymous mapping of its own, at odd offsets.
class Scattered {
public:
	explicit Scattered(int n)
	{
		const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
		for (int i = 0; i < n; i++) {
			const std::size_t len = 1 + (static_cast<std::size_t>(i) * 7919 * 37) %
							    (std::size_t{256} * 1024);
			const std::size_t off = static_cast<std::size_t>(i % 5) * 13;
			const std::size_t map = (off + len + page - 1) / page * page;
			void *m = ::mmap(nullptr, map, PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (m == MAP_FAILED)
				throw std::runtime_error("mmap");
			maps_.emplace_back(m, map);
			buffers.push_back({static_cast<char *>(m) + off, len});
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

	static char byte(std::size_t buffer, std::size_t at, int seed)
	{
		return static_cast<char>(static_cast<std::size_t>(seed) * 131 + buffer * 17 +
					 at * 7 + at / 509);
	}
	void fill(int seed)
	{
		for (std::size_t i = 0; i < buffers.size(); i++)
			for (std::size_t at = 0; at < buffers[i].len; at++)
				static_cast<char *>(buffers[i].ptr)[at] = byte(i, at, seed);
	}
	/// How many buffers differ from seed's pattern.
	int mismatches(int seed) const
	{
		int bad = 0;
		for (std::size_t i = 0; i < buffers.size(); i++)
			for (std::size_t at = 0; at < buffers[i].len; at++)
				if (static_cast<const char *>(buffers[i].ptr)[at] !=
				    byte(i, at, seed)) {
					bad++;
					break;
				}
		return bad;
	}

	std::vector<Buffer> buffers;

private:
	std::vector<std::pair<void *, std::size_t>> maps_;
};

/// The target's side of client-server mode: a listener on ip (any port)
/// and the endpoint of the one connection it accepts.  Inert when ip is "".
class Listener {
public:
	Listener(const Ucp &ucp, const std::string &ip) : worker_(ucp.worker())
	{
		if (ip.empty())
			return;
		sockaddr_in sin{};
		sin.sin_family = AF_INET;
		if (::inet_pton(AF_INET, ip.c_str(), &sin.sin_addr) != 1)
			throw std::runtime_error("not an IPv4 address: " + ip);
		ucp_listener_params_t lp{};
		lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
				UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
		lp.sockaddr.addr = reinterpret_cast<const sockaddr *>(&sin);
		lp.sockaddr.addrlen = sizeof(sin);
		lp.conn_handler.cb = [](ucp_conn_request_h request, void *arg) {
			static_cast<Listener *>(arg)->request_ = request;
		};
		lp.conn_handler.arg = this;
		check(ucp_listener_create(worker_, &lp, &listener_), "ucp_listener_create");
	}
	~Listener()
	{
		close_ep();
		if (listener_)
			ucp_listener_destroy(listener_);
	}
	Listener(const Listener &) = delete;
	Listener &operator=(const Listener &) = delete;
	Listener(Listener &&) = delete;
	Listener &operator=(Listener &&) = delete;

	std::uint16_t port() const
	{
		ucp_listener_attr_t attr{};
		attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
		check(ucp_listener_query(listener_, &attr), "ucp_listener_query");
		return ntohs(reinterpret_cast<const sockaddr_in *>(&attr.sockaddr)->sin_port);
	}
	/// Make the endpoint of a connection request that arrived.
	void accept()
	{
		if (!request_)
			return;
		ucp_ep_params_t ep_params{};
		ep_params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
		ep_params.conn_request = std::exchange(request_, nullptr);
		check(ucp_ep_create(worker_, &ep_params, &ep_), "ucp_ep_create (server)");
	}
	void close_ep()
	{
		if (!ep_)
			return;
		ucp_request_param_t cp{};
		cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
		void *r = ucp_ep_close_nbx(std::exchange(ep_, nullptr), &cp);
		if (r && !UCS_PTR_IS_ERR(r)) {
			while (ucp_request_check_status(r) == UCS_INPROGRESS)
				ucp_worker_progress(worker_);
			ucp_request_free(r);
		}
	}

private:
	ucp_worker_h worker_;
	ucp_listener_h listener_ = nullptr;
	ucp_conn_request_h request_ = nullptr;
	ucp_ep_h ep_ = nullptr;
};

/// Where a target buffer lies: its address and the range whose rkey
/// covers it.
struct Place {
	std::uint64_t addr;
	std::uint64_t len;
	std::uint32_t range;
};

/// The target: registers, maps every merged range, publishes, waits.
int target(int sock, int n, const std::string &server_ip)
{
	Scattered mine(n);
	mine.fill(0);
	svmbatch::Context ctx;
	svmbatch::Registration reg = ctx.register_buffers(mine.buffers);
	Ucp ucp;
	MemMaps memh(ucp.context());
	for (const svmbatch::KernelRange &r : reg.ranges())
		memh.map(r.addr, r.len);
	Listener listener(ucp, server_ip);
	if (server_ip.empty()) {
		ucp_address_t *addr = nullptr;
		std::size_t addr_len = 0;
		check(ucp_worker_get_address(ucp.worker(), &addr, &addr_len),
		      "ucp_worker_get_address");
		send_blob(sock, addr, addr_len);
		ucp_worker_release_address(ucp.worker(), addr);
	} else {
		const std::uint16_t port = listener.port();
		send_blob(sock, &port, sizeof(port));
	}
	send_blob(sock, nullptr, 0); // then one rkey per range
	std::uint64_t nranges = memh.handles.size();
	send_blob(sock, &nranges, sizeof(nranges));
	for (ucp_mem_h h : memh.handles) {
		void *rkey = nullptr;
		std::size_t rkey_len = 0;
		check(ucp_rkey_pack(ucp.context(), h, &rkey, &rkey_len), "ucp_rkey_pack");
		send_blob(sock, rkey, rkey_len);
		ucp_rkey_buffer_release(rkey);
	}
	std::vector<Place> places;
	for (std::size_t i = 0; i < mine.buffers.size(); i++)
		places.push_back({reinterpret_cast<std::uintptr_t>(mine.buffers[i].ptr),
				  mine.buffers[i].len,
				  static_cast<std::uint32_t>(reg.location(i).range)});
	send_blob(sock, places.data(), places.size() * sizeof(Place));
	auto accept = [&] { listener.accept(); };
	(void)recv_blob_progressing(sock, ucp.worker(), accept); // the puts and gets are done
	const int bad = mine.mismatches(1);
	send_blob(sock, &bad, sizeof(bad));
	(void)recv_blob_progressing(sock, ucp.worker(), accept); // the peer let go of the rkeys
	listener.close_ep();
	return 0;
}

/// The initiator: puts its buffers into the target's and gets them back.
void initiator(int sock, int n, const std::string &server_ip, const std::string &expect_transport)
{
	Scattered src(n), back(n);
	src.fill(1);
	back.fill(2);
	svmbatch::Context ctx;
	std::vector<Buffer> all = src.buffers;
	all.insert(all.end(), back.buffers.begin(), back.buffers.end());
	svmbatch::Registration reg = ctx.register_buffers(all);
	tap(true, "registered " + std::to_string(all.size()) + " buffers in one call (" +
			  svmbatch::mode_name(ctx.mode()) + " mode, " +
			  std::to_string(reg.ranges().size()) + " ranges)");
	Ucp ucp;
	std::vector<char> addr = recv_blob(sock);
	ucp_ep_params_t ep_params{};
	sockaddr_in sin{};
	if (server_ip.empty()) {
		ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
		ep_params.address = reinterpret_cast<const ucp_address_t *>(addr.data());
	} else {
		// Client-server: UCX connects through its connection manager
		// (rdmacm on an RDMA device, tcp otherwise) to the listener.
		std::uint16_t port = 0;
		std::memcpy(&port, addr.data(), sizeof(port));
		sin.sin_family = AF_INET;
		sin.sin_port = htons(port);
		::inet_pton(AF_INET, server_ip.c_str(), &sin.sin_addr);
		ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
		ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
		ep_params.sockaddr.addr = reinterpret_cast<const sockaddr *>(&sin);
		ep_params.sockaddr.addrlen = sizeof(sin);
	}
	ucp_ep_h ep = nullptr;
	check(ucp_ep_create(ucp.worker(), &ep_params, &ep), "ucp_ep_create");
	ucp_request_param_t fp{};
	// The connection is up (and its lanes chosen) once a flush completes.
	check(ucp.wait(ucp_ep_flush_nbx(ep, &fp)), "connecting (ucp_ep_flush_nbx)");
	(void)recv_blob(sock);
	std::uint64_t nranges = 0;
	std::memcpy(&nranges, recv_blob(sock).data(), sizeof(nranges));
	std::vector<ucp_rkey_h> rkeys;
	for (std::uint64_t r = 0; r < nranges; r++) {
		std::vector<char> packed = recv_blob(sock);
		ucp_rkey_h k = nullptr;
		check(ucp_ep_rkey_unpack(ep, packed.data(), &k), "ucp_ep_rkey_unpack");
		rkeys.push_back(k);
	}
	std::vector<char> raw = recv_blob(sock);
	std::vector<Place> places(raw.size() / sizeof(Place));
	std::memcpy(places.data(), raw.data(), raw.size());
	// Which transport UCX chose for each lane: "#" lines, TAP comments.
	if (!expect_transport.empty()) {
		char *raw = nullptr;
		std::size_t raw_len = 0;
		{
			std::unique_ptr<FILE, decltype(&std::fclose)> mem(::open_memstream(&raw,
											   &raw_len),
									  &std::fclose);
			if (mem)
				ucp_ep_print_info(ep, mem.get());
		}
		const std::unique_ptr<char, decltype(&std::free)> info(raw, &std::free);
		const std::string lanes = info ? std::string(info.get(), raw_len) : "";
		tap(lanes.find(expect_transport) != std::string::npos,
		    "UCX moves the data with " + expect_transport);
	}
	ucp_ep_print_info(ep, stdout);
	std::fflush(stdout);
	tap(places.size() == src.buffers.size(),
	    "the target published " + std::to_string(places.size()) + " buffers under " +
		    std::to_string(nranges) + " rkeys (one per merged range)");

	ucp_request_param_t rp{};
	ucs_status_t worst = UCS_OK;
	for (std::size_t i = 0; i < places.size() && worst == UCS_OK; i++)
		worst = ucp.wait(ucp_put_nbx(ep, src.buffers[i].ptr, places[i].len, places[i].addr,
					     rkeys[places[i].range], &rp));
	if (worst == UCS_OK)
		worst = ucp.wait(ucp_ep_flush_nbx(ep, &rp));
	tap(worst == UCS_OK,
	    std::string("ucp_put_nbx of every buffer, flushed: ") + ucs_status_string(worst));
	for (std::size_t i = 0; i < places.size() && worst == UCS_OK; i++)
		worst = ucp.wait(ucp_get_nbx(ep, back.buffers[i].ptr, places[i].len, places[i].addr,
					     rkeys[places[i].range], &rp));
	if (worst == UCS_OK)
		worst = ucp.wait(ucp_ep_flush_nbx(ep, &rp));
	tap(worst == UCS_OK,
	    std::string("ucp_get_nbx of every buffer, flushed: ") + ucs_status_string(worst));
	tap(back.mismatches(1) == 0, "what came back is what was put, byte for byte");
	send_blob(sock, nullptr, 0);
	int target_bad = -1;
	std::memcpy(&target_bad, recv_blob(sock).data(), sizeof(target_bad));
	tap(target_bad == 0,
	    "the target's buffers hold every byte put (" + std::to_string(target_bad) + " differ)");
	for (ucp_rkey_h k : rkeys)
		ucp_rkey_destroy(k);
	ucp_request_param_t cp{};
	cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
	cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
	(void)ucp.wait(ucp_ep_close_nbx(ep, &cp));
	send_blob(sock, nullptr, 0);
}

} // namespace

int main(int argc, char **argv)
{
	int n = 64;
	std::string server_ip, expect_transport;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!std::strcmp(argv[i], "--buffers"))
			n = std::atoi(argv[i + 1]);
		else if (!std::strcmp(argv[i], "--server-ip"))
			server_ip = argv[i + 1];
		else if (!std::strcmp(argv[i], "--expect-transport"))
			expect_transport = argv[i + 1];
	}
	if (n < 1 || n > 4096) {
		std::fprintf(stderr, "usage: ucx_put_get [--buffers 1..4096] [--server-ip IPV4] "
				     "[--expect-transport NAME]\n");
		return 2;
	}
	int sv[2];
	if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return 1;
	// The plan before any test runs: the initiator's 6 results, its
	// transport check where one is expected, and the target's exit.
	std::printf("TAP version 13\n1..%d\n", expect_transport.empty() ? 7 : 8);
	std::fflush(stdout);
	const pid_t pid = ::fork();
	if (pid == 0) {
		::close(sv[0]);
		int rc = 1;
		try {
			rc = target(sv[1], n, server_ip);
		} catch (const std::exception &e) {
			std::fprintf(stderr, "ucx_put_get target: %s\n", e.what());
		}
		std::fflush(nullptr);
		::_exit(rc);
	}
	::close(sv[1]);
	try {
		initiator(sv[0], n, server_ip, expect_transport);
	} catch (const std::exception &e) {
		tap(false, std::string("initiator: ") + e.what());
	}
	::close(sv[0]);
	int status = 0;
	::waitpid(pid, &status, 0);
	tap(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the target exited cleanly");
	std::printf("# %d passed, %d failed\n", tap_n - tap_failed, tap_failed);
	return tap_failed ? 1 : 0;
}
