// SPDX-License-Identifier: MIT
// The file <-> GPU pipeline benchmark, run on the GPU machine by
// tools/device/run.sh; JSON on stdout, progress on stderr.
//
// Read: a file hot in the page cache -> READ_FIXED into registered host
// buffers (svmbatch::Reader, every core) -> cudaMemcpyAsync on several
// streams overlapping the next reads -> a GPU checksum of every 1 MiB,
// compared with the CPU's.  Write: the reverse (device -> registered
// buffers -> WRITE_FIXED (svmbatch::Writer) -> file, compared byte for
// byte).  For two layouts (2000 x 1 MiB and 64 x 64 MiB buffers), each
// parallelism (one thread; AsyncWorkers; RingPerThread with the buffer
// table cloned and registered again), against 16 threads of plain
// preadv/pwrite of the same file into the same buffers, and the pinned
// H2D/D2H rates, all in one run; then the same with O_DIRECT on a disk.
//
// Like with like: the pipelines (file -> buffers -> GPU and back) are
// compared with the same pipelines whose file I/O is 16 threads of plain
// preadv/pwritev (preadv16_pipeline, pwrite16_pipeline: the same batches,
// buffers, streams and copies), and the Reader's reads alone with plain
// preadv alone (read_over_preadv16); neither ratio divides a path with GPU
// copies by one without.
//
//   pipeline_bench [--dir DIR] [--gib N] [--direct-dir DIR] [--direct-gib N]
//                  [--reps N] [--commit TEXT]
#include <cuda_runtime.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <svmbatch/diagnostics.hpp>
#include <svmbatch/all.hpp>

#include "anon_memory.hpp"
#include "bench_meta.hpp"
#include "cuda_memory.hpp"
#include "bench_stats.hpp"
#include "gpu_checksum.hpp"

namespace {

using svmbatch::bench::AnonMemory;
using svmbatch::bench::check;
using svmbatch::bench::DeviceBuffer;
using svmbatch::bench_stats::median;
using svmbatch::bench_stats::time_us;

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t check_chunk = MiB; ///< granularity of the checksums
constexpr unsigned baseline_threads = 16;
constexpr std::size_t groups = 8; ///< buffer groups in the pipelines
constexpr unsigned streams = 4;

[[noreturn]] void fail_errno(int err, const std::string &what)
{
	throw std::system_error(err, std::generic_category(), what);
}

/// The byte the test files hold at offset off.
std::uint8_t pattern(std::uint64_t off)
{
	return static_cast<std::uint8_t>((off * 2654435761u) >> 13);
}

void fill_pattern(char *p, std::size_t len, std::uint64_t off)
{
	for (std::size_t k = 0; k < len; k++)
		p[k] = static_cast<char>(pattern(off + k));
}

/// fn(i) for i in [0, n), taken in order by `threads` threads.
void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)> &fn)
{
	std::atomic<std::size_t> next{0};
	std::vector<std::jthread> pool;
	std::exception_ptr error;
	std::mutex error_mutex;

	for (unsigned t = 0; t < threads; t++)
		pool.emplace_back([&] {
			try {
				for (std::size_t i; (i = next.fetch_add(1)) < n;)
					fn(i);
			} catch (...) {
				std::lock_guard lock(error_mutex);
				error = std::current_exception();
				next = n;
			}
		});
	pool.clear();
	if (error)
		std::rethrow_exception(error);
}

/// A file descriptor, closed on destruction.
class Fd {
public:
	explicit Fd(int fd) : fd_(fd) {}
	~Fd()
	{
		if (fd_ >= 0)
			::close(fd_);
	}
	Fd(const Fd &) = delete;
	Fd &operator=(const Fd &) = delete;
	Fd(Fd &&) = delete;
	Fd &operator=(Fd &&) = delete;
	int get() const { return fd_; }

private:
	int fd_;
};

/// A file of `len` bytes under dir, removed at once (the fd keeps it):
/// pattern bytes, or zeros, written by 16 threads and so in the page cache.
int make_file(const std::string &dir, std::size_t len, bool zeros)
{
	std::string path = dir + "/svmbatch-pipeline-XXXXXX";
	int fd = ::mkstemp(path.data());
	if (fd < 0)
		fail_errno(errno, path);
	::unlink(path.c_str());
	if (::ftruncate(fd, static_cast<off_t>(len)) < 0)
		fail_errno(errno, "ftruncate");
	parallel_for(len / MiB, baseline_threads, [&](std::size_t c) {
		std::vector<char> chunk(MiB, 0);
		if (!zeros)
			fill_pattern(chunk.data(), MiB, c * MiB);
		if (::pwrite(fd, chunk.data(), MiB, static_cast<off_t>(c * MiB)) !=
		    static_cast<ssize_t>(MiB))
			fail_errno(errno, "pwrite");
	});
	return fd;
}

/// Zeros over the first len bytes of fd (which may be O_DIRECT).
void zero_file(int fd, std::size_t len)
{
	static const AnonMemory zeros(MiB);

	parallel_for(len / MiB, baseline_threads, [&](std::size_t c) {
		if (::pwrite(fd, zeros.get(), MiB, static_cast<off_t>(c * MiB)) !=
		    static_cast<ssize_t>(MiB))
			fail_errno(errno, "pwrite zeros");
	});
}

/// Every byte of the file is pattern(offset): how many 1 MiB chunks differ.
std::size_t count_bad_chunks(int fd, std::size_t len)
{
	std::atomic<std::size_t> bad{0};

	parallel_for(len / MiB, baseline_threads, [&](std::size_t c) {
		std::vector<char> got(MiB), want(MiB);
		fill_pattern(want.data(), MiB, c * MiB);
		if (::pread(fd, got.data(), MiB, static_cast<off_t>(c * MiB)) !=
			    static_cast<ssize_t>(MiB) ||
		    std::memcmp(got.data(), want.data(), MiB) != 0)
			bad++;
	});
	return bad;
}

/// The CPU's checksum of every check_chunk of the pattern.
std::vector<std::uint64_t> expected_sums(std::size_t len)
{
	std::vector<std::uint64_t> sums(len / check_chunk);

	parallel_for(sums.size(), baseline_threads, [&](std::size_t c) {
		std::vector<char> chunk(check_chunk);
		fill_pattern(chunk.data(), check_chunk, c * check_chunk);
		sums[c] = svmbatch::device::cpu_checksum(chunk.data(), check_chunk);
	});
	return sums;
}

/// How many check_chunks of dev differ from the expected sums.
std::size_t count_bad_device_chunks(const DeviceBuffer &dev, const std::vector<std::uint64_t> &want,
				    std::size_t len)
{
	std::vector<std::uint64_t> ptrs;
	std::vector<std::size_t> lens;
	for (std::size_t c = 0; c < len / check_chunk; c++) {
		ptrs.push_back(reinterpret_cast<std::uintptr_t>(dev.get() + c * check_chunk));
		lens.push_back(check_chunk);
	}
	std::vector<std::uint64_t> got = svmbatch::device::gpu_checksums(ptrs, lens);
	std::size_t bad = 0;
	for (std::size_t c = 0; c < got.size(); c++)
		bad += got[c] != want[c];
	return bad;
}

/// The CUDA streams and one event per buffer group.
class Streams {
public:
	Streams() : events_(groups)
	{
		for (auto &s : streams_)
			check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
			      "cudaStreamCreate");
		for (auto &e : events_)
			check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
			      "cudaEventCreate");
	}
	~Streams()
	{
		for (auto &e : events_)
			cudaEventDestroy(e);
		for (auto &s : streams_)
			cudaStreamDestroy(s);
	}
	Streams(const Streams &) = delete;
	Streams &operator=(const Streams &) = delete;
	Streams(Streams &&) = delete;
	Streams &operator=(Streams &&) = delete;
	cudaStream_t stream(std::size_t batch) const { return streams_[batch % streams]; }
	cudaEvent_t event(std::size_t batch) const { return events_[batch % groups]; }
	void sync() const
	{
		for (auto s : streams_)
			check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	}

private:
	cudaStream_t streams_[streams]{};
	std::vector<cudaEvent_t> events_;
};

/// The registered host buffers of one layout, and which one holds which
/// chunk of the file: the buffers form `groups` groups, batch j of the
/// file goes to group j % groups, so that reading batch j overlaps the
/// copies of the groups before it.
struct Layout {
	std::string name;
	std::size_t nbuf, size;
	std::vector<std::unique_ptr<AnonMemory>> mem;
	std::vector<svmbatch::Buffer> list;

	Layout(std::string n, std::size_t count, std::size_t bytes)
		: name(std::move(n)), nbuf(count), size(bytes)
	{
		for (std::size_t i = 0; i < nbuf; i++) {
			mem.push_back(std::make_unique<AnonMemory>(size));
			list.push_back({mem.back()->get(), size});
		}
	}
	std::size_t per_group() const { return nbuf / groups; }
	std::size_t buffer_of(std::size_t chunk) const
	{
		return (chunk / per_group()) % groups * per_group() + chunk % per_group();
	}
	char *host(std::size_t chunk) const
	{
		return static_cast<char *>(list[buffer_of(chunk)].ptr);
	}
	std::size_t batches(std::size_t file_len) const
	{
		return (file_len / size + per_group() - 1) / per_group();
	}
	/// The requests of batch j of a file of file_len bytes.
	std::vector<svmbatch::IoRequest> batch(int fd, std::size_t j, std::size_t file_len) const
	{
		std::vector<svmbatch::IoRequest> rq;
		std::size_t chunks = file_len / size;
		for (std::size_t c = j * per_group(); c < std::min((j + 1) * per_group(), chunks);
		     c++)
			rq.push_back({fd, c * size, size, buffer_of(c), 0});
		return rq;
	}
};

void check_results(const std::vector<svmbatch::IoResult> &res, const char *what)
{
	for (std::size_t i = 0; i < res.size(); i++)
		if (res[i].err)
			fail_errno(res[i].err, std::string(what) + " request " + std::to_string(i));
}

/// Batch j's pieces host -> device on its stream, then its event.
void copy_batch_in(const Layout &l, int fd, std::size_t j, std::size_t len, const DeviceBuffer &dev,
		   const Streams &s)
{
	for (const auto &r : l.batch(fd, j, len))
		check(cudaMemcpyAsync(dev.get() + r.file_offset, l.list[r.buffer].ptr, r.length,
				      cudaMemcpyHostToDevice, s.stream(j)),
		      "cudaMemcpyAsync H2D");
	check(cudaEventRecord(s.event(j), s.stream(j)), "cudaEventRecord");
}

/// Batch j's pieces device -> host on its stream, then its event.
void copy_batch_out(const Layout &l, int fd, std::size_t j, std::size_t len,
		    const DeviceBuffer &dev, const Streams &s)
{
	for (const auto &r : l.batch(fd, j, len))
		check(cudaMemcpyAsync(l.list[r.buffer].ptr, dev.get() + r.file_offset, r.length,
				      cudaMemcpyDeviceToHost, s.stream(j)),
		      "cudaMemcpyAsync D2H");
	check(cudaEventRecord(s.event(j), s.stream(j)), "cudaEventRecord");
}

/// file -> buffers (Reader) -> device: two batches are read at a time (in
/// the background, IoBatch), so that the rings go from one to the next
/// without a pause, while the copies of the batches before them are queued
/// and run.
void read_pipeline(const Layout &l, svmbatch::Reader &reader, int fd, std::size_t len,
		   const DeviceBuffer &dev, const Streams &s)
{
	const std::size_t n = l.batches(len);
	std::deque<svmbatch::IoBatch> reading;
	auto start = [&](std::size_t j) {
		if (j >= groups) /* the last copies out of its group are done */
			check(cudaEventSynchronize(s.event(j)), "cudaEventSynchronize");
		reading.push_back(reader.start(l.batch(fd, j, len)));
	};
	for (std::size_t j = 0; j < std::min<std::size_t>(n, 2); j++)
		start(j);
	for (std::size_t j = 0; j < n; j++) {
		check_results(reading.front().wait(), "read");
		reading.pop_front();
		if (j + 2 < n)
			start(j + 2);
		copy_batch_in(l, fd, j, len, dev, s);
	}
	s.sync();
}

/// The reads alone: file -> buffers, two batches at a time.
void read_only(const Layout &l, svmbatch::Reader &reader, int fd, std::size_t len)
{
	const std::size_t n = l.batches(len);
	std::deque<svmbatch::IoBatch> reading;
	for (std::size_t j = 0; j < n; j++) {
		reading.push_back(reader.start(l.batch(fd, j, len)));
		if (reading.size() == 2) {
			check_results(reading.front().wait(), "read");
			reading.pop_front();
		}
	}
	for (auto &b : reading)
		check_results(b.wait(), "read");
}

/// device -> buffers -> file (Writer); the copy of batch j + 1 overlaps
/// the writes of batch j.
void write_pipeline(const Layout &l, svmbatch::Writer &writer, int fd, std::size_t len,
		    const DeviceBuffer &dev, const Streams &s)
{
	auto copy_out = [&](std::size_t j) { copy_batch_out(l, fd, j, len, dev, s); };
	const std::size_t n = l.batches(len);
	copy_out(0);
	for (std::size_t j = 0; j < n; j++) {
		if (j + 1 < n)
			copy_out(j + 1); /* group (j + 1) % groups was written out before */
		check(cudaEventSynchronize(s.event(j)), "cudaEventSynchronize");
		check_results(writer.write(l.batch(fd, j, len)), "write");
	}
}

/// len bytes at p from (to) fd at off with plain preadv (pwritev), all of them.
void plain_rw(int fd, char *p, std::size_t len, off_t off, bool write)
{
	iovec iov{p, len};
	for (std::size_t done = 0; done < len;) {
		ssize_t n = write ? ::pwritev(fd, &iov, 1, off) : ::preadv(fd, &iov, 1, off);
		if (n <= 0)
			fail_errno(n ? errno : EIO, write ? "pwritev" : "preadv");
		done += static_cast<std::size_t>(n);
		iov.iov_base = static_cast<char *>(iov.iov_base) + n;
		iov.iov_len -= static_cast<std::size_t>(n);
		off += n;
	}
}

/// 16 threads of plain preadv (or pwritev) of the same file into (from)
/// the same buffers, chunk by chunk in file order.
void plain_io16(const Layout &l, int fd, std::size_t len, bool write)
{
	parallel_for(len / l.size, baseline_threads, [&](std::size_t c) {
		plain_rw(fd, l.host(c), l.size, static_cast<off_t>(c * l.size), write);
	});
}

/// Batch j of the file with 16 threads of plain preadv (pwritev), in
/// pieces of 1 MiB at most so that a batch of a few large buffers keeps
/// all 16 threads busy too.
void plain_batch16(const Layout &l, int fd, std::size_t j, std::size_t len, bool write)
{
	const std::vector<svmbatch::IoRequest> rq = l.batch(fd, j, len);
	const std::size_t per = (l.size + MiB - 1) / MiB;
	parallel_for(rq.size() * per, baseline_threads, [&](std::size_t k) {
		const svmbatch::IoRequest &r = rq[k / per];
		const std::size_t at = k % per * MiB;
		plain_rw(fd, static_cast<char *>(l.list[r.buffer].ptr) + at,
			 std::min(MiB, l.size - at), static_cast<off_t>(r.file_offset + at), write);
	});
}

/// read_pipeline with the Reader replaced by 16 threads of plain preadv:
/// batch j is read while the copies of the batches before it run.
void plain_read_pipeline(const Layout &l, int fd, std::size_t len, const DeviceBuffer &dev,
			 const Streams &s)
{
	const std::size_t n = l.batches(len);
	for (std::size_t j = 0; j < n; j++) {
		if (j >= groups) /* the last copies out of its group are done */
			check(cudaEventSynchronize(s.event(j)), "cudaEventSynchronize");
		plain_batch16(l, fd, j, len, false);
		copy_batch_in(l, fd, j, len, dev, s);
	}
	s.sync();
}

/// write_pipeline with the Writer replaced by 16 threads of plain
/// pwritev: the copy of batch j + 1 overlaps the writes of batch j.
void plain_write_pipeline(const Layout &l, int fd, std::size_t len, const DeviceBuffer &dev,
			  const Streams &s)
{
	auto copy_out = [&](std::size_t j) { copy_batch_out(l, fd, j, len, dev, s); };
	const std::size_t n = l.batches(len);
	copy_out(0);
	for (std::size_t j = 0; j < n; j++) {
		if (j + 1 < n)
			copy_out(j + 1);
		check(cudaEventSynchronize(s.event(j)), "cudaEventSynchronize");
		plain_batch16(l, fd, j, len, true);
	}
}

/// CPU seconds (user + system) of each thread of this process, by name
/// (io-wq workers are threads of the process too).
std::map<std::string, double> thread_cpu()
{
	std::map<std::string, double> cpu;
	const auto tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
	std::unique_ptr<DIR, int (*)(DIR *)> dir(::opendir("/proc/self/task"), ::closedir);
	if (!dir)
		return cpu;
	while (dirent *e = ::readdir(dir.get())) {
		if (e->d_name[0] == '.')
			continue;
		std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/stat");
		std::string stat((std::istreambuf_iterator<char>(f)),
				 std::istreambuf_iterator<char>());
		auto open = stat.find('('), close = stat.rfind(')');
		if (open == std::string::npos || close == std::string::npos)
			continue;
		std::string name = stat.substr(open + 1, close - open - 1) + "/" + e->d_name;
		unsigned long utime = 0, stime = 0;
		/* Fields 14 and 15, after the state (field 3). */
		if (std::sscanf(stat.c_str() + close + 2,
				"%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
				&stime) == 2)
			cpu[name] = static_cast<double>(utime + stime) / tick;
	}
	return cpu;
}

double process_cpu_s()
{
	rusage u{};
	::getrusage(RUSAGE_SELF, &u);
	return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
	       static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/// Median GB/s of reps runs of fn over len bytes, the samples, and the
/// cores the process kept busy (CPU time / wall time) over all runs.
struct Rate {
	double gbps = 0, cores = 0;
	std::vector<double> samples;
};

Rate measure(int reps, std::size_t len, const std::function<void()> &fn)
{
	Rate r;
	std::vector<double> us;
	double cpu0 = process_cpu_s(), wall = 0;
	for (int i = 0; i < reps; i++) {
		double t = time_us(fn);
		wall += t;
		us.push_back(t);
		r.samples.push_back(static_cast<double>(len) / t / 1e3);
	}
	r.gbps = static_cast<double>(len) / median(us) / 1e3;
	r.cores = (process_cpu_s() - cpu0) / (wall / 1e6);
	return r;
}

std::string samples_json(const std::vector<double> &v)
{
	std::string s = "[";
	char buf[32];
	for (std::size_t i = 0; i < v.size(); i++) {
		std::snprintf(buf, sizeof(buf), "%s%.2f", i ? ", " : "", v[i]);
		s += buf;
	}
	return s + "]";
}

/// One configuration of the Reader/Writer.
struct Mode {
	const char *name;
	unsigned threads;
	svmbatch::Parallelism parallelism;
	bool clone;
};

const char *parallelism_name(svmbatch::Parallelism p)
{
	switch (p) {
	case svmbatch::Parallelism::Auto:
		return "auto";
	case svmbatch::Parallelism::AsyncWorkers:
		return "async_workers";
	case svmbatch::Parallelism::RingPerThread:
		return "ring_per_thread";
	}
	return "?";
}

const char *sharing_name(svmbatch::BufferSharing s)
{
	switch (s) {
	case svmbatch::BufferSharing::None:
		return "none";
	case svmbatch::BufferSharing::Cloned:
		return "cloned";
	case svmbatch::BufferSharing::Registered:
		return "registered";
	}
	return "?";
}

/// Everything one run needs.
struct Bench {
	svmbatch::Context ctx;
	svmbatch::CudaBackend cuda;
	int reps = 5;
	std::vector<std::string> rows; ///< the per-configuration table
	std::map<std::string, double> top; ///< headline figures
	std::string profile; ///< per-thread CPU of one read pipeline
	int failures = 0;
};

std::string row_json(const Layout &l, const std::string &file, const Mode &m,
		     const svmbatch::Reader &r, const Rate &rd, const Rate &wr, const Rate &ro,
		     long long vmpin_kb, std::size_t bad_read, std::size_t bad_write)
{
	char out[1024];
	std::snprintf(out, sizeof(out),
		      "{\"layout\": \"%s\", \"file\": \"%s\", \"mode\": \"%s\", \"threads\": %u, "
		      "\"parallelism\": \"%s\", \"buffer_sharing\": \"%s\", "
		      "\"read_GBps\": %.2f, \"read_cpu_cores\": %.1f, \"reads_alone_GBps\": %.2f, "
		      "\"write_GBps\": %.2f, "
		      "\"write_cpu_cores\": %.1f, \"reader_and_writer_vmpin_added_kB\": %lld, "
		      "\"bad_read_chunks\": %zu, \"bad_write_chunks\": %zu, "
		      "\"read_samples\": %s, \"write_samples\": %s}",
		      l.name.c_str(), file.c_str(), m.name, r.threads(),
		      parallelism_name(r.parallelism()), sharing_name(r.buffer_sharing()), rd.gbps,
		      rd.cores, ro.gbps, wr.gbps, wr.cores, vmpin_kb, bad_read, bad_write,
		      samples_json(rd.samples).c_str(), samples_json(wr.samples).c_str());
	std::fprintf(stderr, "%s\n", out);
	return out;
}

/// The plain baselines: rd/wr are preadv/pwritev alone (no GPU), prd/pwr
/// the same pipelines as the library's with plain preadv/pwritev.
std::string baseline_json(const Layout &l, const std::string &file, const Rate &rd, const Rate &wr,
			  const Rate &prd, const Rate &pwr, std::size_t bad_read,
			  std::size_t bad_write)
{
	char out[2048];
	std::snprintf(out, sizeof(out),
		      "{\"layout\": \"%s\", \"file\": \"%s\", \"mode\": \"plain_io16\", "
		      "\"threads\": %u, \"read_pipeline_GBps\": %.2f, "
		      "\"read_pipeline_cpu_cores\": %.1f, \"reads_alone_GBps\": %.2f, "
		      "\"reads_alone_cpu_cores\": %.1f, \"write_pipeline_GBps\": %.2f, "
		      "\"write_pipeline_cpu_cores\": %.1f, \"writes_alone_GBps\": %.2f, "
		      "\"writes_alone_cpu_cores\": %.1f, \"bad_read_chunks\": %zu, "
		      "\"bad_write_chunks\": %zu, \"read_pipeline_samples\": %s, "
		      "\"reads_alone_samples\": %s, \"write_pipeline_samples\": %s, "
		      "\"writes_alone_samples\": %s}",
		      l.name.c_str(), file.c_str(), baseline_threads, prd.gbps, prd.cores, rd.gbps,
		      rd.cores, pwr.gbps, pwr.cores, wr.gbps, wr.cores, bad_read, bad_write,
		      samples_json(prd.samples).c_str(), samples_json(rd.samples).c_str(),
		      samples_json(pwr.samples).c_str(), samples_json(wr.samples).c_str());
	std::fprintf(stderr, "%s\n", out);
	return out;
}

/*
 * One layout against one pair of files (in: pattern, out, both len bytes;
 * verify_fd reads out through the page cache): the baselines, then every
 * mode.  The first read of each mode is checked on the GPU (the device
 * buffer cleared before), the first write byte for byte (the out file
 * cleared before).
 */
void run_layout(Bench &b, const Layout &l, const std::string &file, int in_fd, int out_fd,
		int verify_fd, std::size_t len, const std::vector<std::uint64_t> &sums,
		const DeviceBuffer &dev, std::span<const Mode> modes, int reps)
{
	svmbatch::Registration reg = b.ctx.register_buffers(l.list);
	io_uring ring{};
	if (int ret = io_uring_queue_init(64, &ring, 0); ret < 0)
		fail_errno(-ret, "io_uring_queue_init");
	std::unique_ptr<io_uring, void (*)(io_uring *)> ring_owner(&ring, io_uring_queue_exit);
	svmbatch::FixedBuffers fixed = register_fixed(reg, ring);
	svmbatch::GpuMapping gpu = b.cuda.map(reg); /* pinned for the CUDA copies */
	Streams s;

	Rate prd = measure(reps, len, [&] { plain_io16(l, in_fd, len, false); });
	Rate pwr = measure(reps, len, [&] { plain_io16(l, out_fd, len, true); });
	/* The same pipelines with plain I/O, checked like the library's. */
	check(cudaMemset(dev.get(), 0, len), "cudaMemset");
	check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	plain_read_pipeline(l, in_fd, len, dev, s);
	std::size_t plain_bad_read = count_bad_device_chunks(dev, sums, len);
	zero_file(out_fd, len);
	plain_write_pipeline(l, out_fd, len, dev, s);
	std::size_t plain_bad_write = count_bad_chunks(verify_fd, len);
	b.failures += plain_bad_read || plain_bad_write;
	Rate pprd = measure(reps, len, [&] { plain_read_pipeline(l, in_fd, len, dev, s); });
	Rate ppwr = measure(reps, len, [&] { plain_write_pipeline(l, out_fd, len, dev, s); });
	b.rows.push_back(
		baseline_json(l, file, prd, pwr, pprd, ppwr, plain_bad_read, plain_bad_write));
	b.top.try_emplace(file + "/" + l.name + "/preadv16", prd.gbps);
	b.top.try_emplace(file + "/" + l.name + "/pwrite16", pwr.gbps);
	b.top.try_emplace(file + "/" + l.name + "/preadv16_pipeline", pprd.gbps);
	b.top.try_emplace(file + "/" + l.name + "/pwrite16_pipeline", ppwr.gbps);

	for (const Mode &m : modes) {
		svmbatch::WriterOptions o;
		o.threads = m.threads;
		o.parallelism = m.parallelism;
		o.clone_buffers = m.clone;
		auto pin0 = static_cast<long long>(svmbatch::process_pinned_bytes() / 1024);
		svmbatch::Reader reader(ring, fixed, o);
		svmbatch::Writer writer(ring, fixed, o);
		long long pin_added =
			static_cast<long long>(svmbatch::process_pinned_bytes() / 1024) - pin0;

		check(cudaMemset(dev.get(), 0, len), "cudaMemset");
		check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
		read_pipeline(l, reader, in_fd, len, dev, s);
		std::size_t bad_read = count_bad_device_chunks(dev, sums, len);
		zero_file(out_fd, len);
		write_pipeline(l, writer, out_fd, len, dev, s);
		std::size_t bad_write = count_bad_chunks(verify_fd, len);
		b.failures += bad_read || bad_write;

		const bool profile = b.profile.empty() && m.threads != 1 &&
				     m.parallelism == svmbatch::Parallelism::Auto;
		std::map<std::string, double> cpu0 = thread_cpu();
		Rate rd = measure(reps, len, [&] { read_pipeline(l, reader, in_fd, len, dev, s); });
		if (profile) {
			std::string threads;
			for (const auto &[name, sec] : thread_cpu()) {
				double d = sec - (cpu0.count(name) ? cpu0[name] : 0);
				if (d >= 0.01)
					threads += ", \"" + name + "\": " + std::to_string(d);
			}
			b.profile = R"({"what": "CPU seconds per thread (name/tid) over )";
			b.profile += std::to_string(reps) + " read pipelines, ";
			b.profile += l.name + ", " + file + ", " + m.name + "\"";
			b.profile += threads;
			b.profile += "}";
		}
		Rate wr =
			measure(reps, len, [&] { write_pipeline(l, writer, out_fd, len, dev, s); });
		Rate ro = measure(reps, len, [&] { read_only(l, reader, in_fd, len); });
		b.rows.push_back(
			row_json(l, file, m, reader, rd, wr, ro, pin_added, bad_read, bad_write));
		std::string key = file + "/" + l.name + "/" + m.name;
		b.top[key + "/read"] = rd.gbps;
		b.top[key + "/write"] = wr.gbps;
		b.top[key + "/reads_alone"] = ro.gbps;
	}
}

/// Pinned host memory <-> device, one 1 GiB copy, median of reps.
std::pair<double, double> copy_rates(const DeviceBuffer &dev, int reps)
{
	const std::size_t len = std::size_t{1} << 30;
	void *host = nullptr;
	check(cudaMallocHost(&host, len), "cudaMallocHost");
	std::unique_ptr<void, cudaError_t (*)(void *)> owner(host, cudaFreeHost);
	std::memset(host, 1, len);
	Rate h2d = measure(reps, len, [&] {
		check(cudaMemcpy(dev.get(), host, len, cudaMemcpyHostToDevice), "H2D");
	});
	Rate d2h = measure(reps, len, [&] {
		check(cudaMemcpy(host, dev.get(), len, cudaMemcpyDeviceToHost), "D2H");
	});
	return {h2d.gbps, d2h.gbps};
}

struct Args {
	std::string dir = "/var/tmp";
	std::string direct_dir;
	std::size_t gib = 4, direct_gib = 1;
	int reps = 5;
	std::string commit = "unknown";
};

Args parse(int argc, char **argv)
{
	Args a;
	for (int i = 1; i + 1 < argc; i += 2) {
		std::string_view k = argv[i];
		const char *v = argv[i + 1];
		if (k == "--dir")
			a.dir = v;
		else if (k == "--direct-dir")
			a.direct_dir = v;
		else if (k == "--gib")
			a.gib = std::strtoul(v, nullptr, 10);
		else if (k == "--direct-gib")
			a.direct_gib = std::strtoul(v, nullptr, 10);
		else if (k == "--reps")
			a.reps = std::atoi(v);
		else if (k == "--commit")
			a.commit = v;
		else
			throw std::invalid_argument("unknown option " + std::string(k));
	}
	return a;
}

double top_or(const Bench &b, const std::string &key)
{
	auto it = b.top.find(key);
	return it == b.top.end() ? 0 : it->second;
}

int run(const Args &a)
{
	Bench b;
	b.reps = a.reps;
	const std::size_t len = a.gib << 30;
	const std::vector<Mode> modes = {
		{"one_thread", 1, svmbatch::Parallelism::Auto, true},
		{"default", 0, svmbatch::Parallelism::Auto, true},
		{"async_workers", 0, svmbatch::Parallelism::AsyncWorkers, true},
		{"ring_per_thread_cloned", 0, svmbatch::Parallelism::RingPerThread, true},
		{"ring_per_thread_registered", 0, svmbatch::Parallelism::RingPerThread, false},
	};
	DeviceBuffer dev(len);
	auto [h2d, d2h] = copy_rates(dev, a.reps);
	std::fprintf(stderr, "h2d %.2f GB/s, d2h %.2f GB/s\n", h2d, d2h);

	std::vector<std::uint64_t> sums = expected_sums(len);
	{
		Fd in(make_file(a.dir, len, false)), out(make_file(a.dir, len, true));
		Layout small("2000x1MiB", 2000, MiB), large("64x64MiB", 64, 64 * MiB);
		run_layout(b, small, "page_cache", in.get(), out.get(), out.get(), len, sums, dev,
			   modes, a.reps);
		run_layout(b, large, "page_cache", in.get(), out.get(), out.get(), len, sums, dev,
			   modes, a.reps);
	}
	if (!a.direct_dir.empty()) {
		/* O_DIRECT: the same layouts, a smaller file on the disk, written
		 * through the page cache first and synced. */
		const std::size_t dlen = a.direct_gib << 30;
		Fd in_b(make_file(a.direct_dir, dlen, false)),
			out_b(make_file(a.direct_dir, dlen, true));
		if (::fsync(in_b.get()) || ::fsync(out_b.get()))
			fail_errno(errno, "fsync");
		std::string pin = "/proc/self/fd/" + std::to_string(in_b.get());
		std::string pout = "/proc/self/fd/" + std::to_string(out_b.get());
		Fd in(::open(pin.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
		Fd out(::open(pout.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
		if (in.get() < 0 || out.get() < 0)
			fail_errno(errno, "open O_DIRECT in " + a.direct_dir);
		const std::vector<Mode> direct_modes = {modes[0], modes[1]};
		Layout small("2000x1MiB", 2000, MiB);
		/* Reads check the GPU's copy; the writes are read back through the page cache. */
		run_layout(b, small, "o_direct", in.get(), out.get(), out_b.get(), dlen, sums, dev,
			   direct_modes, std::min(a.reps, 3));
	}

	const std::string pc = "page_cache/2000x1MiB/";
	const double rd = top_or(b, pc + "default/read");
	const double wr = top_or(b, pc + "default/write");
	const double ro = top_or(b, pc + "default/reads_alone");
	const double prd = top_or(b, pc + "preadv16");
	const double pwr = top_or(b, pc + "pwrite16");
	const double pprd = top_or(b, pc + "preadv16_pipeline");
	const double ppwr = top_or(b, pc + "pwrite16_pipeline");
	auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
	const std::string method =
		"{\"pipelines\": \"read: Reader (READ_FIXED) reads a batch (an eighth of the "
		"buffers) while cudaMemcpyAsync on 4 streams copies the batches before it to "
		"device memory; write: the copy of batch j + 1 to the buffers overlaps the "
		"Writer's WRITE_FIXED of batch j; the first run of each mode is checked (GPU "
		"checksums, the file byte for byte), then --reps timed runs, median\", "
		"\"plain_io16\": \"16 threads of preadv/pwritev into (from) the same buffers: "
		"alone (reads_alone/writes_alone: no GPU), and as the same pipelines, the batch "
		"read (written) by 16 threads in pieces of 1 MiB at most "
		"(read_pipeline/write_pipeline: the same copies)\", "
		"\"headline\": \"the library's defaults on 2000 x 1 MiB buffers, page cache; "
		"read_pipeline_over_preadv16_pipeline and write_pipeline_over_pwrite16_pipeline "
		"compare pipelines with the same GPU copies, read_over_preadv16 the reads alone "
		"(no GPU copies on either side)\", "
		"\"o_direct\": \"the same with O_DIRECT on --direct-dir, at most 3 reps\", "
		"\"h2d_d2h\": \"one 1 GiB cudaMemcpy from/to cudaMallocHost memory, median of "
		"--reps\"}";
	const std::string header =
		svmbatch::bench_meta::header("pipeline", a.commit, b.cuda.device_name(),
					     svmbatch::mode_name(b.ctx.mode()), method);
	std::string rows;
	for (const auto &r : b.rows)
		rows += (rows.empty() ? "\n    " : ",\n    ") + r;
	std::printf("{\n  %s,\n"
		    "  \"file_bytes\": %zu, \"file_dir\": %s, \"direct_dir\": %s, "
		    "\"reps\": %d,\n"
		    "  \"read_pipeline_GBps\": %.2f, \"preadv16_pipeline_GBps\": %.2f, "
		    "\"read_pipeline_over_preadv16_pipeline\": %.3f,\n"
		    "  \"write_pipeline_GBps\": %.2f, \"pwrite16_pipeline_GBps\": %.2f, "
		    "\"write_pipeline_over_pwrite16_pipeline\": %.3f,\n"
		    "  \"reads_alone_GBps\": %.2f, \"preadv16_GBps\": %.2f, "
		    "\"read_over_preadv16\": %.3f, \"pwrite16_GBps\": %.2f,\n"
		    "  \"h2d_GBps\": %.2f, \"d2h_GBps\": %.2f,\n"
		    "  \"verification_failures\": %d,\n"
		    "  \"thread_cpu\": %s,\n"
		    "  \"configurations\": [%s\n  ]\n}\n",
		    header.c_str(), len, svmbatch::json::quote(a.dir).c_str(),
		    svmbatch::json::quote(a.direct_dir).c_str(), a.reps, rd, pprd, ratio(rd, pprd),
		    wr, ppwr, ratio(wr, ppwr), ro, prd, ratio(ro, prd), pwr, h2d, d2h, b.failures,
		    b.profile.empty() ? "{}" : b.profile.c_str(), rows.c_str());
	return b.failures ? 1 : 0;
}

} // namespace

int main(int argc, char **argv)
{
	try {
		check(cudaSetDevice(0), "cudaSetDevice");
		check(cudaFree(nullptr), "context");
		return run(parse(argc, argv));
	} catch (const std::exception &e) {
		std::fprintf(stderr, "pipeline_bench: %s\n", e.what());
		return 2;
	}
}
