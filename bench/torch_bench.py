#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""svmbatch.torch against what a torch user does today (H100, torch 2.11):

- pin: N tensors from torch.empty, one svmbatch.torch.pin() against a
  per-tensor cudaHostRegister loop and against tensor.pin_memory();
- arena: 2000 tensors carved from an Arena against
  torch.empty(..., pin_memory=True), each in a fresh process; the headline
  includes the Arena's creation, where its pinning happens;
- load: a safetensors checkpoint (hot page cache: tmpfs) with
  load_safetensors(device="cuda") against safetensors.torch.load_file(
  device="cuda"), against a CPU load + .to("cuda"), and against 16 threads
  of plain os.preadv of the same file (no GPU copy); cold (caches dropped
  before every load) where --cold-dir is given and
  /proc/sys/vm/drop_caches is writable, else no cold figures at all.

bench/harness.py's rules: every loader gets the same warm-up (one load,
timed and reported as warmup_GBps but left out of the median), then
--reps repetitions (at least 5 unless --quick), interleaved: the
repetition loop outside, the loaders inside, rotated each repetition;
pin() and its alternatives, and the arena's processes, likewise.  Every
load, warm-up and cold ones included, is checked against a digest of an
untimed safetensors load_file(device="cuda") made before any loader ran.
JSON on stdout (bench/harness.py's metadata: the commit of the tree, the
machine, the mode, the method; the figures, a top-level "summary");
medians of --reps.  Exit 1 if a load of svmbatch differed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from page_cache import drop_caches  # noqa: E402

sbt = None  # svmbatch.torch, imported by main() (--help needs no build)


def interleaved_ms(methods, reps):
    """{name: (median ms, all ms)} of methods {name: (fn, teardown)}: reps
    repetitions, the methods rotated in each."""
    times = {name: [] for name in methods}
    for rep in range(reps):
        for name in harness.rotation(list(methods), rep):
            fn, teardown = methods[name]
            t0 = time.perf_counter()
            out = fn(None)
            times[name].append((time.perf_counter() - t0) * 1e3)
            if teardown:
                teardown(out)
    return {name: (statistics.median(t), t) for name, t in times.items()}


def bench_pin(n, nbytes, reps):
    tensors = [torch.empty(nbytes // 4) for _ in range(n)]
    for t in tensors:
        t.fill_(1)  # faulted in, as a user's tensors are
    cudart = torch.cuda.cudart()
    ranges = []

    def ours(_):
        p = sbt.pin(tensors)
        ranges.append(p.ranges)
        return p

    def loop(_):
        for t in tensors:
            rc = cudart.cudaHostRegister(t.data_ptr(), t.numel() * 4, 0)
            assert int(rc) == 0, rc

    def unloop(_):
        for t in tensors:
            cudart.cudaHostUnregister(t.data_ptr())

    m = interleaved_ms({"svmbatch": (ours, lambda p: p.close()), "loop": (loop, unloop),
                        "pin_memory": (lambda _: [t.pin_memory() for t in tensors], None)},
                       reps)
    (pin_ms, pin_all), (loop_ms, loop_all), (pm_ms, pm_all) = \
        m["svmbatch"], m["loop"], m["pin_memory"]
    return {
        "tensors": n, "tensor_bytes": nbytes, "ranges_after_merge": ranges[0],
        "svmbatch_pin_ms": pin_ms, "cudaHostRegister_loop_ms": loop_ms, "pin_memory_ms": pm_ms,
        "pin_memory_first_ms": pm_all[0],
        "speedup_vs_loop": loop_ms / pin_ms, "speedup_vs_pin_memory": pm_ms / pin_ms,
        "all_ms": {"svmbatch": pin_all, "loop": loop_all, "pin_memory": pm_all},
    }


ARENA_CHILD = r"""
import json, sys, time, torch
torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
n, nbytes, how = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
out = {}
if how == "arena":
    import svmbatch.torch as sbt
    t0 = time.perf_counter()
    arena = sbt.Arena(n * nbytes + (1 << 20))
    out["arena_create_ms"] = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    ts = [arena.empty((nbytes // 4,), torch.float32) for _ in range(n)]
    out["alloc_ms"] = (time.perf_counter() - t0) * 1e3
    out["pinned"] = all(t.is_pinned() for t in ts[:10])
else:
    t0 = time.perf_counter()
    ts = [torch.empty((nbytes // 4,), dtype=torch.float32, pin_memory=True) for _ in range(n)]
    out["alloc_ms"] = (time.perf_counter() - t0) * 1e3
    out["pinned"] = all(t.is_pinned() for t in ts[:10])
print(json.dumps(out))
"""


def bench_arena(n, nbytes, reps):
    def child(how):
        r = subprocess.run([sys.executable, "-c", ARENA_CHILD, str(n), str(nbytes), how],
                           check=True, capture_output=True, text=True)
        return json.loads(r.stdout.strip().splitlines()[-1])

    runs = {"arena": [], "pin_memory": []}
    for rep in range(reps):
        for how in harness.rotation(list(runs), rep):
            runs[how].append(child(how))
    arena, pm = runs["arena"], runs["pin_memory"]
    a_ms = statistics.median(r["alloc_ms"] for r in arena)
    create = statistics.median(r["arena_create_ms"] for r in arena)
    a_total = statistics.median(r["arena_create_ms"] + r["alloc_ms"] for r in arena)
    p_ms = statistics.median(r["alloc_ms"] for r in pm)
    assert all(r["pinned"] for r in arena + pm)
    # The headline includes the Arena's creation (its pinning), as
    # pin_memory=True's time includes its pinning.
    return {"tensors": n, "tensor_bytes": nbytes, "arena_alloc_ms": a_ms,
            "arena_create_ms": create, "arena_create_and_alloc_ms": a_total,
            "pin_memory_true_ms": p_ms,
            "speedup": p_ms / a_total, "speedup_alloc_only": p_ms / a_ms,
            "all_ms": {"arena_create": [r["arena_create_ms"] for r in arena],
                       "arena_alloc": [r["alloc_ms"] for r in arena],
                       "pin_memory_true": [r["alloc_ms"] for r in pm]}}


def make_checkpoint(path, gib):
    """gib GiB in bf16 matrices of 32 MiB and small fp32 biases: a model's shape."""
    big = 32 << 20
    n = (gib << 30) // big
    g = torch.Generator().manual_seed(1)
    tensors = {}
    base = torch.randint(-30000, 30000, (big // 2,), dtype=torch.int16, generator=g)
    for i in range(n):
        tensors[f"layers.{i}.weight"] = (base + i).view(torch.bfloat16).view(4096, 4096)
        tensors[f"layers.{i}.bias"] = torch.full((4096,), float(i))
    t0 = time.perf_counter()
    sbt.save_safetensors(tensors, path)
    return time.perf_counter() - t0, os.path.getsize(path)


def preadv16(path, size, threads=16, piece=64 << 20):
    dst = torch.empty(size, dtype=torch.uint8)
    dst.fill_(0)  # faulted in before the clock starts
    view = memoryview(dst.numpy())
    fd = os.open(path, os.O_RDONLY)
    offsets = list(range(0, size, piece))

    def work(k):
        for off in offsets[k::threads]:
            n = min(piece, size - off)
            got = os.preadv(fd, [view[off:off + n]], off)
            assert got == n

    t0 = time.perf_counter()
    ths = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    dt = time.perf_counter() - t0
    os.close(fd)
    return dt


def bench_load(path, reps, cold=False):
    """Each loader: one warm-up load, then reps timed loads, the same for
    all, interleaved (rotated each repetition); cold: the page cache
    dropped before every one of them.  Every load checked against the
    digest of an untimed safetensors load made first."""
    import safetensors.torch as st
    size = os.path.getsize(path)
    gb = size / 1e9
    out = {"file": path, "bytes": size, "cold": cold, "reps": reps}
    want = harness.digest(st.load_file(path, device="cuda"))
    torch.cuda.empty_cache()
    loaders = {
        "svmbatch": lambda: sbt.load_safetensors(path, device="cuda"),
        "safetensors_cuda": lambda: st.load_file(path, device="cuda"),
        "cpu_load_then_to_cuda": lambda: {k: v.to("cuda") for k, v in st.load_file(path).items()},
    }
    gbps = {name: [] for name in loaders}
    exact = {name: [] for name in loaders}
    order = []

    def timed(name):
        if cold and not drop_caches():
            raise RuntimeError("cold load: /proc/sys/vm/drop_caches refused")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        r = loaders[name]()
        torch.cuda.synchronize()
        gbps[name].append(gb / (time.perf_counter() - t0))
        exact[name].append(harness.digest(r) == want)
        del r
        torch.cuda.empty_cache()

    sbt.release_staging()  # svmbatch's warm-up sets its staging up again
    for rep in range(-1, reps):  # -1: the warm-up
        order.append(harness.rotation(list(loaders), max(rep, 0)))
        for name in order[-1]:
            timed(name)
    for name in loaders:
        out[f"{name}_warmup_GBps"] = gbps[name][0]
        out[f"{name}_GBps"] = statistics.median(gbps[name][1:])
    out["all_GBps"] = {name: v[1:] for name, v in gbps.items()}
    out["exact"] = {name: all(v) for name, v in exact.items()}
    out["byte_exact_vs_safetensors"] = out["exact"]["svmbatch"]
    out["order"] = order
    if not cold:
        out["preadv16_GBps"] = gb / statistics.median(preadv16(path, size) for _ in range(reps))
    out["speedup_vs_safetensors"] = out["svmbatch_GBps"] / out["safetensors_cuda_GBps"]
    return out


METHOD = {
    "pin": "per case, median of reps interleaved repetitions (methods rotated each one): "
           "svmbatch.torch.pin(tensors) (closed after each), a cudaHostRegister loop over the "
           "tensors (unregistered after each), [t.pin_memory() for t in tensors]; no warm-up "
           "for any of them",
    "arena": "each rep a fresh process (CUDA initialised before the clock), the two ways "
             "interleaved (rotated each rep): Arena(n * bytes) "
             "creation + n arena.empty() against n torch.empty(pin_memory=True); speedup = "
             "pin_memory_true_ms / arena_create_and_alloc_ms (medians over reps); "
             "speedup_alloc_only leaves the creation out",
    "load": "per loader (svmbatch load_safetensors(device='cuda'), safetensors load_file("
            "device='cuda'), load_file + .to('cuda')): one warm-up load (warmup_GBps), then "
            "reps timed loads, interleaved (loaders rotated each repetition), median; every "
            "load checked against the digest of an untimed safetensors load made before any "
            "loader; torch.cuda.synchronize() before and after each; "
            "hot: tmpfs, the page cache is never dropped; cold: /proc/sys/vm/drop_caches "
            "written before every load, the warm-up's too; preadv16: 16 threads of os.preadv "
            "into one CPU tensor, no GPU copy",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--gib", default="4,16")
    ap.add_argument("--cold-dir", default=None)
    ap.add_argument("--cold-gib", type=int, default=4)
    ap.add_argument("--reps", type=int, default=harness.MIN_REPS)
    ap.add_argument("--cold-reps", type=int, default=harness.MIN_REPS)
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: allows fewer than 5 reps and marks the JSON quick")
    args = ap.parse_args()
    harness.check_reps(args.reps, args.quick)
    harness.check_reps(args.cold_reps, args.quick, "--cold-reps")
    global sbt
    import svmbatch.torch as sbt
    torch.cuda.init()
    torch.empty(1, device="cuda")
    params = dict(vars(args))
    res = harness.metadata("torch", METHOD, params, quick=args.quick)
    res["reps"] = args.reps
    print("pin...", file=sys.stderr)
    res["pin"] = [bench_pin(2000, 64 << 10, args.reps), bench_pin(256, 16 << 20, args.reps)]
    print("arena...", file=sys.stderr)
    res["arena"] = bench_arena(2000, 64 << 10, args.reps)
    print(json.dumps(res["arena"]), file=sys.stderr)
    res["load"] = []
    for gib in [int(g) for g in args.gib.split(",")]:
        path = os.path.join(args.dir, f"svmbatch-bench-{gib}g.safetensors")
        print(f"load {gib} GiB...", file=sys.stderr)
        save_s, size = make_checkpoint(path, gib)
        r = bench_load(path, args.reps)
        r["save_GBps"] = size / 1e9 / save_s
        res["load"].append(r)
        os.unlink(path)
        print(json.dumps(r), file=sys.stderr)
    if args.cold_dir and drop_caches():
        path = os.path.join(args.cold_dir, "svmbatch-bench-cold.safetensors")
        print("cold load...", file=sys.stderr)
        make_checkpoint(path, args.cold_gib)
        res["load_cold"] = bench_load(path, args.cold_reps, cold=True)
        os.unlink(path)
        print(json.dumps(res["load_cold"]), file=sys.stderr)
    elif args.cold_dir:
        res["load_cold_absent"] = "/proc/sys/vm/drop_caches is not writable: no cold figures"
    first = res["load"][0]
    res["summary"] = {
        "load_GBps": first["svmbatch_GBps"],
        "safetensors_cuda_GBps": first["safetensors_cuda_GBps"],
        "load_speedup_vs_safetensors": first["speedup_vs_safetensors"],
        "preadv16_GBps": first["preadv16_GBps"],
        "pin_speedup": res["pin"][0]["speedup_vs_loop"],
        "arena_speedup_with_creation": res["arena"]["speedup"],
        "checkpoint_gib": int(args.gib.split(",")[0]),
    }
    if "load_cold" in res:
        res["summary"]["cold_load_GBps"] = res["load_cold"]["svmbatch_GBps"]
        res["summary"]["cold_safetensors_cuda_GBps"] = res["load_cold"]["safetensors_cuda_GBps"]
    json.dump(res, sys.stdout, indent=2)
    print()
    loads = res["load"] + ([res["load_cold"]] if "load_cold" in res else [])
    ok = all(r["byte_exact_vs_safetensors"] for r in loads)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
