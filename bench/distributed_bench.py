#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The distributed load on one node's GPUs, one rank per GPU, NCCL:

    torchrun --nproc-per-node 2 bench/distributed_bench.py --dir /var/tmp/dist-ckpt \\
        > bench/results/multi-gpu-h100x2-$(date +%F).json

A Llama-shaped checkpoint of --gib GiB in --shards shards (loaders_bench's
writer) on the disk of --dir, hot in the page cache (read once before the
first load), loaded --reps times by each loader, replicated (every rank
every tensor) and sliced --world ways (the attention and MLP matrices by
rows or columns as tensor parallelism splits them, the rest whole).  The
loaders (bench/harness.py's rules, in one process a rank since the ranks
share a process group): every loader --warmup-loads untimed loads first
(the same for all, in rotated order), then --reps interleaved repetitions
(the repetition loop outside, the loaders inside, rotated each
repetition), medians:

- share (a diagnostic, left out of the summary): each rank
  load_safetensors of its share of the tensors alone, nothing moved;
- h2d_GBps: pinned host-to-device copy rates, GPU 0 alone and all GPUs
  at once, medians of --reps copies;
- svmbatch: load_safetensors_distributed(group=WORLD[, shard_fn]), its
  agreed points on the world's gloo twin; svmbatch_nccl_agree: on the
  NCCL group itself (cpu_group=WORLD), each waiting for the GPU;
  svmbatch_round<N>M (--round-mib N,...): rounds of N MiB;
  svmbatch_threads<N> (--threads N,...): N I/O threads a rank;
  svmbatch_staging<N>M (--staging-mib N,...): a ring of N MiB a rank;
- single: each rank load_safetensors(device=its GPU) of the whole
  checkpoint (sliced: then its slices, made contiguous, the rest freed);
- instanttensor: safe_open(files, device=rank, process_group=WORLD,
  copy=False), each tensor cloned (sliced: its slice cloned); by default
  (O_DIRECT on a disk) and with backend=URING_BUFFERED (the page cache);
- fastsafetensors: SafeTensorsFileLoader(WORLD, nogds=True), the files
  dealt to the ranks, get_tensor / get_sharded, each result cloned; by
  default (O_DIRECT) and with FASTSAFETENSORS_ODIRECT=0 (buffered).

A load's time is the slowest rank's, from a barrier to every tensor on its
GPU (torch.cuda.synchronize(), then a barrier).  Every load, warm-up
loads included, is checked on the GPU against a digest of
safetensors.torch.load_file(device=its GPU) of the same files (sliced as
the case slices), an untimed load that warms no loader's state.  Rank 0
prints one JSON document (bench/harness.py's metadata: the commit of the
tree, the machine, the mode, the method): the GPUs and their topology
(nvidia-smi topo -m), each loader's times and a summary (the median load,
and svmbatch's speed-up over single and over the best peer row, naming
the rows it divides; rows that failed or differed are listed as
excluded).  A loader that fails is recorded with its error, not fatal;
exit 1 if a load of svmbatch failed or differed.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from loaders_bench import write_checkpoint  # noqa: E402

# Tensor parallelism's split of a Llama layer: column-parallel matrices
# by rows (dim 0), row-parallel ones by columns (dim 1).
BY_ROWS = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight",
           "up_proj.weight", "embed_tokens.weight", "lm_head.weight")
BY_COLUMNS = ("o_proj.weight", "down_proj.weight")


def shard_fn(name, shape, rank, world):
    dim = 0 if name.endswith(BY_ROWS) else 1 if name.endswith(BY_COLUMNS) else None
    if dim is None or len(shape) != 2 or shape[dim] % world:
        return None
    n = shape[dim] // world
    return dim, rank * n, n


def digest(t, weights):
    b = t.detach().contiguous().view(-1).view(torch.uint8)
    s = 0
    for i in range(0, b.numel(), 1 << 26):
        c = b[i:i + (1 << 26)].to(torch.int32)
        s += int((c * weights[:c.numel()]).sum())
    return [str(t.dtype), list(t.shape), s]


def part(name, t, sliced, rank, world):
    s = shard_fn(name, tuple(t.shape), rank, world) if sliced else None
    return t.clone() if s is None else t.narrow(*s).clone()


def load_svmbatch(files, sliced, rank, world, device, **kw):
    import svmbatch.torch as sbt
    return sbt.load_safetensors_distributed(files, device, shard_fn=shard_fn if sliced else None,
                                            **kw)


def load_svmbatch_nccl_agree(files, sliced, rank, world, device):
    """Agreed points through the NCCL group itself, each waiting for the
    GPU (what the loader did before it agreed through a gloo group)."""
    return load_svmbatch(files, sliced, rank, world, device, cpu_group=dist.group.WORLD)


def svmbatch_rounds(mib):
    """The loader with rounds of mib MiB."""
    return lambda *a: load_svmbatch(*a, round_bytes=mib << 20)


def svmbatch_threads(n):
    """The loader with n I/O threads a rank."""
    return lambda *a: load_svmbatch(*a, threads=n)


def svmbatch_staging(mib):
    """The loader with a ring of mib MiB a rank."""
    return lambda *a: load_svmbatch(*a, staging_bytes=mib << 20)


def header_entries(path):
    """The tensors a safetensors file's header lists, in file order."""
    from svmbatch.safetensors_format import read_header
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_header(fd, path).entries
    finally:
        os.close(fd)


def load_share(files, sliced, rank, world, device):
    """A diagnostic, not a loader: each rank load_safetensors of its share
    of the tensors (dealt as the distributed plan deals pieces, to the rank
    with the fewest bytes), nothing moved between ranks: what reading the
    shares alone costs."""
    import svmbatch.torch as sbt
    load = [0] * world
    mine = set()
    for f in files:
        for e in header_entries(f):
            r = min(range(world), key=lambda r: (load[r], r))
            load[r] += e.nbytes
            if r == rank:
                mine.add(e.name)
    return sbt.load_safetensors(files, device=device, names=sorted(mine))


def h2d_rates(rank, world, device, gib=4, reps=5):
    """Host-to-device copy rates from pinned memory, GB/s: GPU 0 alone, and
    every GPU at once (their sum): whether the GPUs share the host's
    links.  Medians of reps copies, interleaved, after one untimed copy
    each."""
    src = torch.empty(gib << 30, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(gib << 30, dtype=torch.uint8, device=device)
    rates = {"gpu0_alone": [], "all_gpus": []}
    for rep in range(-1, reps):
        for who in harness.rotation(list(rates), max(rep, 0)):
            dist.barrier()
            t0 = time.perf_counter()
            if who == "all_gpus" or rank == 0:
                dst.copy_(src, non_blocking=True)
                torch.cuda.synchronize()
            dt = torch.tensor([time.perf_counter() - t0], device=device)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            moved = (gib << 30) * (world if who == "all_gpus" else 1)
            if rep >= 0:
                rates[who].append(moved / float(dt) / 1e9)
    out = {who: round(harness.median(r), 2) for who, r in rates.items()}
    out["all_GBps"] = rates
    del src, dst
    torch.cuda.empty_cache()
    return out


def load_single(files, sliced, rank, world, device):
    import svmbatch.torch as sbt
    whole = sbt.load_safetensors(files, device=device)
    if not sliced:
        return whole
    out = {}
    for name in list(whole):
        t = whole.pop(name)
        s = shard_fn(name, tuple(t.shape), rank, world)
        out[name] = t if s is None else t.narrow(*s).contiguous()
    return out


def load_reference(files, sliced, rank, world, device):
    """safetensors' own load, sliced as the case slices: the digest's
    source, a loader of none of the rows."""
    from safetensors.torch import load_file
    out = {}
    for f in files:
        for name, t in load_file(f, device=str(device)).items():
            s = shard_fn(name, tuple(t.shape), rank, world) if sliced else None
            out[name] = t if s is None else t.narrow(*s).contiguous()
    return out


def load_instanttensor(files, sliced, rank, world, device, buffered=False):
    import instanttensor
    out = {}
    # copy=False: views of its buffer, cloned once by part() as the others.
    # Its default reads disk files with O_DIRECT, past the page cache;
    # buffered: its io_uring path through the page cache.
    kw = {"backend": instanttensor.Backend.URING_BUFFERED} if buffered else {}
    with instanttensor.safe_open(files, framework="pt", device=device.index,
                                 process_group=dist.group.WORLD, copy=False, **kw) as f:
        for name, t in f.tensors():
            out[name] = part(name, t, sliced, rank, world)
    return out


def load_fastsafetensors(files, sliced, rank, world, device):
    from fastsafetensors import SafeTensorsFileLoader
    loader = SafeTensorsFileLoader(dist.group.WORLD, device, nogds=True)
    try:
        loader.add_filenames({r: files[r::world] for r in range(world)})
        fb = loader.copy_files_to_device()
        try:
            out = {}
            for f in files:
                for e in header_entries(f):
                    s = shard_fn(e.name, tuple(e.shape), rank, world) if sliced else None
                    t = fb.get_tensor(e.name) if s is None else fb.get_sharded(e.name, s[0])
                    out[e.name] = t.clone()
            return out
        finally:
            fb.close()
    finally:
        loader.close()


def load_fastsafetensors_buffered(files, sliced, rank, world, device):
    """fastsafetensors with buffered reads (its default opens disk files
    with O_DIRECT, past the page cache)."""
    old = os.environ.get("FASTSAFETENSORS_ODIRECT")
    os.environ["FASTSAFETENSORS_ODIRECT"] = "0"
    try:
        return load_fastsafetensors(files, sliced, rank, world, device)
    finally:
        if old is None:
            del os.environ["FASTSAFETENSORS_ODIRECT"]
        else:
            os.environ["FASTSAFETENSORS_ODIRECT"] = old


def load_instanttensor_buffered(files, sliced, rank, world, device):
    return load_instanttensor(files, sliced, rank, world, device, buffered=True)


LOADERS = {"svmbatch": load_svmbatch, "svmbatch_nccl_agree": load_svmbatch_nccl_agree,
           "single": load_single, "share": load_share,
           "instanttensor": load_instanttensor,
           "instanttensor_buffered": load_instanttensor_buffered,
           "fastsafetensors": load_fastsafetensors,
           "fastsafetensors_buffered": load_fastsafetensors_buffered}
DIAGNOSTICS = ("share",)  # not loaders: checked for the tensors they return, no summary
PEERS = ("instanttensor", "instanttensor_buffered", "fastsafetensors",
         "fastsafetensors_buffered")


def timed(load, files, sliced, rank, world, device):
    dist.barrier()
    t0 = time.perf_counter()
    out = load(files, sliced, rank, world, device)
    torch.cuda.synchronize()
    dist.barrier()
    dt = torch.tensor([time.perf_counter() - t0], device=device)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    return float(dt), out


def agreed(ok, device):
    """Whether every rank says ok."""
    flag = torch.tensor([0 if ok else 1], device=device)
    dist.all_reduce(flag)
    return int(flag) == 0


def topology():
    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                              timeout=30, check=False).stdout
    except OSError as e:
        return f"nvidia-smi: {e}"


def profile(files, rank, world, device):
    """Where a replicated svmbatch load spends each rank's main thread."""
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    dist.barrier()
    t0 = time.perf_counter()
    prof.enable()
    out = load_svmbatch(files, False, rank, world, device)
    torch.cuda.synchronize()
    prof.disable()
    dt = time.perf_counter() - t0
    del out
    torch.cuda.empty_cache()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)
    for r in range(world):
        dist.barrier()
        if r == rank:
            print(f"--- rank {rank}: profiled load {dt:.3f} s\n{text.getvalue()}", file=sys.stderr,
                  flush=True)


METHOD = ("one rank per GPU (torchrun, NCCL); a load's time is the slowest rank's, from a "
          "barrier to every tensor on its GPU (torch.cuda.synchronize(), then a barrier); "
          "every loader warmup_loads untimed loads first (rotated order), then reps "
          "interleaved repetitions (loaders rotated each repetition), medians; every load "
          "checked on each rank against a digest of safetensors' load_file of the same files "
          "(sliced as the case slices), untimed, before any loader; hot: every shard read once "
          "before the first load; vs_single = single's median / svmbatch's, vs_best_peer = "
          "the best exact peer row's median / svmbatch's")


def run_case(names, files, sliced, rank, world, device, weights, args):
    """Every loader of names on one case: warm-up loads, then interleaved
    repetitions; each load checked against safetensors' digest."""
    ref = load_reference(files, sliced, rank, world, device)
    ref = {k: digest(v, weights) for k, v in ref.items()}
    torch.cuda.empty_cache()
    cells = {name: {"times_s": [], "warmup_s": [], "exact_each": []} for name in names}

    def one(name, bucket):
        cell = cells[name]
        if "error" in cell:
            return
        try:
            dt, out = timed(LOADERS[name], files, sliced, rank, world, device)
            want = ref if name not in DIAGNOSTICS else {k: ref[k] for k in out if k in ref}
            exact = sorted(out) == sorted(want) and \
                all(digest(out[k], weights) == want[k] for k in want)
            del out
            torch.cuda.empty_cache()
            cell[bucket].append(dt)
            cell["exact_each"].append(agreed(exact, device))
        except Exception as e:  # recorded: a peer's API may differ
            cell["error"] = f"{type(e).__name__}: {e}"[:400]

    order = []
    for w in range(args.warmup_loads):
        for name in harness.rotation(names, w):
            one(name, "warmup_s")
    for rep in range(args.reps):
        order.append(harness.rotation(names, rep))
        for name in order[-1]:
            one(name, "times_s")
    for cell in cells.values():
        checks = cell["exact_each"]
        cell["exact"] = all(checks) if checks else None
        if cell["times_s"]:
            cell["median_s"] = statistics.median(cell["times_s"])
    return cells, order


def summarize(cells):
    """svmbatch against single and the best peer row: a function of the
    rows alone; rows that failed, differed or lack reps are excluded,
    named."""
    excluded = {}
    for k, c in cells.items():
        if "error" in c:
            excluded[k] = f"failed: {c['error']}"
        elif c.get("exact") is not True:
            excluded[k] = "inexact: a load differed from safetensors' digest"
    med = {k: c["median_s"] for k, c in cells.items() if "median_s" in c and k not in excluded}
    peers = {k: med[k] for k in PEERS if k in med}
    best = min(peers, key=peers.get) if peers else None
    mine = med.get("svmbatch")
    return {
        "svmbatch_s": mine, "svmbatch_status": excluded.get("svmbatch", "ok"),
        "single_s": med.get("single"),
        "vs_single": med["single"] / mine if mine and "single" in med else None,
        "vs_single_rows": {"num": "svmbatch", "den": "single"},
        "best_peer": best, "best_peer_s": peers.get(best),
        "vs_best_peer": peers[best] / mine if best and mine else None,
        "vs_best_peer_rows": {"num": "svmbatch", "den": best},
        "candidates": sorted(peers), "excluded": excluded,
        "target": ">= 1.6x single, >= 1.15x the best peer"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/svmbatch-dist-ckpt")
    ap.add_argument("--gib", type=int, default=16)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--reps", type=int, default=harness.MIN_REPS)
    ap.add_argument("--warmup-loads", type=int, default=1,
                    help="untimed loads of every loader before the timed ones")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: allows --reps < 5 and marks the JSON quick")
    ap.add_argument("--loaders", default=",".join(LOADERS))
    ap.add_argument("--round-mib", default="",
                    help="also svmbatch with rounds of these MiB (comma-separated): "
                         "loaders svmbatch_round<N>M")
    ap.add_argument("--threads", default="",
                    help="also svmbatch with these I/O threads a rank (comma-separated): "
                         "loaders svmbatch_threads<N>")
    ap.add_argument("--staging-mib", default="",
                    help="also svmbatch with rings of these MiB a rank (comma-separated): "
                         "loaders svmbatch_staging<N>M")
    ap.add_argument("--profile", action="store_true",
                    help="then one replicated svmbatch load under cProfile on every rank, "
                         "its top functions printed to stderr (not timed)")
    ap.add_argument("--out", default=None, help="also write the JSON here (rank 0)")
    args = ap.parse_args()
    harness.check_reps(args.reps, args.quick)
    names = args.loaders.split(",")
    for mib in filter(None, args.round_mib.split(",")):
        LOADERS[f"svmbatch_round{int(mib)}M"] = svmbatch_rounds(int(mib))
        names.append(f"svmbatch_round{int(mib)}M")
    for mib in filter(None, args.staging_mib.split(",")):
        LOADERS[f"svmbatch_staging{int(mib)}M"] = svmbatch_staging(int(mib))
        names.append(f"svmbatch_staging{int(mib)}M")
    for n in filter(None, args.threads.split(",")):
        LOADERS[f"svmbatch_threads{int(n)}"] = svmbatch_threads(int(n))
        names.append(f"svmbatch_threads{int(n)}")

    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=10))
    world = dist.get_world_size()
    if rank == 0:
        _, files, _ = write_checkpoint(args.dir, "single", args.gib, args.shards)
        for f in files:  # hot: the page cache holds every shard
            with open(f, "rb") as fh:
                while fh.read(64 << 20):
                    pass
    dist.barrier()
    files = sorted(os.path.join(args.dir, n) for n in os.listdir(args.dir)
                   if n.endswith(".safetensors"))
    weights = torch.arange(1 << 26, device=device, dtype=torch.int32) % 251 + 1
    results, orders, summary = {}, {}, {}
    for sliced in (False, True):
        case = f"sliced{world}" if sliced else "replicated"
        results[case], orders[case] = run_case(names, files, sliced, rank, world, device,
                                               weights, args)
        summary[case] = summarize(results[case])
    if args.profile:
        profile(files, rank, world, device)
    h2d = h2d_rates(rank, world, device, reps=args.reps)
    bad = [f"{case}/{k}: {c.get('error', 'inexact')}" for case, cells in results.items()
           for k, c in cells.items()
           if k.startswith("svmbatch") and ("error" in c or c.get("exact") is not True)]
    if rank == 0:
        gib = sum(os.path.getsize(f) for f in files) / (1 << 30)
        params = {k: v for k, v in vars(args).items() if k != "out"}
        doc = harness.metadata("distributed", METHOD, params, quick=args.quick)
        doc.update({
            "world": world, "gpus": [torch.cuda.get_device_name(i) for i in range(world)],
            "topology": topology(), "files": len(files), "gib": round(gib, 3),
            "page_cache": "hot", "reps": args.reps, "warmup_loads": args.warmup_loads,
            "h2d_GBps": h2d, "results": results, "order": orders, "summary": summary,
            "ours_failures": bad})
        text = json.dumps(doc, indent=1)
        print(text)
        if args.out:
            harness.write_json(doc, args.out)
        if bad:
            print(f"svmbatch failed or differed: {bad}", file=sys.stderr)
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
