// SPDX-License-Identifier: MIT
// svmbatch info: what the module and the library would do here, which GPU
// backends work here, and what decides how much this user may pin.
#include <linux/capability.h>
#include <linux/svmbatch.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

#include "cli.hpp"
#include "json_string.hpp"

namespace svmbatch::cli {

namespace {

std::vector<std::string> feature_names(std::uint64_t f)
{
	std::vector<std::string> names;

	if (f & SVMBATCH_FEATURE_DMABUF)
		names.emplace_back("dmabuf");
	if (f & SVMBATCH_FEATURE_STALE_NOTIFY)
		names.emplace_back("stale-notify");
	if (f & SVMBATCH_FEATURE_FAULT_INJECTION)
		names.emplace_back("fault-injection");
	return names;
}

std::string gib(std::uint64_t bytes)
{
	char buf[32];

	std::snprintf(buf, sizeof(buf), "%.0f GiB", static_cast<double>(bytes) / (1ull << 30));
	return buf;
}

/* "a, b" of JSON strings, for a JSON array. */
std::string json_list(const std::vector<std::string> &names)
{
	std::string list;

	for (const auto &n : names)
		list += (list.empty() ? "" : ", ") + json::quote(n);
	return list;
}

/* "a b", or "-" for none. */
std::string words(const std::vector<std::string> &names)
{
	std::string w;

	for (const auto &n : names)
		w += (w.empty() ? "" : " ") + n;
	return w.empty() ? "-" : w;
}

/* The RDMA devices and whether they take dma-buf memory regions, as JSON
 * objects and as text; why there are none where libibverbs is absent. */
struct RdmaListing {
	std::string json = "[]";
	std::string text;
};

RdmaListing rdma_listing()
{
	RdmaListing out;
#if SVMBATCH_HAS_RDMA
	std::vector<RdmaDeviceInfo> devs;
	try {
		devs = rdma_devices();
	} catch (const Error &e) {
		out.text = std::string("none (") + e.what() + ")";
		return out;
	}
	std::string json;
	for (const RdmaDeviceInfo &d : devs) {
		json += (json.empty() ? "" : ", ") + std::string("{\"name\": ") +
			json::quote(d.name) +
			", \"max_mr_size\": " + std::to_string(d.max_mr_size) +
			", \"dmabuf_mr\": " + (d.dmabuf_mr ? "true" : "false") +
			", \"error\": " + json::quote(d.error) + "}";
		out.text += (out.text.empty() ? "" : "; ") + d.name +
			    (d.error.empty() ? std::string(" (dma-buf memory regions: ") +
						       (d.dmabuf_mr ? "yes" : "no") + ")" :
					       " (" + d.error + ")");
	}
	out.json = "[" + json + "]";
	if (devs.empty())
		out.text = "none (libibverbs lists no device)";
#else
	out.text = "none (the library was built without the RDMA backend)";
#endif
	return out;
}

/* Whether a backend built into the library works here, and why not. */
struct BackendProbe {
	std::string name;
	bool usable = false;
	std::string device; ///< what it opened; "" when it opened nothing
	std::string reason; ///< why it is not usable; "" when it is
};

/* An Error's own words: without "svmbatch gpu-open: " before them and
 * without the errno's text that std::system_error appends. */
std::string error_detail(const Error &e)
{
	std::string w = e.what();
	std::string prefix = std::string("svmbatch ") + step_name(e.step()) + ": ";
	std::string suffix = ": " + e.code().message();

	if (w.starts_with(prefix))
		w.erase(0, prefix.size());
	if (w.ends_with(suffix))
		w.erase(w.size() - suffix.size());
	return w;
}

/* What a user does about it: the runtime library is missing, or it is
 * there and finds no device, or something else went wrong. */
std::string error_kind(const Error &e, const std::string &detail)
{
	if (detail.find("cannot open shared object file") != std::string::npos)
		return "runtime not found";
	if (detail.find("not a usable") != std::string::npos)
		return "runtime not usable";
	if (e.err() == ENODEV || e.err() == ENOENT)
		return "no device";
	if (e.err() == EACCES || e.err() == EPERM)
		return "no permission";
	return "cannot open";
}

/* Opens a backend with open(), which returns what it found, and closes it
 * again at once: the backends release what they took (CUDA's primary
 * context, HSA's runtime reference, the DRM file) in their destructors.
 * needs_module: the backend maps through a dma-buf export, which only the
 * module gives. */
BackendProbe probe(const std::string &name, bool kernel_mode, bool needs_module,
		   const std::function<std::string()> &open)
{
	BackendProbe p;

	p.name = name;
	try {
		p.device = open();
		p.usable = true;
	} catch (const Error &e) {
		std::string detail = error_detail(e);
		p.reason = error_kind(e, detail) + ": " + detail;
		return p;
	}
	if (needs_module && !kernel_mode) {
		p.usable = false;
		p.reason = "needs the module: it maps the dma-buf the module exports, and the "
			   "library is in userspace mode";
	}
	return p;
}

#if SVMBATCH_HAS_HSA
std::string joined(const std::vector<std::string> &names, const char *sep)
{
	std::string out;

	for (const auto &n : names)
		out += (out.empty() ? "" : sep) + n;
	return out;
}
#endif

std::vector<BackendProbe> probe_backends(bool kernel_mode)
{
	std::vector<BackendProbe> probes;

	for (const std::string &name : built_backends()) {
		std::function<std::string()> open;
		bool needs_module = false;
#if SVMBATCH_HAS_CUDA
		if (name == "cuda")
			open = [] {
				CudaBackend b;
				return b.device_name() + " (device " + std::to_string(b.device()) +
				       ")";
			};
#endif
#if SVMBATCH_HAS_HIP
		if (name == "hip")
			open = [] {
				HipBackend b;
				return b.device_name() + " (device " + std::to_string(b.device()) +
				       ", " + b.library() + ")";
			};
#endif
#if SVMBATCH_HAS_HSA
		if (name == "hsa")
			open = [] { return joined(HsaBackend().gpu_agents(), ", "); };
#endif
#if SVMBATCH_HAS_AMDGPU
		if (name == "amdgpu") {
			needs_module = true;
			open = [] { return AmdgpuBackend().node(); };
		}
#endif
#if SVMBATCH_HAS_DRM
		if (name == "drm") {
			needs_module = true;
			open = [] {
				DrmBackend b;
				return b.node() + " (" + b.driver() + ")";
			};
		}
#endif
#if SVMBATCH_HAS_ZE
		if (name == "ze")
			open = [] {
				ZeBackend b;
				return b.device_name() + " (driver " + std::to_string(b.driver()) +
				       ", device " + std::to_string(b.device()) + ", " +
				       b.library() + ")";
			};
#endif
		if (open)
			probes.push_back(probe(name, kernel_mode, needs_module, open));
		else
			probes.push_back(
				{name, false, "", "this command does not know how to open it"});
	}
	return probes;
}

std::string backends_json(const std::vector<BackendProbe> &probes)
{
	std::string json;

	for (const BackendProbe &p : probes)
		json += (json.empty() ? "" : ", ") + std::string("{\"name\": ") +
			json::quote(p.name) + ", \"usable\": " + (p.usable ? "true" : "false") +
			", \"device\": " + json::quote(p.device) +
			", \"reason\": " + json::quote(p.reason) + "}";
	return "[" + json + "]";
}

/* What decides how much this process may pin: RLIMIT_MEMLOCK (the module
 * and io_uring charge pinned pages against it), CAP_IPC_LOCK (which lifts
 * it), and what the process has pinned now (VmPin). */
struct PinLimits {
	rlim_t soft = RLIM_INFINITY;
	rlim_t hard = RLIM_INFINITY;
	std::optional<bool> cap_ipc_lock; ///< unset: /proc/self/status unreadable
	std::optional<std::uint64_t> vm_pin; ///< bytes; unset: see vm_pin_error
	std::string vm_pin_error;
};

/* CapEff of /proc/self/status: the effective capabilities, in hex. */
std::optional<bool> has_cap_ipc_lock()
{
	std::ifstream status("/proc/self/status");
	std::string line;

	while (std::getline(status, line)) {
		std::uint64_t caps = 0;

		if (std::sscanf(line.c_str(), "CapEff: %" SCNx64, &caps) == 1)
			return (caps >> CAP_IPC_LOCK) & 1;
	}
	return std::nullopt;
}

PinLimits pin_limits()
{
	PinLimits l;
	struct rlimit r {};

	if (::getrlimit(RLIMIT_MEMLOCK, &r) == 0) {
		l.soft = r.rlim_cur;
		l.hard = r.rlim_max;
	}
	l.cap_ipc_lock = has_cap_ipc_lock();
	try {
		l.vm_pin = process_pinned_bytes();
	} catch (const Error &e) {
		l.vm_pin_error = error_detail(e);
	}
	return l;
}

std::string limit_json(rlim_t v)
{
	return v == RLIM_INFINITY ? "\"unlimited\"" : std::to_string(v);
}

/* As `ulimit -l` counts: KiB, or "unlimited". */
std::string limit_text(rlim_t v)
{
	return v == RLIM_INFINITY ? "unlimited" : std::to_string(v / 1024) + " KiB";
}

std::string pin_limits_json(const PinLimits &l)
{
	return R"("rlimit_memlock": {"soft": )" + limit_json(l.soft) + R"(, "hard": )" +
	       limit_json(l.hard) + R"(}, "cap_ipc_lock": )" +
	       (l.cap_ipc_lock ? (*l.cap_ipc_lock ? "true" : "false") : "null") +
	       R"(, "vm_pin_bytes": )" + (l.vm_pin ? std::to_string(*l.vm_pin) : "null");
}

void print_pin_limits(const PinLimits &l)
{
	std::printf("memlock limit: %s soft, %s hard (RLIMIT_MEMLOCK, `ulimit -l`: what "
		    "the module and io_uring may pin)\n",
		    limit_text(l.soft).c_str(), limit_text(l.hard).c_str());
	if (!l.cap_ipc_lock)
		std::printf("CAP_IPC_LOCK:  unknown (/proc/self/status has no CapEff)\n");
	else if (*l.cap_ipc_lock)
		std::printf("CAP_IPC_LOCK:  yes (pinning is not held to the memlock limit)\n");
	else
		std::printf("CAP_IPC_LOCK:  no (pinning is held to the memlock limit)\n");
	if (l.vm_pin)
		std::printf("VmPin:         %" PRIu64 " KiB (pinned by this process now)\n",
			    *l.vm_pin / 1024);
	else
		std::printf("VmPin:         unknown (%s)\n", l.vm_pin_error.c_str());
}

} // namespace

int info(const Paths &paths, bool json)
{
	Context ctx(Mode::Auto, paths.device);
	const Info &i = ctx.info();
	bool loaded = i.mode == Mode::Kernel;
	std::vector<std::string> features = feature_names(i.features);
	std::vector<std::string> backends = built_backends();
	RdmaListing rdma = rdma_listing();
	std::vector<BackendProbe> probes = probe_backends(loaded);
	PinLimits limits = pin_limits();

	if (json) {
		std::printf(
			"{\"module_loaded\": %s, \"device\": %s, \"abi_version\": %u, "
			"\"library_abi_version\": %u, \"page_size\": %zu, \"features\": [%s], "
			"\"max_ranges\": %u, \"max_registrations\": %u, \"max_range_bytes\": %llu, "
			"\"mode\": %s, \"reason\": %s, \"gpu_backends\": [%s], "
			"\"gpu_backends_usable\": %s, \"rdma_devices\": %s, %s}\n",
			loaded ? "true" : "false", json::quote(paths.device).c_str(), i.abi_version,
			SVMBATCH_ABI_VERSION, i.page_size, json_list(features).c_str(),
			i.max_ranges, i.max_registrations,
			static_cast<unsigned long long>(i.max_range_bytes),
			json::quote(mode_name(i.mode)).c_str(), json::quote(i.reason).c_str(),
			json_list(backends).c_str(), backends_json(probes).c_str(),
			rdma.json.c_str(), pin_limits_json(limits).c_str());
		return exit_ok;
	}
	if (loaded)
		std::printf("module:        loaded (%s, ABI %u)\n", paths.device.c_str(),
			    i.abi_version);
	else
		std::printf(
			"module:        not loaded (no usable %s; `modprobe svmbatch` as root)\n",
			paths.device.c_str());
	std::printf("features:      %s\n", words(features).c_str());
	std::printf("limits:        %u ranges per registration, %u registrations per open "
		    "file, %s per range%s\n",
		    i.max_ranges, i.max_registrations, gib(i.max_range_bytes).c_str(),
		    loaded ? "" : " (the module's defaults)");
	std::printf("page size:     %zu\n", i.page_size);
	std::printf("library mode:  %s (%s)\n", mode_name(i.mode), i.reason.c_str());
	std::printf("gpu backends:  %s (built into the library)\n", words(backends).c_str());
	for (const BackendProbe &p : probes) {
		std::string state = p.usable ? "usable: " + p.device : "not usable: " + p.reason;
		std::printf("  %-12s %s\n", (p.name + ":").c_str(), state.c_str());
	}
	std::printf("rdma devices:  %s\n", rdma.text.c_str());
	print_pin_limits(limits);
	return exit_ok;
}

} // namespace svmbatch::cli
