#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""svmbatch's safetensors loader against every peer a serving engine offers
(vLLM/SGLang --load-format), on the same files in one run:

- svmbatch.torch.load_safetensors(device="cuda");
- instanttensor's safe_open, default backend (MMAP on tmpfs, O_DIRECT
  URING/AIO on a disk) and URING_BUFFERED;
- fastsafetensors' fastsafe_open(nogds=True);
- runai-model-streamer's SafetensorsStreamer (CPU tensors, then .to(cuda),
  as vLLM's loader does);
- safetensors.torch.load_file(device="cuda").

Layouts: a Llama-shaped checkpoint (bf16 embeddings, attention and MLP
matrices, fp32 norms) of --gib GiB in one file, and of --sharded-gib GiB
in --shards shards with a Hugging Face index, each on tmpfs and on ext4 hot
in the page cache (written, synced, read once).  Each loader runs in a
fresh process (torch and CUDA initialised and the loader imported before
the clock starts): its first load, timed from the call to the last tensor
on the GPU (torch.cuda.synchronize()), then --reps loads whose median is
the steady figure.  Every load is checked tensor by tensor against a
digest of safetensors' own load of the same files, on the GPU.

Cold (--cold-gib, ext4, caches dropped before each load, a fresh process
each): svmbatch's io="auto"/"direct"/"buffered", instanttensor's default
(O_DIRECT) and a plain O_DIRECT sequential read of the same file by dd.

Also: svmbatch's staging parameters swept on the tmpfs files (--sweep),
its io= modes beside its default (--variants), and the first load's setup
(the staging ring) timed alone in a fresh process.

JSON on stdout (benchmark, commit, date, machine, mode, method, cells,
summary); progress on stderr.  Exit 1 if any load differed.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

from page_cache import drop_caches

BENCHMARK = "loaders"
METHOD = ("each loader in a fresh process per cell, CUDA and imports before the clock; first = "
          "the first load from the call to torch.cuda.synchronize() after the last tensor; "
          "steady = median of --reps later loads in that process; GB/s = checkpoint bytes "
          "(headers included) / seconds; every load's tensors checked against a digest of "
          "safetensors' load on the GPU; hot ext4 = written, synced, read once; cold = "
          "/proc/sys/vm/drop_caches before each load, one load per fresh process")

# Llama-3-8B's shapes: what a 4-16 GiB checkpoint of a served model is made of.
HIDDEN, INTER, KV, VOCAB = 4096, 14336, 1024, 32000


def layer_specs(i):
    p = f"model.layers.{i}."
    return [(p + "input_layernorm.weight", (HIDDEN,), "float32"),
            (p + "self_attn.q_proj.weight", (HIDDEN, HIDDEN), "bfloat16"),
            (p + "self_attn.k_proj.weight", (KV, HIDDEN), "bfloat16"),
            (p + "self_attn.v_proj.weight", (KV, HIDDEN), "bfloat16"),
            (p + "self_attn.o_proj.weight", (HIDDEN, HIDDEN), "bfloat16"),
            (p + "post_attention_layernorm.weight", (HIDDEN,), "float32"),
            (p + "mlp.gate_proj.weight", (INTER, HIDDEN), "bfloat16"),
            (p + "mlp.up_proj.weight", (INTER, HIDDEN), "bfloat16"),
            (p + "mlp.down_proj.weight", (HIDDEN, INTER), "bfloat16")]


def model_specs(gib):
    """(name, shape, dtype) of a Llama-shaped model of about gib GiB."""
    def nbytes(spec):
        n = 1
        for d in spec[1]:
            n *= d
        return n * (4 if spec[2] == "float32" else 2)
    ends = [("model.embed_tokens.weight", (VOCAB, HIDDEN), "bfloat16"),
            ("model.norm.weight", (HIDDEN,), "float32"),
            ("lm_head.weight", (VOCAB, HIDDEN), "bfloat16")]
    per_layer = sum(nbytes(s) for s in layer_specs(0))
    layers = max(1, round(((gib << 30) - sum(nbytes(s) for s in ends)) / per_layer))
    specs = [ends[0]] + [s for i in range(layers) for s in layer_specs(i)] + ends[1:]
    return specs, [nbytes(s) for s in specs]


def write_checkpoint(directory, gib, shards):
    """A Llama-shaped checkpoint written by safetensors itself: one file
    model.safetensors, or shards model-0000k-of-0000n.safetensors and
    model.safetensors.index.json split by size, as save_pretrained does.
    Returns the path a loader is given and the list of files."""
    import torch
    from safetensors.torch import save_file
    os.makedirs(directory, exist_ok=True)
    specs, sizes = model_specs(gib)
    g = torch.Generator().manual_seed(gib)
    base = torch.randint(-30000, 30000, (max(sizes) // 2,), dtype=torch.int16, generator=g)
    total = sum(sizes)
    groups, acc = [[]], 0
    for spec, n in zip(specs, sizes):
        if acc >= total * len(groups) / shards and len(groups) < shards:
            groups.append([])
        groups[-1].append(spec)
        acc += n
    files, weight_map = [], {}
    for k, group in enumerate(groups):
        name = ("model.safetensors" if shards == 1 else
                f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors")
        tensors = {}
        for j, (tname, shape, dtype) in enumerate(group):
            n = 1
            for d in shape:
                n *= d
            words = n * (2 if dtype == "float32" else 1)
            raw = (base[:words] + (k * 131 + j)).clone()
            tensors[tname] = raw.view(getattr(torch, dtype)).view(shape)
            weight_map[tname] = name
        save_file(tensors, os.path.join(directory, name), metadata={"format": "pt"})
        files.append(os.path.join(directory, name))
        del tensors
    if shards == 1:
        return files[0], files
    index = os.path.join(directory, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    return index, files


# The child: one loader in a fresh process.  argv: loader, path, files
# (JSON list), reps, digests file or "", extra (JSON).
CHILD = r"""
import gc, json, os, statistics, sys, time
import torch
torch.cuda.init()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
loader, path, files, reps, digests, extra = (sys.argv[1], sys.argv[2], json.loads(sys.argv[3]),
                                             int(sys.argv[4]), sys.argv[5], json.loads(sys.argv[6]))
dev = torch.device("cuda", 0)

if loader == "svmbatch":
    import svmbatch.torch as sbt
    def load():
        return sbt.load_safetensors(path, dev, **extra)
elif loader.startswith("instanttensor"):
    import instanttensor
    kw = {}
    if loader == "instanttensor_uring_buffered":
        kw["backend"] = instanttensor.Backend.URING_BUFFERED
    def load():
        out = {}
        with instanttensor.safe_open(files, framework="pt", device=0, **kw) as f:
            for name, t in f.tensors():
                out[name] = t
        return out
elif loader == "fastsafetensors":
    from fastsafetensors import fastsafe_open
    def load():
        with fastsafe_open(files, device="cuda:0", nogds=True) as f:
            return {k: f.get_tensor(k) for k in f.keys()}
elif loader == "runai":
    from runai_model_streamer import SafetensorsStreamer
    def load():
        out = {}
        with SafetensorsStreamer() as s:
            s.stream_files(files)
            for name, t in s.get_tensors():
                out[name] = t.to(dev)
        return out
elif loader == "safetensors":
    from safetensors.torch import load_file
    def load():
        out = {}
        for f in files:
            out.update(load_file(f, device="cuda:0"))
        return out
else:
    raise SystemExit(f"no loader {loader}")

WEIGHTS = torch.arange(1 << 26, device=dev, dtype=torch.int32) % 251 + 1

def digest(t):
    b = t.detach().contiguous().view(-1).view(torch.uint8)
    s = 0
    for i in range(0, b.numel(), 1 << 26):
        c = b[i:i + (1 << 26)].to(torch.int32)
        s += int((c * WEIGHTS[:c.numel()]).sum())
    return [str(t.dtype), list(t.shape), b.numel(), s]

def timed():
    gc.collect()
    t0 = time.perf_counter()
    out = load()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out

first, out = timed()
if digests == "make":
    print(json.dumps({"digests": {k: digest(v) for k, v in out.items()}}))
    sys.exit(0)
ref = json.load(open(digests)) if digests else None
def check(out):
    if ref is None:
        return None
    return sorted(out) == sorted(ref) and all(digest(out[k]) == ref[k] for k in ref)
exact = check(out)
del out
steady = []
# A loader slower than 2 s a load (a disk, not the page cache) gets one
# steady load: its figure is the disk's, and device time is scarce.
for _ in range(reps if first < 2.0 else min(reps, 1)):
    dt, out = timed()
    steady.append(dt)
    if exact:
        exact = check(out)
    del out
print(json.dumps({"first_s": first, "steady_s": steady, "exact": exact}))
"""


def child(loader, path, files, reps, digests, extra=None, timeout=900):
    r = subprocess.run([sys.executable, "-c", CHILD, loader, path, json.dumps(files), str(reps),
                        digests, json.dumps(extra or {})],
                       capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:400]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def read_once(files):
    """Bring files into the page cache (the 'hot' of hot ext4)."""
    buf = bytearray(64 << 20)
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass


def run_cell(name, path, files, loaders, reps, slow_reps, digests):
    size = sum(os.path.getsize(f) for f in files)
    cell = {"cell": name, "path": path, "files": len(files), "bytes": size, "loaders": {}}
    for loader, extra in loaders:
        key = loader if not extra else loader + ":" + ",".join(f"{k}={v}" for k, v in extra.items())
        r = child(loader, path, files, slow_reps if loader in ("runai", "safetensors") else reps,
                  digests, extra)
        if "first_s" in r:
            r["first_GBps"] = size / 1e9 / r["first_s"]
            r["steady_GBps"] = size / 1e9 / statistics.median(r["steady_s"]) if r["steady_s"] \
                else None
        cell["loaders"][key] = r
        print(f"{name} {key}: " + (f"first {r['first_GBps']:.1f} GB/s, steady "
                                  f"{r['steady_GBps'] or 0:.1f} GB/s, exact {r['exact']}"
                                  if "first_s" in r else r["error"]), file=sys.stderr, flush=True)
    ours = cell["loaders"].get("svmbatch", {})
    peers = {k: v for k, v in cell["loaders"].items()
             if not k.startswith("svmbatch") and k != "safetensors" and "first_GBps" in v}
    summary = {"svmbatch_first_GBps": ours.get("first_GBps"),
               "svmbatch_steady_GBps": ours.get("steady_GBps")}
    for what in ("first", "steady"):
        best = max(peers, key=lambda k: peers[k][f"{what}_GBps"] or 0, default=None)
        summary[f"best_peer_{what}"] = best
        summary[f"best_peer_{what}_GBps"] = peers[best][f"{what}_GBps"] if best else None
        mine = ours.get(f"{what}_GBps")
        summary[f"ratio_{what}"] = mine / peers[best][f"{what}_GBps"] if best and mine else None
    cell["summary"] = summary
    return cell


SWEEP = r"""
import json, statistics, sys, time, torch
import svmbatch.torch as sbt
torch.empty(1, device="cuda"); torch.cuda.synchronize()
path, configs = sys.argv[1], json.loads(sys.argv[2])
out = []
for c in configs:
    ts = []
    for _ in range(6):
        t0 = time.perf_counter()
        r = sbt.load_safetensors(path, "cuda", **c)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
        del r
    sbt.release_staging()
    out.append(dict(c, first_s=ts[0], steady_s=statistics.median(ts[1:])))
print(json.dumps(out))
"""

SETUP = r"""
import json, sys, time, torch
torch.empty(1, device="cuda"); torch.cuda.synchronize()
import svmbatch, svmbatch.torch as sbt
from svmbatch import loading
from svmbatch.arena import Arena
nbytes = int(sys.argv[1])
t0 = time.perf_counter()
arena = Arena(nbytes, cuda=True)
t1 = time.perf_counter()
reader = svmbatch._svmbatch.Reader(arena.registration, threads=0)
t2 = time.perf_counter()
reader.close(); arena.close()
t3 = time.perf_counter()
arena = Arena(nbytes, cuda=False)
t4 = time.perf_counter()
arena.close()
print(json.dumps({"ring_bytes": nbytes, "arena_cuda_ms": (t1 - t0) * 1e3,
                  "reader_ms": (t2 - t1) * 1e3, "arena_host_only_ms": (t4 - t3) * 1e3}))
"""


def dd_direct(path):
    t0 = time.perf_counter()
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=16M", "iflag=direct"], check=True,
                   capture_output=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tmpfs", default="/dev/shm")
    ap.add_argument("--ext4", default="/var/tmp")
    ap.add_argument("--gib", type=int, default=4)
    ap.add_argument("--sharded-gib", type=int, default=16)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--slow-reps", type=int, default=1, help="reps of runai and safetensors")
    ap.add_argument("--cold-gib", type=int, default=4)
    ap.add_argument("--cold-reps", type=int, default=3)
    ap.add_argument("--cells", default="tmpfs-single,tmpfs-sharded,ext4-single,ext4-sharded,cold")
    ap.add_argument("--peers", default="instanttensor,instanttensor_uring_buffered,"
                    "fastsafetensors,runai,safetensors")
    ap.add_argument("--sweep", default=json.dumps(
        [{"staging_bytes": s << 20, "chunk_bytes": c << 20}
         for s, c in ((256, 8), (128, 4), (64, 4))]),
        help="JSON list of load_safetensors keywords, each timed on the tmpfs files")
    ap.add_argument("--variants", default="",
                    help="svmbatch's io= modes measured beside its default")
    ap.add_argument("--setup-bytes", type=int, default=64 << 20,
                    help="the staging ring whose setup is timed alone")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", help="also write the JSON here after every cell")
    args = ap.parse_args()

    import torch
    import svmbatch
    import svmbatch.torch as sbt
    gpu = torch.cuda.get_device_name(0)
    mem = [ln for ln in open("/proc/meminfo") if ln.startswith("MemTotal")]
    versions = {"torch": torch.__version__, "svmbatch": svmbatch.__version__}
    for mod in ("instanttensor", "fastsafetensors", "runai_model_streamer", "safetensors"):
        try:
            from importlib.metadata import version
            versions[mod] = version(mod.replace("_", "-"))
        except Exception as e:  # noqa: BLE001 - a peer that is absent is reported
            versions[mod] = f"absent: {e}"
    res = {"benchmark": BENCHMARK, "commit": args.commit,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"gpu": gpu, "cpus": os.cpu_count(), "kernel": platform.release(),
                       "memory": mem[0].split(":")[1].strip() if mem else "unknown"},
           "mode": svmbatch.mode_name(sbt.default_context().mode),
           "method": METHOD, "versions": versions, "cells": []}

    def emit():
        if args.out:
            with open(args.out + ".tmp", "w") as f:
                json.dump(res, f, indent=2)
            os.replace(args.out + ".tmp", args.out)

    cells = args.cells.split(",")
    peers = [(p, None) for p in args.peers.split(",") if p]
    loaders = [("svmbatch", None)] + [("svmbatch", {"io": v}) for v in
                                      args.variants.split(",") if v] + peers
    layouts = {"single": (args.gib, 1), "sharded": (args.sharded_gib, args.shards)}
    made = {}
    for layout, (gib, shards) in layouts.items():
        if not any(c.endswith("-" + layout) for c in cells):
            continue
        t0 = time.perf_counter()
        d = os.path.join(args.tmpfs, f"svmbatch-loaders-{layout}")
        path, files = write_checkpoint(d, gib, shards)
        made[("tmpfs", layout)] = (path, files)
        print(f"wrote {layout}: {len(files)} files, "
              f"{sum(os.path.getsize(f) for f in files) / 1e9:.2f} GB in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        dig = os.path.join(args.tmpfs, f"svmbatch-loaders-{layout}.digests.json")
        ref = child("safetensors", path, files, 0, "make")
        if "digests" not in ref:
            raise SystemExit(f"reference digests: {ref}")
        with open(dig, "w") as f:
            json.dump(ref["digests"], f)
        made[("digests", layout)] = dig
        if f"ext4-{layout}" in cells:
            e = os.path.join(args.ext4, f"svmbatch-loaders-{layout}")
            shutil.rmtree(e, ignore_errors=True)
            shutil.copytree(d, e)
            os.sync()
            efiles = [os.path.join(e, os.path.basename(f)) for f in files]
            read_once(efiles)
            made[("ext4", layout)] = (os.path.join(e, os.path.basename(path)), efiles)

    # svmbatch's staging parameters, and its first load's setup alone.
    res["staging_sweep"] = {}
    for layout in ("single", "sharded") if args.sweep else ():
        if ("tmpfs", layout) not in made:
            continue
        r = subprocess.run([sys.executable, "-c", SWEEP, made[("tmpfs", layout)][0], args.sweep],
                           capture_output=True, text=True, check=False)
        res["staging_sweep"][layout] = (json.loads(r.stdout.strip().splitlines()[-1])
                                        if r.returncode == 0 else
                                        {"error": r.stderr.strip()[-400:]})
        print(f"sweep {layout}:", file=sys.stderr)
        for c in res["staging_sweep"][layout]:
            print(f"  {c}", file=sys.stderr, flush=True)
    if ("tmpfs", "single") in made:
        r = subprocess.run([sys.executable, "-c", SETUP, str(args.setup_bytes)],
                           capture_output=True, text=True, check=False)
        res["first_load_setup"] = (json.loads(r.stdout.strip().splitlines()[-1])
                                   if r.returncode == 0 else {"error": r.stderr.strip()[-400:]})
        print(f"setup: {res['first_load_setup']}", file=sys.stderr, flush=True)
        emit()

    for c in cells:
        if c == "cold":
            continue
        fs, layout = c.split("-")
        path, files = made[(fs, layout)]
        res["cells"].append(run_cell(c, path, files, loaders, args.reps, args.slow_reps,
                                     made[("digests", layout)]))
        emit()

    if "cold" in cells:
        d = os.path.join(args.ext4, "svmbatch-loaders-cold")
        shutil.rmtree(d, ignore_errors=True)
        path, files = write_checkpoint(d, args.cold_gib, 1)
        size = os.path.getsize(path)
        cold = {"cell": "cold", "path": path, "bytes": size, "loaders": {}}
        if not drop_caches():
            cold["absent"] = "/proc/sys/vm/drop_caches is not writable: no cold figures"
        else:
            runs = [("svmbatch", {"io": "auto"}), ("svmbatch", {"io": "direct"}),
                    ("svmbatch", {"io": "buffered"})] + [
                (p, None) for p, _ in peers if p in ("instanttensor", "fastsafetensors")]
            for loader, extra in runs:
                key = loader + (":io=" + extra["io"] if extra else "")
                times, errs = [], []
                for _ in range(args.cold_reps):
                    drop_caches()
                    r = child(loader, path, files, 0, "", extra)
                    if "first_s" in r:
                        times.append(r["first_s"])
                    else:
                        errs.append(r["error"])
                cold["loaders"][key] = {"all_s": times, "errors": errs,
                                        "GBps": size / 1e9 / statistics.median(times)
                                        if times else None}
                print(f"cold {key}: {cold['loaders'][key]}", file=sys.stderr, flush=True)
            dd = []
            for _ in range(args.cold_reps):
                drop_caches()
                dd.append(dd_direct(path))
            cold["dd_direct_GBps"] = size / 1e9 / statistics.median(dd)
            cold["dd_direct_all_s"] = dd
            best = cold["loaders"].get("svmbatch:io=auto", {}).get("GBps")
            cold["svmbatch_auto_over_dd_direct"] = best / cold["dd_direct_GBps"] if best else None
            print(f"cold dd iflag=direct: {cold['dd_direct_GBps']:.2f} GB/s", file=sys.stderr)
        res["cold"] = cold
        shutil.rmtree(d, ignore_errors=True)
        emit()

    res["summary"] = {c["cell"]: c["summary"] for c in res["cells"]}
    if "cold" in res and "dd_direct_GBps" in res["cold"]:
        res["summary"]["cold"] = {
            "svmbatch_auto_GBps": res["cold"]["loaders"].get("svmbatch:io=auto", {}).get("GBps"),
            "dd_direct_GBps": res["cold"]["dd_direct_GBps"],
            "ratio": res["cold"]["svmbatch_auto_over_dd_direct"]}
    emit()
    json.dump(res, sys.stdout, indent=2)
    print()
    for (fs, layout), v in made.items():
        if fs == "digests":
            os.unlink(v)
        elif fs in ("tmpfs", "ext4"):
            shutil.rmtree(os.path.dirname(v[1][0]), ignore_errors=True)
    bad = [f"{c['cell']}/{k}" for c in res["cells"] for k, v in c["loaders"].items()
           if v.get("exact") is False]
    if bad:
        print(f"loads that differed: {bad}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
