// SPDX-License-Identifier: MIT
// Helpers shared by the library tests.
#pragma once

#include <liburing.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <svmbatch/all.hpp>

namespace svmbatch::test {

/// The fake CUDA driver, HIP and HSA runtimes, libibverbs and Level Zero
/// loader (fake_cuda/, fake_hip/, fake_hsa/, fake_ibverbs/, fake_ze/) by
/// soname, the way the backends' options name the real libcuda.so.1,
/// libamdhip64.so.5, libhsa-runtime64.so.1, libibverbs.so.1 and
/// libze_loader.so.1.  The test
/// binary links the fakes, so dlopen of
/// the soname returns the copy the loader mapped at start (the one whose
/// control functions the tests call), wherever it found it: through the
/// build tree's RUNPATH on the host, through the guest's ld.so.cache
/// (/usr/lib/svmbatch-tests, tools/vmtest/mkinitramfs.sh) in a guest.  No
/// path of the build tree is compiled in.
inline constexpr const char *fake_cuda_library = "libsvmbatch_fake_cuda.so";
inline constexpr const char *fake_hip_library = "libsvmbatch_fake_hip.so";
inline constexpr const char *fake_hsa_library = "libsvmbatch_fake_hsa.so";
inline constexpr const char *fake_ibverbs_library = "libsvmbatch_fake_ibverbs.so";
inline constexpr const char *fake_ze_library = "libsvmbatch_fake_ze.so";

/// The mode the suite runs in: SVMBATCH_TEST_MODE=kernel|userspace (the
/// guest runner sets kernel), userspace by default.
Mode mode_under_test();

/// A Context in mode_under_test().
Context make_context();

/// Kernel mode tests: true when /dev/svmbatch is there (else GTEST_SKIP).
bool kernel_available();

/// In a test or SetUp(): skip unless the suite runs in kernel mode with the
/// module there, saying which is missing.
#define SVMBATCH_SKIP_UNLESS_KERNEL_MODE()                                                   \
	do {                                                                                 \
		if (::svmbatch::test::mode_under_test() != ::svmbatch::Mode::Kernel)         \
			GTEST_SKIP() << "needs the module (kernel mode runs in the guests)"; \
		if (!::svmbatch::test::kernel_available())                                   \
			GTEST_SKIP() << "no /dev/svmbatch";                                  \
	} while (0)

/// What this machine was built to have, from SVMBATCH_EXPECT: a comma
/// separated list (e.g. "vgem,rxe,thp") that the guest runner's /init
/// exports from what mkinitramfs.sh shipped (--expect, tools/vmtest/), and
/// that tools/check.sh sets for the host's runs.  Where a feature is
/// expected, its absence is a failure, not a skip.  The features, each
/// named by the probe-guarded skips (SVMBATCH_SKIP_ABSENT) that honour it:
/// thp, hugetlb, numa, hip, hsa, ze, vgem, rxe, mounts (a small tmpfs
/// mounted by the test), writeback (SVMBATCH_WRITEBACK_DIR, a file system
/// that writes back and drops pages), odirect (O_DIRECT on the file
/// system of SVMBATCH_WRITEBACK_DIR, else $TMPDIR), faultinject (the module's
/// CONFIG_SVMBATCH_FAULT_INJECTION files), procmap_query (Linux 6.11+).
bool expected_here(const std::string &feature);

/// SVMBATCH_EXPECT as it is ("" when unset), for messages.
std::string expect_list();

/// In a test or SetUp(): `feature` is absent here, as the probe that says
/// `why` found.  Skips with why, unless this machine is expected to have
/// the feature (expected_here): then fails.
#define SVMBATCH_SKIP_ABSENT(feature, why)                                                     \
	do {                                                                                   \
		if (::svmbatch::test::expected_here(feature))                                  \
			GTEST_FAIL()                                                           \
				<< (feature) << " is absent (" << (why)                        \
				<< "), but this machine is built to have it (SVMBATCH_EXPECT=" \
				<< ::svmbatch::test::expect_list() << ")";                     \
		GTEST_SKIP() << (why);                                                         \
	} while (0)

/// Whether this process's effective capability set holds cap.
bool has_capability(int cap);

/// The file the dynamic loader would map for soname, or "" when there is
/// none; *probed says where it looked (LD_LIBRARY_PATH, the directories of
/// /etc/ld.so.conf and /etc/ld.so.conf.d, then the system directories).
/// Tells "the runtime is not installed" from "it is there and failed".
std::string find_library(const std::string &soname, std::string *probed);

/// process_pinned_bytes() once done(it) holds, or after timeout_ms (then
/// the last value): io_uring drops its pins from a worker after a ring
/// exits, so VmPin settles later.
template <typename Done> std::uint64_t pinned_bytes_when(Done done, int timeout_ms);

/// process_pinned_bytes() once it equals want (or after timeout_ms).
std::uint64_t settled_pinned_bytes(std::uint64_t want, int timeout_ms = 5000);

/// process_pinned_bytes() once it is at most want (or after timeout_ms).  A
/// ring's pages are uncharged from a worker after it exits (on 6.1 much
/// later), and charges an earlier test left may drop meanwhile: so "at
/// most", not "equal".
std::uint64_t pinned_bytes_at_most(std::uint64_t want, int timeout_ms = 10000);

/// process_pinned_bytes() once it has not changed for quiet_ms (at most
/// timeout_ms): lets an earlier test's io_uring teardown finish before
/// exact comparisons.
std::uint64_t quiet_pinned_bytes(int quiet_ms = 200, int timeout_ms = 5000);

/// The number of this process's open file descriptors.
std::size_t open_fds();

/// The number of this process's threads named name (/proc/self/task/*/comm).
std::size_t threads_named(const std::string &name);

/// The ids of this process's threads named name.
std::vector<int> thread_ids_named(const std::string &name);

/// Of `samples` looks at thread tid's state (/proc/self/task/tid/stat),
/// every `every`, how many found it running or runnable (R).
int times_running(int tid, int samples, std::chrono::microseconds every);

/// One io_uring, exited on destruction.
class Ring {
public:
	explicit Ring(unsigned entries = 64);
	~Ring();
	Ring(const Ring &) = delete;
	Ring &operator=(const Ring &) = delete;
	Ring(Ring &&) = delete;
	Ring &operator=(Ring &&) = delete;
	::io_uring &get() { return ring_; }
	::io_uring *operator->() { return &ring_; }

private:
	::io_uring ring_{};
};

/// The byte expected at file offset off of a ScratchFile.
inline std::uint8_t pattern_byte(std::uint64_t off)
{
	return static_cast<std::uint8_t>((off * 2654435761u) >> 13);
}

/// SVMBATCH_WRITEBACK_DIR (the guests mount an ext4 there), or "" when
/// unset: a directory on a file system that writes back and drops pages.
std::string writeback_dir();

/// A temporary file of len bytes filled with pattern_byte(), removed on
/// destruction (created in dir, or where dir is "" in $TMPDIR or /tmp).
class ScratchFile {
public:
	explicit ScratchFile(std::size_t len, const std::string &dir = "");
	~ScratchFile();
	ScratchFile(const ScratchFile &) = delete;
	ScratchFile &operator=(const ScratchFile &) = delete;
	ScratchFile(ScratchFile &&) = delete;
	ScratchFile &operator=(ScratchFile &&) = delete;
	int fd() const { return fd_; }
	const std::string &path() const { return path_; }

private:
	int fd_ = -1;
	std::string path_;
};

/// Drop CAP_IPC_LOCK from this process's effective set (io_uring then
/// charges RLIMIT_MEMLOCK).  Returns false when it could not.  Use in a
/// forked child only (see run_in_child).
bool drop_cap_ipc_lock();

/// Run fn in a forked child; returns its exit status (0 = pass).  A child
/// that dies of a signal returns 128 + signal.  gtest assertions in fn do
/// not propagate: fn returns the status itself.
template <typename Fn> int run_in_child(Fn fn);

} // namespace svmbatch::test

#include "test_util_inl.hpp"
