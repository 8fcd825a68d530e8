#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""svmbatch's safetensors loader against every peer a serving engine
offers (vLLM/SGLang --load-format), each in its documented modes, on the
same files in one run, one row per loader and mode:

- svmbatch: svmbatch.torch.load_safetensors(device="cuda") (its io=
  modes beside it with --variants);
- instanttensor: safe_open, its default backend (MMAP on tmpfs, O_DIRECT
  URING/AIO on a disk) and Backend.URING_BUFFERED;
- fastsafetensors: fastsafe_open(nogds=True), its default (O_DIRECT on a
  disk, buffered on tmpfs) and buffered (FASTSAFETENSORS_ODIRECT=0);
- runai: runai-model-streamer 0.17's SafetensorsStreamer,
  stream_files(device="cuda:0"), its default reader and
  RUNAI_STREAMER_FS_STRATEGY=io_uring_buffered / io_uring_direct (its
  pinned-memory modes, RUNAI_STREAMER_PINNED_MEMORY_MODE, belong to its
  device reader, which 0.17's Python API does not reach: "only
  RUNAI_FILE_STREAMER_DEVICE_CPU can be read into");
- safetensors: safetensors.torch.load_file(device="cuda");
- dd (cold cells only): a floor, not a peer: dd iflag=direct of the
  files to /dev/null, no GPU.

Layouts: single (a Llama-shaped checkpoint of --gib GiB in one file: bf16
embeddings, attention and MLP matrices, fp32 norms), sharded (the same
shapes, --sharded-gib GiB in --shards shards with a Hugging Face index)
and moe (a many-tensor MoE checkpoint of --moe-gib GiB in --moe-shards
shards with an index: per layer bf16 attention and norms, a bf16 router
and --moe-experts experts of three FP8 (float8_e4m3fn) matrices of 1 MiB,
each with a float32 block scale and a float32 input scale).  Cells: a
layout on tmpfs, on ext4 hot in the page cache (written, synced, read
once), or cold on ext4 (--cold-gib, the page cache dropped before each
load).

The harness (bench/harness.py): each load in a fresh process per row and
repetition (torch imported by the fork server; CUDA, the loader's import
and the digest's weights before the clock: the same warm-up for every
row), --reps interleaved repetitions (the repetition loop outside, the
rows inside, rotated each repetition), medians.  In each process: the
first load (timed: the first-load figure), --warmup-loads untimed loads,
--steady-loads timed loads (the steady figure); cold: the first load
alone.  Every load, cold ones included, is checked against a digest of
safetensors' own load of the same files.  The summary of each cell
divides svmbatch's row by the best peer row (bench/harness.py's
summarize_cell), naming both.

The defaults (3 GiB hot single files, a 4 GiB MoE checkpoint of about
11,600 tensors in 6 shards, 4 GiB cold ones, 5 repetitions, one warm-up
and one steady load) are sized
for the device tool's calls of at most 10 minutes on a 16-core H200: the
tmpfs cells, the cold cells and the hot ext4 cells (where the peers'
O_DIRECT rows read the disk) each in a call of their own (--cells).

JSON on stdout and in --out (rewritten after every load); progress on
stderr.  Exit 1 if any load of svmbatch failed or differed.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from page_cache import drop_caches  # noqa: E402

BENCHMARK = "loaders"
METHOD = ("each row (a loader in one mode) in a fresh process per repetition, forked from a "
          "server that imported torch; CUDA initialised, the loader imported and the digest's "
          "weights made before the clock, alike for every row; repetitions interleaved (rows "
          "in rotated order within each repetition), medians over repetitions; first = the "
          "first load in the process, from the call to torch.cuda.synchronize() after the last "
          "tensor; then warmup_loads untimed loads; steady = the median of the repetition's "
          "steady_loads timed loads; GB/s = checkpoint bytes (headers included) / seconds; "
          "every load's tensors (names, dtypes, shapes, device, bytes) checked against a "
          "digest of safetensors' load_file(device='cuda') of the same files; hot ext4 = "
          "written, synced, read once; cold = /proc/sys/vm/drop_caches before each load, one "
          "load per process; best peer = the peer row with the lowest median among rows that "
          "loaded exactly in every repetition; ratio = best peer's median seconds / "
          "svmbatch's; dd = a floor (dd iflag=direct, no GPU), never a peer")

# Llama-3-8B's shapes: what a 4-16 GiB checkpoint of a served model is made of.
HIDDEN, INTER, KV, VOCAB = 4096, 14336, 1024, 32000
# A Qwen3-MoE-like layer: FP8 experts of 1 MiB matrices with float32 scales.
MOE_HIDDEN, MOE_INTER, MOE_KV, MOE_VOCAB, BLOCK = 2048, 512, 512, 32000, 128
DTYPE_SIZE = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}
TORCH_DTYPE = {"BF16": "bfloat16", "F32": "float32", "F8_E4M3": "float8_e4m3fn"}

PEER_ROWS = {
    # name: (loader, keywords, environment)
    "instanttensor": ("instanttensor", {}, {}),
    "instanttensor-uring_buffered": ("instanttensor", {"backend": "URING_BUFFERED"}, {}),
    "fastsafetensors": ("fastsafetensors", {}, {}),
    "fastsafetensors-buffered": ("fastsafetensors", {}, {"FASTSAFETENSORS_ODIRECT": "0"}),
    "runai": ("runai", {}, {}),
    "runai-io_uring_buffered": ("runai", {}, {"RUNAI_STREAMER_FS_STRATEGY": "io_uring_buffered"}),
    "runai-io_uring_direct": ("runai", {}, {"RUNAI_STREAMER_FS_STRATEGY": "io_uring_direct"}),
    "safetensors": ("safetensors", {}, {}),
}
LAYOUTS = ("single", "sharded", "moe")
DEFAULT_CELLS = "tmpfs-single,tmpfs-moe,ext4-single,ext4-moe,cold-single,cold-moe"


def nbytes_of(spec) -> int:
    n = DTYPE_SIZE[spec[2]]
    for d in spec[1]:
        n *= d
    return n


def llama_specs(gib: float) -> list:
    """(name, shape, dtype) of a Llama-shaped model of about gib GiB."""
    def layer(i):
        p = f"model.layers.{i}."
        return [(p + "input_layernorm.weight", (HIDDEN,), "F32"),
                (p + "self_attn.q_proj.weight", (HIDDEN, HIDDEN), "BF16"),
                (p + "self_attn.k_proj.weight", (KV, HIDDEN), "BF16"),
                (p + "self_attn.v_proj.weight", (KV, HIDDEN), "BF16"),
                (p + "self_attn.o_proj.weight", (HIDDEN, HIDDEN), "BF16"),
                (p + "post_attention_layernorm.weight", (HIDDEN,), "F32"),
                (p + "mlp.gate_proj.weight", (INTER, HIDDEN), "BF16"),
                (p + "mlp.up_proj.weight", (INTER, HIDDEN), "BF16"),
                (p + "mlp.down_proj.weight", (HIDDEN, INTER), "BF16")]
    ends = [("model.embed_tokens.weight", (VOCAB, HIDDEN), "BF16"),
            ("model.norm.weight", (HIDDEN,), "F32"),
            ("lm_head.weight", (VOCAB, HIDDEN), "BF16")]
    per_layer = sum(nbytes_of(s) for s in layer(0))
    layers = max(1, round((gib * (1 << 30) - sum(nbytes_of(s) for s in ends)) / per_layer))
    return [ends[0]] + [s for i in range(layers) for s in layer(i)] + ends[1:]


def moe_specs(gib: float, experts: int) -> list:
    """(name, shape, dtype) of a many-tensor MoE model of about gib GiB:
    FP8 expert matrices, each with a float32 block scale and input scale."""
    h, e, kv = MOE_HIDDEN, MOE_INTER, MOE_KV

    def linear(name, rows, cols):
        return [(name + ".weight", (rows, cols), "F8_E4M3"),
                (name + ".weight_scale", (rows // BLOCK, cols // BLOCK), "F32"),
                (name + ".input_scale", (1,), "F32")]

    def layer(i):
        p = f"model.layers.{i}."
        out = [(p + "input_layernorm.weight", (h,), "BF16"),
               (p + "self_attn.q_proj.weight", (h, h), "BF16"),
               (p + "self_attn.k_proj.weight", (kv, h), "BF16"),
               (p + "self_attn.v_proj.weight", (kv, h), "BF16"),
               (p + "self_attn.o_proj.weight", (h, h), "BF16"),
               (p + "self_attn.q_norm.weight", (128,), "BF16"),
               (p + "self_attn.k_norm.weight", (128,), "BF16"),
               (p + "post_attention_layernorm.weight", (h,), "BF16"),
               (p + "mlp.gate.weight", (experts, h), "BF16")]
        for x in range(experts):
            q = f"{p}mlp.experts.{x}."
            out += linear(q + "gate_proj", e, h) + linear(q + "up_proj", e, h) + \
                linear(q + "down_proj", h, e)
        return out
    ends = [("model.embed_tokens.weight", (MOE_VOCAB, h), "BF16"),
            ("model.norm.weight", (h,), "BF16"),
            ("lm_head.weight", (MOE_VOCAB, h), "BF16")]
    per_layer = sum(nbytes_of(s) for s in layer(0))
    layers = max(1, round((gib * (1 << 30) - sum(nbytes_of(s) for s in ends)) / per_layer))
    return [ends[0]] + [s for i in range(layers) for s in layer(i)] + ends[1:]


def write_safetensors(path: str, specs: list, base: bytes, salt: int) -> None:
    """A safetensors file of specs, each tensor's bytes a slice of base
    (pseudo-random) at an offset of its own: a header as safetensors
    writes it (8-byte length, JSON padded with spaces to 8 bytes)."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, dtype in specs:
        n = nbytes_of((name, shape, dtype))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    view = memoryview(base)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for k, spec in enumerate(specs):
            n = nbytes_of(spec)
            start = (salt * 7919 + k * 4099) * 64 % len(base)
            while n:
                piece = min(n, len(base) - start)
                f.write(view[start:start + piece])
                n -= piece
                start = 0


def write_checkpoint(directory: str, layout: str, gib: float, shards: int = 1,
                     experts: int = 64) -> tuple:
    """A checkpoint of layout in directory: one file model.safetensors, or
    shards model-0000k-of-0000n.safetensors split by size with
    model.safetensors.index.json, as save_pretrained writes them.  The
    same arguments give the same bytes.  Returns the path a loader is
    given, the list of files and the number of tensors."""
    os.makedirs(directory, exist_ok=True)
    specs = moe_specs(gib, experts) if layout == "moe" else llama_specs(gib)
    sizes = [nbytes_of(s) for s in specs]
    total = sum(sizes)
    groups, acc = [[]], 0
    for spec, n in zip(specs, sizes):
        if acc >= total * len(groups) / shards and len(groups) < shards:
            groups.append([])
        groups[-1].append(spec)
        acc += n
    # Pseudo-random bytes (SHAKE-128 of the arguments), tiled.
    base = hashlib.shake_128(f"{layout}-{gib}".encode()).digest(64 << 20)
    files, weight_map = [], {}
    for k, group in enumerate(groups):
        name = ("model.safetensors" if len(groups) == 1 else
                f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors")
        write_safetensors(os.path.join(directory, name), group, base, k)
        files.append(os.path.join(directory, name))
        weight_map.update({s[0]: name for s in group})
    if len(groups) == 1:
        return files[0], files, len(specs)
    index = os.path.join(directory, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    return index, files, len(specs)


# --- the child: one row's loads in a fresh process --------------------------

def make_loader(loader: str, kw: dict, path: str, files: list, device: str):
    """A function loading the checkpoint with loader; the import happens
    here, before the clock."""
    import torch
    dev = torch.device(device)
    if loader == "svmbatch":
        import svmbatch.torch as sbt
        return lambda: sbt.load_safetensors(path, dev, **kw)
    if loader == "instanttensor":
        import instanttensor
        opts = {k: getattr(instanttensor.Backend, v) if k == "backend" else v
                for k, v in kw.items()}

        def load_it():
            out = {}
            with instanttensor.safe_open(files, framework="pt", device=dev.index or 0,
                                         **opts) as f:
                for name, t in f.tensors():
                    out[name] = t
            return out
        return load_it
    if loader == "fastsafetensors":
        from fastsafetensors import fastsafe_open

        def load_fst():
            with fastsafe_open(files, device=str(dev), nogds=True, **kw) as f:
                return {k: f.get_tensor(k) for k in f.keys()}
        return load_fst
    if loader == "runai":
        from runai_model_streamer import SafetensorsStreamer

        def load_runai():
            with SafetensorsStreamer() as s:
                s.stream_files(files, device=str(dev), **kw)
                return {name: t for name, t in s.get_tensors()}
        return load_runai
    if loader == "safetensors":
        from safetensors.torch import load_file

        def load_st():
            out = {}
            for f in files:
                out.update(load_file(f, device=str(dev)))
            return out
        return load_st
    raise ValueError(f"no loader {loader}")


def child_job(spec: dict) -> dict:
    """In a fresh process: the same warm-up for every row (CUDA, the
    loader's import, the digest's weights), then the first load, the
    warm-up loads and the steady loads, each checked."""
    for k, v in spec.get("env", {}).items():
        os.environ[k] = v
    import torch
    device = spec["device"]
    if device.startswith("cuda"):
        torch.cuda.init()
        torch.empty(1, device=device)
        torch.cuda.synchronize()
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    load = make_loader(spec["loader"], spec.get("kw", {}), spec["path"], spec["files"], device)
    harness.digest({"warm": torch.zeros(8, dtype=torch.uint8, device=device)})
    want = spec.get("digest")

    def timed():
        gc.collect()
        sync()
        t0 = time.perf_counter()
        out = load()
        sync()
        return time.perf_counter() - t0, out

    def profile():
        """svmbatch's own breakdown of its last load (seconds per step)."""
        if spec["loader"] != "svmbatch":
            return None
        import svmbatch._staging
        return svmbatch._staging.last_profile

    first_s, out = timed()
    if spec.get("make_digest"):
        return {"digest": harness.digest(out), "first_s": first_s}
    first_profile = profile()
    exact = harness.digest(out) == want
    del out
    for _ in range(spec.get("warmup", 0)):
        _, out = timed()
        exact = exact and harness.digest(out) == want
        del out
    steady = []
    for _ in range(spec.get("steady", 0)):
        dt, out = timed()
        steady.append(dt)
        exact = exact and harness.digest(out) == want
        del out
    result = {"first_s": first_s, "steady_s": steady, "exact": exact,
              "loads_checked": 1 + spec.get("warmup", 0) + spec.get("steady", 0)}
    if first_profile is not None:
        result["first_profile"] = first_profile
        result["steady_profile"] = profile() if steady else None
    return result


# --- the parent -------------------------------------------------------------

def read_once(files: list) -> None:
    """Bring files into the page cache (the 'hot' of hot ext4)."""
    buf = bytearray(64 << 20)
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass


def dd_direct(files: list) -> dict:
    """The floor: the files read with O_DIRECT to /dev/null, one after the
    other, no GPU."""
    t0 = time.perf_counter()
    for f in files:
        r = subprocess.run(["dd", f"if={f}", "of=/dev/null", "bs=16M", "iflag=direct"],
                           capture_output=True, text=True, check=False)
        if r.returncode:
            return {"error": f"dd: {r.stderr.strip()[-300:]}"}
    return {"first_s": time.perf_counter() - t0, "steady_s": [], "exact": None}


SWEEP = r"""
import json, statistics, sys, time, torch
import svmbatch.torch as sbt
torch.empty(1, device="cuda"); torch.cuda.synchronize()
path, configs, reps = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
out = []
for c in configs:
    ts = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        r = sbt.load_safetensors(path, "cuda", **c)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
        del r
    sbt.release_staging()
    out.append(dict(c, first_s=ts[0], steady_all_s=ts[1:], steady_s=statistics.median(ts[1:])))
print(json.dumps(out))
"""

PER_TENSOR = r"""
import json, statistics, sys, time, torch
import svmbatch.torch as sbt
torch.empty(1, device="cuda"); torch.cuda.synchronize()
many, one, count, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
out = {"tensors": count}
for allocate in ("block", "tensor"):
    times = {"many": [], "one": []}
    for rep in range(reps + 1):
        # Interleaved: one load of each file per repetition, the first
        # repetition a warm-up.
        for key, path in (("many", many), ("one", one)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            r = sbt.load_safetensors(path, "cuda", allocate=allocate)
            torch.cuda.synchronize()
            if rep:
                times[key].append(time.perf_counter() - t0)
            del r
    m, o = statistics.median(times["many"]), statistics.median(times["one"])
    out[allocate] = {"many_s": times["many"], "one_s": times["one"], "many_median_s": m,
                     "one_median_s": o, "per_tensor_us": (m - o) / (count - 1) * 1e6}
print(json.dumps(out))
"""


def per_tensor(root: str, count: int, tensor_bytes: int, reps: int) -> dict:
    """What a tensor costs svmbatch beyond its bytes: the steady load of
    count tensors of tensor_bytes minus that of one tensor of the same
    bytes (both on tmpfs, in one process, interleaved), per tensor."""
    d = os.path.join(root, "svmbatch-loaders-per-tensor")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    base = os.urandom(max(1 << 20, tensor_bytes) + 4096)
    many, one = os.path.join(d, "many.safetensors"), os.path.join(d, "one.safetensors")
    write_safetensors(many, [(f"t{i}", (tensor_bytes,), "U8") for i in range(count)], base, 1)
    write_safetensors(one, [("t", (count * tensor_bytes,), "U8")], base, 2)
    try:
        out = diagnostic(PER_TENSOR, many, one, str(count), str(reps))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    out["tensor_bytes"] = tensor_bytes
    return out


def diagnostic(script: str, *argv: str) -> dict:
    r = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True,
                       check=False)
    if r.returncode:
        return {"error": r.stderr.strip()[-400:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Cells: fs-layout, fs in tmpfs, ext4, cold; layout in "
                                        f"{', '.join(LAYOUTS)}.  Peer rows: "
                                        f"{', '.join(PEER_ROWS)}.")
    ap.add_argument("--tmpfs", default="/dev/shm")
    ap.add_argument("--ext4", default="/var/tmp")
    ap.add_argument("--cells", default=DEFAULT_CELLS)
    ap.add_argument("--gib", type=float, default=3, help="the single file's size")
    ap.add_argument("--sharded-gib", type=float, default=8)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--moe-gib", type=float, default=4)
    ap.add_argument("--moe-shards", type=int, default=6)
    ap.add_argument("--moe-experts", type=int, default=128, help="experts a layer")
    ap.add_argument("--cold-gib", type=float, default=4, help="each cold checkpoint's size")
    ap.add_argument("--reps", type=int, default=harness.MIN_REPS)
    ap.add_argument("--warmup-loads", type=int, default=1,
                    help="untimed loads after the first, in each process (every row alike)")
    ap.add_argument("--steady-loads", type=int, default=1,
                    help="timed loads after the warm-up, in each process")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: allows --reps < 5 and marks the JSON quick")
    ap.add_argument("--peers", default=",".join(PEER_ROWS))
    ap.add_argument("--variants", default="",
                    help="svmbatch's io= modes, or allocate= modes (block, tensor), measured "
                         "beside its default (rows of ours)")
    ap.add_argument("--no-floor", action="store_true", help="no dd row in the cold cells")
    ap.add_argument("--sweep", default="",
                    help="JSON list of load_safetensors keywords, each timed on the tmpfs "
                         "single file (a diagnostic)")
    ap.add_argument("--per-tensor", type=int, default=16384,
                    help="tensors of the per-tensor diagnostic (0: none)")
    ap.add_argument("--per-tensor-bytes", type=int, default=16 << 10)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a process may take")
    ap.add_argument("--out", help="also write the JSON here after every load")
    args = ap.parse_args(argv)
    harness.check_reps(args.reps, args.quick)
    cells = [c for c in args.cells.split(",") if c]
    for c in cells:
        fs, _, layout = c.partition("-")
        if fs not in ("tmpfs", "ext4", "cold") or layout not in LAYOUTS:
            ap.error(f"no cell {c!r}")
    for p in args.peers.split(","):
        if p and p not in PEER_ROWS:
            ap.error(f"no peer row {p!r}")
    args.cells = cells
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    here = os.path.dirname(os.path.abspath(__file__))
    params = {k: v for k, v in vars(args).items() if k not in ("out",)}
    doc = harness.metadata(BENCHMARK, METHOD, params, quick=args.quick)
    doc["cells"] = {}
    runner = harness.FreshProcesses(preload=("torch",), paths=(here,))

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    sizes = {"single": (args.gib, 1), "sharded": (args.sharded_gib, args.shards),
             "moe": (args.moe_gib, args.moe_shards)}
    digests: dict = {}
    made: list = []

    def checkpoint(fs, layout):
        gib, shards = sizes[layout]
        if fs == "cold":
            gib = args.cold_gib
        root = args.tmpfs if fs == "tmpfs" else args.ext4
        d = os.path.join(root, f"svmbatch-loaders-{fs}-{layout}")
        shutil.rmtree(d, ignore_errors=True)
        t0 = time.perf_counter()
        path, files, tensors = write_checkpoint(d, layout, gib, shards, args.moe_experts)
        made.append(d)
        if fs != "tmpfs":
            os.sync()
        key = (layout, gib, shards)
        if key not in digests:  # safetensors' own load, untimed
            r = runner.run("loaders_bench:child_job", {
                "loader": "safetensors", "path": path, "files": files, "device": args.device,
                "make_digest": True}, args.timeout)
            if "digest" not in r:
                raise SystemExit(f"the reference load failed: {r.get('error')}")
            digests[key] = r["digest"]
        if fs == "ext4":
            read_once(files)
        size = sum(os.path.getsize(f) for f in files)
        log(f"wrote {fs}-{layout}: {len(files)} files, {tensors} tensors, {size / 1e9:.2f} GB "
            f"in {time.perf_counter() - t0:.1f} s")
        return path, files, tensors, size, digests[key]

    rows = {"svmbatch": ("svmbatch", {}, {}, "ours")}
    for v in filter(None, args.variants.split(",")):
        if v in ("block", "tensor"):
            rows[f"svmbatch-allocate_{v}"] = ("svmbatch", {"allocate": v}, {}, "ours")
        else:
            rows[f"svmbatch-io_{v}"] = ("svmbatch", {"io": v}, {}, "ours")
    for p in filter(None, args.peers.split(",")):
        rows[p] = PEER_ROWS[p] + ("peer",)

    # Hot cells first, cold ones last: dropping the page cache would
    # empty the hot ext4 cells' files.
    cells = sorted(args.cells, key=lambda c: c.startswith("cold"))
    for cname in cells:
        fs, _, layout = cname.partition("-")
        path, files, tensors, size, want = checkpoint(fs, layout)
        cold = fs == "cold"
        if cold and not drop_caches():
            doc["cells"][cname] = {"absent": "/proc/sys/vm/drop_caches is not writable"}
            log(f"{cname}: no cold figures (drop_caches refused)")
            continue
        cell = {"fs": fs, "layout": layout, "path": path, "files": len(files), "tensors": tensors,
                "bytes": size, "reps": args.reps, "ours": "svmbatch",
                "loads": {"warmup": 0 if cold else args.warmup_loads,
                          "steady": 0 if cold else args.steady_loads},
                "digest": want, "rows": {}}
        jobs = {}
        for name, (loader, kw, env, role) in rows.items():
            cell["rows"][name] = harness.new_row(role, loader=loader, kw=kw, env=env)
            jobs[name] = {"loader": loader, "kw": kw, "env": env, "path": path, "files": files,
                          "device": args.device, "digest": want,
                          "warmup": cell["loads"]["warmup"], "steady": cell["loads"]["steady"]}
        if cold and not args.no_floor:
            cell["rows"]["dd"] = harness.new_row("floor", loader="dd iflag=direct", kw={}, env={})
            jobs["dd"] = None
        doc["cells"][cname] = cell

        def run_one(name, rep, jobs=jobs):
            if jobs[name] is None:
                return dd_direct(files)
            return runner.run("loaders_bench:child_job", jobs[name], args.timeout)

        def progress(name, rep, r, cname=cname):
            what = r["error"] if r.get("error") else (
                f"first {r['first_s']:.3f} s, steady {r.get('steady_s')}, exact {r.get('exact')}")
            log(f"{cname} rep {rep} {name}: {what}")
            harness.write_json(doc, args.out)

        harness.run_reps(cell, jobs, run_one, progress,
                         before_each=(lambda _: drop_caches()) if cold else None)
        s = harness.finish_cell(cell)
        log(f"{cname}: {json.dumps(s)}")
        harness.write_json(doc, args.out)

    # A diagnostic of svmbatch alone: its staging parameters.
    tmpfs_single = [d for d in made if d.endswith("tmpfs-single")]
    if args.sweep and tmpfs_single:
        doc["staging_sweep"] = diagnostic(SWEEP, os.path.join(tmpfs_single[0],
                                                              "model.safetensors"),
                                          args.sweep, str(args.reps))
    if args.per_tensor and args.device.startswith("cuda"):
        doc["per_tensor"] = per_tensor(args.tmpfs, args.per_tensor, args.per_tensor_bytes,
                                       args.reps)
        log(f"per tensor: {json.dumps(doc['per_tensor'])[:400]}")
    doc["summary"] = {n: c["summary"] for n, c in doc["cells"].items() if "summary" in c}
    bad = harness.ours_failures(doc)
    doc["ours_failures"] = bad
    harness.write_json(doc, args.out)
    json.dump(doc, sys.stdout, indent=1)
    print()
    for d in made:
        shutil.rmtree(d, ignore_errors=True)
    if bad:
        log(f"svmbatch failed or differed: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
