#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Pinned host pools, every way a serving engine makes one, each in a
fresh process (CUDA initialised before the clock):

- torch: torch.empty(n, dtype=uint8, pin_memory=True);
- diy: mmap + MADV_HUGEPAGE, 16 threads of MADV_POPULATE_WRITE (the
  fastest first touch there is), then one cudaHostRegister of it all;
- cudaHostAlloc: the runtime's own pinned memory;
- arena: svmbatch.torch.Arena(n) (THP), and with huge_pages=False;
- arena_async: Arena(n, wait=False): the time to the first tensor (64 MiB
  carved and usable), then to ready.

Then H2D: 4 GiB copied from the middle of the pool to the GPU, median of
--h2d-reps.  And pin(): N CPU tensors pinned in one svmbatch.torch.pin()
against the floor, one cudaHostRegister of the same bytes as one range
(a contiguous buffer of N x size, faulted in), and against a per-tensor
cudaHostRegister loop; with pin()'s parts: the registration alone
(cuda=False) and the Python side (the walk of the storages).

Every figure is a median of at least 5 (bench/harness.py's rules):
pools of each way in fresh processes, the repetitions interleaved (the
repetition loop outside, the ways inside, rotated each repetition); pin()
and its floors, and the threaded registrations, interleaved likewise in
one process.

JSON on stdout (bench/harness.py's metadata: the commit of the tree, the
machine, the mode, the method) and a "summary".
"""

import argparse
import ctypes
import glob
import json
import mmap
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

GIB = 1 << 30
MADV_POPULATE_WRITE = 23

CHILD = r"""
import ctypes, json, mmap, os, sys, threading, time
import torch
torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
sys.path.insert(0, sys.argv[3])
from pool_bench import diy_pool, host_alloc, h2d_GBps
n, how = int(sys.argv[1]), sys.argv[2]
out = {"way": how, "bytes": n}
import svmbatch.torch as sbt
keep = None
t0 = time.perf_counter()
if how.startswith("arena"):
    if how == "arena_async":
        keep = sbt.Arena(n, wait=False)
        first = keep.empty(64 << 20, dtype=torch.uint8)
        out["first_tensor_ms"] = (time.perf_counter() - t0) * 1e3
        out["ready_at_first_tensor"] = keep.ready()
        del first
        keep.wait()
    else:
        keep = sbt.Arena(n, huge_pages=how != "arena_small_pages")
    out["ready_s"] = time.perf_counter() - t0
    # The copy's source carved from the arena (inside one chunk).
    view = keep.empty(min(4 << 30, n // 2), dtype=torch.uint8)
    out["pinned"] = view.is_pinned()
    ptr, n = view.data_ptr(), 2 * view.numel()
else:
    if how == "torch":
        keep = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        ptr = keep.data_ptr()
    elif how == "diy":
        keep, ptr = diy_pool(n)
    else:
        keep, ptr = host_alloc(n)
    out["ready_s"] = time.perf_counter() - t0
    ptr += n // 4  # the copy's source from the pool's middle
out["h2d_GBps"], out["h2d_all_GBps"] = h2d_GBps(ptr, n, int(sys.argv[4]))
print(json.dumps(out))
"""


def libc():
    return ctypes.CDLL(None, use_errno=True)


def populate(addr, length, threads=16):
    """Fault in [addr, addr + length) for writing, in threads slices (ctypes
    calls release the GIL, so the threads fault in parallel)."""
    madvise = libc().madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    huge = 2 << 20  # slices of whole huge pages
    step = -(-length // (threads * huge)) * huge
    errs = []

    def work(off):
        if madvise(addr + off, min(step, length - off), MADV_POPULATE_WRITE):
            errs.append(ctypes.get_errno())

    ts = [threading.Thread(target=work, args=(off,)) for off in range(0, length, step)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise OSError(errs[0], "madvise(MADV_POPULATE_WRITE)")


def diy_pool(n):
    """What a user writes: an anonymous mapping, THP, a parallel first
    touch, one cudaHostRegister."""
    import torch
    mm = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mm.madvise(mmap.MADV_HUGEPAGE)
    ptr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    populate(ptr, n)
    rc = torch.cuda.cudart().cudaHostRegister(ptr, n, 0)
    if int(rc) != 0:
        raise RuntimeError(f"cudaHostRegister: {rc}")
    return mm, ptr


def cudart():
    """The CUDA runtime torch loaded (its soname), for cudaHostAlloc,
    which torch.cuda.cudart() does not offer."""
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    import torch
    base = os.path.dirname(os.path.dirname(torch.__file__))
    names += glob.glob(os.path.join(base, "nvidia", "*", "lib", "libcudart.so*"))
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("no libcudart found beside torch")


def host_alloc(n):
    rt = cudart()
    rt.cudaHostAlloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint)
    p = ctypes.c_void_p()
    rc = rt.cudaHostAlloc(ctypes.byref(p), n, 0)
    if rc != 0:
        raise RuntimeError(f"cudaHostAlloc: {rc}")
    return rt, p.value


def h2d_GBps(ptr, n, reps):
    """GB/s of one copy of n / 2 bytes (at most 4 GiB) from ptr to a GPU
    tensor, median of reps after one warm-up."""
    import torch
    size = min(4 * GIB, n // 2)
    host = torch.frombuffer((ctypes.c_uint8 * size).from_address(ptr), dtype=torch.uint8)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    rates = []
    for _ in range(reps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        rates.append(size / 1e9 / (time.perf_counter() - t0))
    return statistics.median(rates[1:]), rates[1:]


def child(n, how, h2d_reps):
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-c", CHILD, str(n), how, here, str(h2d_reps)],
                       capture_output=True, text=True, check=False)
    if r.returncode:
        return {"way": how, "bytes": n, "error": (r.stderr or r.stdout)[-600:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_pools(gib, ways, reps, h2d_reps):
    """Each way in a fresh process per repetition, the repetitions
    interleaved (ways rotated each one), medians."""
    n = gib * GIB
    out = {"gib": gib, "reps": reps, "ways": {how: {"runs": []} for how in ways}, "order": []}
    for rep in range(reps):
        order = harness.rotation(list(ways), rep)
        out["order"].append(order)
        for how in order:
            out["ways"][how]["runs"].append(child(n, how, h2d_reps))
            print(json.dumps(out["ways"][how]["runs"][-1]), file=sys.stderr)
    for how, cell in out["ways"].items():
        ok = [r for r in cell["runs"] if "error" not in r]
        if ok:
            cell["ready_s"] = statistics.median(r["ready_s"] for r in ok)
            cell["h2d_GBps"] = statistics.median(r["h2d_GBps"] for r in ok)
            if how == "arena_async":
                cell["first_tensor_ms"] = statistics.median(r["first_tensor_ms"] for r in ok)
        if len(ok) < len(cell["runs"]):
            cell["errors"] = [r["error"] for r in cell["runs"] if "error" in r]
    return out


def interleaved_ms(methods, reps):
    """{name: (median ms, all ms)} of methods {name: (fn, teardown)}, the
    repetitions interleaved (rotated each one)."""
    times = {name: [] for name in methods}
    for rep in range(reps):
        for name in harness.rotation(list(methods), rep):
            fn, teardown = methods[name]
            t0 = time.perf_counter()
            r = fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
            if teardown:
                teardown(r)
    return {name: (statistics.median(t), t) for name, t in times.items()}


def bench_pin(count, nbytes, reps):
    import torch
    import svmbatch.torch as sbt
    from svmbatch.pinning import storage_buffers
    cr = torch.cuda.cudart()
    tensors = [torch.empty(nbytes, dtype=torch.uint8).fill_(1) for _ in range(count)]
    probe = sbt.pin(tensors)
    ranges = probe.ranges
    probe.close()

    # The floor: the same bytes as one range, faulted in.
    whole = torch.empty(count * nbytes, dtype=torch.uint8).fill_(1)

    def one():
        rc = cr.cudaHostRegister(whole.data_ptr(), whole.numel(), 0)
        assert int(rc) == 0, rc

    def loop():
        for t in tensors:
            rc = cr.cudaHostRegister(t.data_ptr(), nbytes, 0)
            assert int(rc) == 0, rc

    def unloop(_):
        for t in tensors:
            cr.cudaHostUnregister(t.data_ptr())

    m = interleaved_ms({
        "pin": (lambda: sbt.pin(tensors), lambda p: p.close()),
        "register_only": (lambda: sbt.pin(tensors, cuda=False), lambda p: p.close()),
        "python_walk": (lambda: storage_buffers(tensors), None),
        "floor": (one, lambda _: cr.cudaHostUnregister(whole.data_ptr())),
        "per_tensor_loop": (loop, unloop)}, reps)
    ours, ours_all = m["pin"]
    reg, walk = m["register_only"][0], m["python_walk"][0]
    floor, floor_all = m["floor"]
    per = m["per_tensor_loop"][0]
    return {"tensors": count, "tensor_bytes": nbytes, "ranges_after_merge": ranges,
            "pin_ms": ours, "pin_all_ms": ours_all, "register_only_ms": reg,
            "python_walk_ms": walk, "floor_one_register_ms": floor, "floor_all_ms": floor_all,
            "per_tensor_register_loop_ms": per, "pin_over_floor": ours / floor}


def bench_register_threads(gib, reps, pieces=8):
    """cudaHostRegister of a faulted-in gib GiB mapping in pieces calls,
    from 1, 2, 4 and 8 threads (the ctypes calls release the GIL): whether
    the driver registers in parallel.  Medians of reps interleaved
    repetitions."""
    rt = cudart()
    rt.cudaHostRegister.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint)
    rt.cudaHostUnregister.argtypes = (ctypes.c_void_p,)
    n = gib * GIB
    mm = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mm.madvise(mmap.MADV_HUGEPAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    populate(base, n)
    step = n // pieces
    out = {"gib": gib, "pieces": pieces, "reps": reps, "all_seconds": {}}
    errs = []

    def register(threads):
        def work(k):
            for j in range(k, pieces, threads):
                rc = rt.cudaHostRegister(base + j * step, step, 0)
                if rc:
                    errs.append(rc)

        t0 = time.perf_counter()
        ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out["all_seconds"].setdefault(str(threads), []).append(time.perf_counter() - t0)
        for j in range(pieces):
            rt.cudaHostUnregister(base + j * step)

    for rep in range(reps):
        for threads in harness.rotation([1, 2, 4, 8], rep):
            register(threads)
            if errs:
                out["error"] = f"cudaHostRegister: {errs[0]}"
                return out
    out["seconds"] = {k: statistics.median(v) for k, v in out["all_seconds"].items()}
    return out


METHOD = {
    "pools": "each way in a fresh process, CUDA initialised before the clock; ready_s: from "
             "the call to the pool usable as pinned memory (arena_async: until wait() "
             "returns; first_tensor_ms: until its first 64 MiB tensor is carved); diy: mmap, "
             "MADV_HUGEPAGE, 16 threads of MADV_POPULATE_WRITE, one cudaHostRegister; h2d: "
             "one 4 GiB copy to a GPU tensor (from the pool's middle; from an arena, from a "
             "4 GiB tensor carved from it), non_blocking, median of h2d_reps after one "
             "warm-up; ready_s medians over reps processes, the ways interleaved (rotated "
             "each repetition)",
    "register_threads": "a faulted-in THP mapping registered with cudaHostRegister in 8 "
                        "equal calls from 1, 2, 4 and 8 threads (ctypes, GIL released), "
                        "unregistered between; seconds for all 8 calls, median of pin_reps "
                        "interleaved repetitions",
    "pin": "in one process, median of reps interleaved repetitions (the methods rotated "
           "each one): svmbatch.torch.pin(tensors) (closed "
           "after each); pin(cuda=False) (the registration alone); the storage walk alone "
           "(Python side); the floor: one cudaHostRegister of a contiguous faulted-in buffer "
           "of the same total size (unregistered after each); a per-tensor cudaHostRegister "
           "loop",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", default="16,64", help="pool sizes; empty: pin() and threads only")
    ap.add_argument("--reps", type=int, default=harness.MIN_REPS,
                    help="processes per way, pools <= 16 GiB")
    ap.add_argument("--large-reps", type=int, default=harness.MIN_REPS,
                    help="processes per way, larger")
    ap.add_argument("--h2d-reps", type=int, default=harness.MIN_REPS)
    ap.add_argument("--pin-reps", type=int, default=7)
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: allows fewer than 5 reps and marks the JSON quick")
    ap.add_argument("--out", default=None, help="also write the JSON here as it grows")
    args = ap.parse_args()
    for what in ("reps", "large_reps", "h2d_reps", "pin_reps"):
        harness.check_reps(getattr(args, what), args.quick, "--" + what.replace("_", "-"))
    import torch
    torch.cuda.init()
    torch.empty(1, device="cuda")
    params = {k: v for k, v in vars(args).items() if k != "out"}
    res = harness.metadata("pool", METHOD, params, quick=args.quick)

    def save():
        harness.write_json(res, args.out)

    res["pin"] = []
    for count, nbytes in ((2000, 64 << 10), (256, 16 << 20)):
        res["pin"].append(bench_pin(count, nbytes, args.pin_reps))
        print(json.dumps(res["pin"][-1]), file=sys.stderr)
        save()
    res["register_threads"] = bench_register_threads(16, args.pin_reps)
    print(json.dumps(res["register_threads"]), file=sys.stderr)
    save()
    res["pools"] = []
    for gib in (int(g) for g in args.gib.split(",") if g):
        ways = ["diy", "arena", "arena_async", "cudaHostAlloc", "torch"]
        if gib <= 16:
            ways.insert(2, "arena_small_pages")
        reps = args.reps if gib <= 16 else args.large_reps
        res["pools"].append(bench_pools(gib, ways, reps, args.h2d_reps))
        save()
    pools = {p["gib"]: p["ways"] for p in res["pools"]}

    def ready(gib, way):
        return pools.get(gib, {}).get(way, {}).get("ready_s")

    small = res["pin"][0]
    res["summary"] = {
        "arena_16_s": ready(16, "arena"), "diy_16_s": ready(16, "diy"),
        "torch_16_s": ready(16, "torch"), "arena_64_s": ready(64, "arena"),
        "diy_64_s": ready(64, "diy"),
        "first_tensor_64_ms": pools.get(64, {}).get("arena_async", {}).get("first_tensor_ms"),
        "pin_ms": small["pin_ms"], "pin_floor_ms": small["floor_one_register_ms"],
        "pin_python_ms": small["python_walk_ms"],
        "targets": "arena <= 0.8x diy and <= 0.2x torch; first tensor of 64 GiB async <= 50 "
                   "ms; H2D from the arena >= 0.97x from cudaHostAlloc; pin <= 1.2x floor, "
                   "Python side < 1 ms for 2000 tensors"}
    s = res["summary"]
    if s["arena_16_s"] and s["diy_16_s"] and s["torch_16_s"]:
        s["arena_over_diy_16"] = s["arena_16_s"] / s["diy_16_s"]
        s["arena_over_torch_16"] = s["arena_16_s"] / s["torch_16_s"]
    save()
    json.dump(res, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
