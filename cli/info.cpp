// SPDX-License-Identifier: MIT
// svmbatch info: what the module and the library would do here.
#include <linux/svmbatch.h>
#include <unistd.h>

#include <cstdio>
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

} // namespace

int info(const Paths &paths, bool json)
{
	Context ctx(Mode::Auto, paths.device);
	const Info &i = ctx.info();
	bool loaded = i.mode == Mode::Kernel;
	std::vector<std::string> features = feature_names(i.features);
	std::vector<std::string> backends = built_backends();
	RdmaListing rdma = rdma_listing();

	if (json) {
		std::printf(
			"{\"module_loaded\": %s, \"device\": %s, \"abi_version\": %u, "
			"\"library_abi_version\": %u, \"page_size\": %zu, \"features\": [%s], "
			"\"max_ranges\": %u, \"max_registrations\": %u, \"max_range_bytes\": %llu, "
			"\"mode\": %s, \"reason\": %s, \"gpu_backends\": [%s], "
			"\"rdma_devices\": %s}\n",
			loaded ? "true" : "false", json::quote(paths.device).c_str(), i.abi_version,
			SVMBATCH_ABI_VERSION, i.page_size, json_list(features).c_str(),
			i.max_ranges, i.max_registrations,
			static_cast<unsigned long long>(i.max_range_bytes),
			json::quote(mode_name(i.mode)).c_str(), json::quote(i.reason).c_str(),
			json_list(backends).c_str(), rdma.json.c_str());
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
	std::printf("rdma devices:  %s\n", rdma.text.c_str());
	return exit_ok;
}

} // namespace svmbatch::cli
