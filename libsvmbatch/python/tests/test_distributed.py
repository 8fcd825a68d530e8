# SPDX-License-Identifier: MIT
"""load_safetensors_distributed on 2 and 3 ranks of local processes
(gloo, CPU tensors; NCCL on two GPUs where they are): replicated and
sliced loads equal a single-process load byte for byte, from a sharded
checkpoint and from one file, with names; a rank that fails (a file it
cannot open, a read that fails halfway, a different plan) makes every
rank raise, nobody hangs, nothing stays registered, and the group still
loads afterwards; a read or a target allocation that fails at a later
round makes every rank raise at that round, each rank having issued the
same collectives and handed out the same tensors; the agreed points run
on a CPU group of the caller's (cpu_group), a subgroup loads alone."""

import contextlib
import datetime
import errno
import json
import multiprocessing
import os
import traceback

import pytest

import torch  # required: an import failure is a collection error
import torch.distributed as dist
from test_safetensors import raw_bytes, sample, write_minimal
from test_sharded import three_shards, write_checkpoint

# Both torches the suite runs with (Debian's, the venv's of
# tools/python-deps.sh --torch2) and the GPU machine's have gloo: a torch
# without it is a collection error, never a skip of the CPU tests.
if not dist.is_available() or not dist.is_gloo_available():
    raise ImportError(f"torch {torch.__version__} has no torch.distributed with gloo")
two_gpus = pytest.mark.skipif(not dist.is_available() or not dist.is_nccl_available() or
                              not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                              reason="NCCL on two CUDA devices: runs on the 2-GPU machine")

# A rank that hangs is a failure of the test, found within this; the
# group's own collectives give up sooner.
JOIN_SECONDS = 90
GROUP_TIMEOUT = datetime.timedelta(seconds=30)
# Small rings and rounds: several rounds, pieces split across ranks.
RING = {"staging_bytes": 2 << 20, "chunk_bytes": 1 << 20, "threads": 2, "round_bytes": 4 << 20}
# Rounds of 1 MiB: six of them (the last three tapered), for a failure in
# a later one.
ROUNDS = dict(RING, round_bytes=1 << 20)


def split_rows_and_columns(name, shape, rank, world):
    """Matrices by columns (not one byte range), vectors by rows (one
    each), the rest whole."""
    dim = 1 if len(shape) == 2 else 0 if len(shape) == 1 else None
    if dim is None or shape[dim] < world:
        return None
    lo, hi = rank * shape[dim] // world, (rank + 1) * shape[dim] // world
    return dim, lo, hi - lo


def sliced(t, s):
    return t if s is None else t.narrow(*s)


def same_bytes(got, want, what):
    assert sorted(got) == sorted(want), what
    for k in want:
        g = got[k].cpu()
        assert g.dtype == want[k].dtype and g.shape == want[k].shape, f"{what}: {k}"
        assert g.is_contiguous(), f"{what}: {k}"
        assert raw_bytes(g) == raw_bytes(want[k]), f"{what}: {k}"


def bytes_read(sbt, load, device):
    """What load() reads on this rank, and on all ranks together."""
    import svmbatch._staging as staging

    real_read = staging.Reader.read
    read = 0

    def counting(self, extents):
        nonlocal read
        read += sum(x[2] for x in extents)
        return real_read(self, extents)

    staging.Reader.read = counting
    try:
        load()
    finally:
        staging.Reader.read = real_read
    total = torch.tensor([read], device=device)  # where the backend moves bytes
    dist.all_reduce(total)
    return read, int(total)


def check_loads(d, rank, world, device, sbt):
    ckpt, one = os.path.join(d, "ckpt"), os.path.join(d, "one.safetensors")
    # Each byte is read once, by one rank, the shares about even (pieces
    # of an eighth of the 4 MiB round, or a twelfth).
    data = sum(t.numel() * t.element_size() for t in sbt.load_safetensors(ckpt).values())
    mine, total = bytes_read(sbt, lambda: sbt.load_safetensors_distributed(ckpt, device, **RING),
                             device)
    assert total == data, (total, data)
    assert abs(mine - data / world) <= 512 << 10, (mine, data, world)
    for where in (ckpt, one):
        want = sbt.load_safetensors(where)
        got = sbt.load_safetensors_distributed(where, device, **RING)
        same_bytes(got, want, f"replicated {where}")
        assert list(got) == list(want)  # file order
        got = sbt.load_safetensors_distributed(where, device, shard_fn=split_rows_and_columns,
                                               **RING)
        same_bytes(got, {k: sliced(t, split_rows_and_columns(k, tuple(t.shape), rank, world))
                         .contiguous() for k, t in want.items()}, f"sliced {where}")
    some = ["big1", "ids", "empty", "scalar", "layer.0.w"]
    want = sbt.load_safetensors(ckpt, names=some)
    pairs = list(sbt.iter_safetensors_distributed(ckpt, device, names=some, **RING))
    same_bytes(dict(pairs), want, "names")
    got = sbt.load_safetensors_distributed(ckpt, device, torch.float16,
                                           names=lambda n: n.startswith("big"), **RING)
    assert all(t.dtype == torch.float16 for t in got.values())
    want = sbt.load_safetensors(ckpt, "cpu", torch.float16, names=lambda n: n.startswith("big"))
    same_bytes(got, want, "dtype")


def agreeing_groups(load):
    """The groups load()'s status rows went through."""
    real = dist.all_reduce
    seen = []

    def spy(tensor, *args, **kwargs):
        if tensor.dtype == torch.uint8:  # a status row (byte counts are int64)
            seen.append(kwargs.get("group"))
        return real(tensor, *args, **kwargs)

    dist.all_reduce = spy
    try:
        load()
    finally:
        dist.all_reduce = real
    return seen


def make_groups(rank, world, device):
    """check_groups' groups: a gloo twin of the world, and one of every
    rank but the last, its NCCL communicator (and pipes) made by a first
    collective, so that the baseline holds them."""
    twin = dist.new_group(backend="gloo")
    fewer = dist.new_group(ranks=list(range(world - 1)))
    if rank < world - 1:
        dist.all_reduce(torch.zeros(1, device=device), group=fewer)
    return twin, fewer


def check_groups(d, rank, world, device, sbt, groups):
    """The agreed points run on the caller's cpu_group; one of other ranks
    is refused on every rank before anything is opened; a subgroup loads
    alone."""
    ckpt = os.path.join(d, "ckpt")
    want = sbt.load_safetensors(ckpt)
    twin, fewer = groups
    got = {}
    seen = agreeing_groups(lambda: got.update(
        sbt.load_safetensors_distributed(ckpt, device, cpu_group=twin, **RING)))
    same_bytes(got, want, "cpu_group")
    assert len(seen) >= 3 and all(g is twin for g in seen), seen  # open + 2 rounds or more
    # The last rank is outside fewer.
    with pytest.raises(ValueError, match="same ranks"):
        sbt.load_safetensors_distributed(ckpt, device, cpu_group=fewer, **RING)
    if rank < world - 1:
        got = sbt.load_safetensors_distributed(ckpt, device, group=fewer, **RING)
        same_bytes(got, want, "subgroup")
        got = sbt.load_safetensors_distributed(ckpt, device, group=fewer,
                                               shard_fn=split_rows_and_columns, **RING)
        same_bytes(got, {k: sliced(t, split_rows_and_columns(k, tuple(t.shape), rank,
                                                              world - 1)).contiguous()
                         for k, t in want.items()}, "subgroup sliced")
    dist.barrier()
    return []


def check_failures(d, rank, world, device, sbt):
    import svmbatch.loading as loading

    ckpt = os.path.join(d, "ckpt")
    victim = world - 1
    outcomes = []

    def expect(case, **kwargs):
        try:
            sbt.load_safetensors_distributed(ckpt, device, **RING, **kwargs)
        except sbt.DistributedLoadError as e:
            assert rank != victim or case == "plan", case
            assert case == "plan" or victim in e.failures, (case, e.failures)
            outcomes.append(f"{case}: DistributedLoadError: {e}")
        except OSError as e:
            assert rank == victim and case != "plan", (case, e)
            outcomes.append(f"{case}: {type(e).__name__}: {e}")
        else:
            raise AssertionError(f"{case}: rank {rank} did not raise")

    # A shard this rank cannot open.
    real_open = loading._os.open
    shard = os.path.join(ckpt, "model-00002-of-00003.safetensors")

    def no_shard(path, *args, **kwargs):
        if os.fspath(path) == shard:
            raise PermissionError(errno.EACCES, "Permission denied (the test's)", path)
        return real_open(path, *args, **kwargs)

    if rank == victim:
        loading._os.open = no_shard
    try:
        expect("open")
    finally:
        loading._os.open = real_open

    # Reads that fail after the first pieces came in.
    real_rounds = loading._read_rounds

    def failing_rounds(*args, **kwargs):
        for n, pair in enumerate(real_rounds(*args, **kwargs)):
            if n == 2:
                raise OSError(errno.EIO, "Input/output error (the test's) reading piece 2")
            yield pair

    if rank == victim:
        loading._read_rounds = failing_rounds
    try:
        expect("read")
    finally:
        loading._read_rounds = real_rounds

    # Ranks asking for different tensors.
    expect("plan", names=["ids"] if rank == victim else ["ids", "big0"])

    # The group is still in step: the next load works.
    same_bytes(sbt.load_safetensors_distributed(ckpt, device, **RING),
               sbt.load_safetensors(ckpt), "after the failures")
    return outcomes


def later_choice(plan, world, case):
    """Where a later_failure case fails, from the plan (every rank's):
    the victim, what fails there, the agreed point that tells it, and the
    tensors handed out before it."""
    rounds = plan.rounds
    if case == "allocation":
        # A tensor whose pieces all lie in one round, the third or later,
        # read by another rank than the victim: only the allocation of
        # that round's targets (in the round before) makes it there.
        for k in range(len(rounds) - 1, 1, -1):
            in_k = {id(p) for p in rounds[k]}
            for item in plan.items:
                pieces = [p for r in rounds for p in r if p.item is item]
                if pieces and all(id(p) in in_k and p.kind == "bcast" for p in pieces):
                    victim = max(set(range(world)) - {p.owner for p in pieces})
                    return {"victim": victim, "item": item, "told": k - 1}
        raise AssertionError("no tensor to fail the allocation of")
    victim = world - 1
    mine = [n for n in range(1, len(rounds)) if any(p.owner == victim for p in rounds[n])]
    k = mine[-1] if case == "last read" else mine[len(mine) // 2]
    assert 0 < k and (case == "last read") == (k == len(rounds) - 1), (case, k)
    key = next(p.key for p in rounds[k] if p.owner == victim)
    return {"victim": victim, "key": key, "round": k, "told": k}


def later_failure(d, rank, world, device, sbt, case):
    """An iterator load in rounds of 1 MiB in which one rank fails in a
    later round: a read in a middle round ("read") or the last ("last
    read"), or the allocation of a round's targets ("allocation").  What
    this rank handed out, raised and issued."""
    import svmbatch.distributed as distributed

    ckpt = os.path.join(d, "ckpt")
    chosen = {}
    real = {"plan": distributed._Plan, "stream": distributed._stream,
            "shape": distributed._slice_shape, "all_reduce": dist.all_reduce,
            "broadcast": dist.broadcast}
    issued = []

    def planning(*args):
        plan = real["plan"](*args)
        chosen.update(later_choice(plan, world, case), rounds=len(plan.rounds))
        # The rounds agreed on before the one that tells the failure.
        chosen["before"] = [i.entry.name for i in plan.items if i.last_round < chosen["told"]]
        return plan

    def failing_stream(opened, plan, r, *args):
        with contextlib.closing(real["stream"](opened, plan, r, *args)) as pairs:
            for key, view in pairs:
                if r == chosen["victim"] and key == chosen["key"]:
                    raise OSError(errno.EIO, "Input/output error (the test's) reading round "
                                             f"{chosen['round'] + 1}")
                yield key, view

    def failing_shape(shape, sl):
        if rank == chosen["victim"] and shape is chosen["item"].shape:
            raise torch.cuda.OutOfMemoryError(f"out of memory (the test's) for "
                                              f"{chosen['item'].entry.name}")
        return real["shape"](shape, sl)

    def all_reduce(t, *args, **kwargs):
        issued.append(["all_reduce", list(t.shape)])
        return real["all_reduce"](t, *args, **kwargs)

    def broadcast(t, *args, **kwargs):
        issued.append(["broadcast", t.numel(), kwargs.get("src")])
        return real["broadcast"](t, *args, **kwargs)

    distributed._Plan = planning
    if case == "allocation":
        distributed._slice_shape = failing_shape
    else:
        distributed._stream = failing_stream
    dist.all_reduce, dist.broadcast = all_reduce, broadcast
    got = []
    frames = []
    try:
        for name, _ in sbt.iter_safetensors_distributed(ckpt, device, **ROUNDS):
            got.append(name)
    except sbt.DistributedLoadError as e:
        error = f"DistributedLoadError: {e}"
        failed = sorted(e.failures)
    except (OSError, torch.cuda.OutOfMemoryError) as e:
        error = f"{type(e).__name__}: {e}"
        failed = None
        frames = [f.name for f in traceback.extract_tb(e.__traceback__)]
    else:
        raise AssertionError(f"{case}: rank {rank} did not raise")
    finally:
        distributed._Plan, distributed._stream = real["plan"], real["stream"]
        distributed._slice_shape = real["shape"]
        dist.all_reduce, dist.broadcast = real["all_reduce"], real["broadcast"]
    # The group is still in step.
    same_bytes(sbt.load_safetensors_distributed(ckpt, device, **ROUNDS),
               sbt.load_safetensors(ckpt), f"after the {case} failure")
    return {"victim": chosen["victim"], "where": f"round {chosen['told'] + 1} of "
            f"{chosen['rounds']}", "before": chosen["before"], "got": got, "error": error,
            "failed": failed, "frames": frames, "issued": issued}


def fds_but_gloos():
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own fd, closed by now
            continue
        # gloo's: its groups' sockets and each group's epoll fd (the
        # loaders' own fds are files and io_uring rings).
        if not link.startswith("socket:") and link != "anon_inode:[eventpoll]":
            out.add((fd, link))
    return out


def rank_baseline():
    """conftest's Baseline, blind to gloo's fds: it opens sockets as its
    ranks connect and an epoll fd per group, and the loaders open none."""
    from conftest import Baseline, module_gauges, release_staging
    import gc
    import svmbatch

    class RankBaseline(Baseline):
        def __init__(self):
            super().__init__()
            self.fds = fds_but_gloos()

        def check(self):
            release_staging()
            gc.collect()
            assert svmbatch.process_pinned_bytes() == self.vmpin
            assert fds_but_gloos() == self.fds, fds_but_gloos() ^ self.fds
            assert module_gauges() == self.stats
    return RankBaseline()


def rank_main(rank, world, d, backend, what):
    """One rank: join the group, run the checks, record the outcome."""
    result = {"rank": rank, "ok": False}
    try:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        import svmbatch.torch as sbt

        device = "cpu"
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = f"cuda:{rank}"
        dist.init_process_group(backend, init_method=f"file://{d}/rendezvous", rank=rank,
                                world_size=world, timeout=GROUP_TIMEOUT)
        try:
            # NCCL makes its communicator (and its pipes) at the first
            # collective, and the first load under NCCL the world's gloo
            # twin: one of each before the baseline, after which the loads
            # must leave no pin, fd or staging ring behind.
            dist.all_reduce(torch.zeros(1, device=device))
            sbt.load_safetensors_distributed(os.path.join(d, "one.safetensors"), device)
            if what == "groups":
                groups = make_groups(rank, world, device)
            baseline = rank_baseline()
            if what == "groups":
                result["outcomes"] = check_groups(d, rank, world, device, sbt, groups)
            elif what.startswith("later "):
                result["outcomes"] = [later_failure(d, rank, world, device, sbt, case)
                                      for case in what[len("later "):].split(",")]
            else:
                check = check_loads if what == "loads" else check_failures
                result["outcomes"] = check(d, rank, world, device, sbt)
            baseline.check()
        finally:
            dist.destroy_process_group()
        result["ok"] = True
    except BaseException:  # reported to the test, which fails
        result["error"] = traceback.format_exc()
    with open(os.path.join(d, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def run_ranks(tmp_path, world, what, backend="gloo"):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shards, tensors = three_shards()
    write_checkpoint(ckpt, shards)
    write_minimal(tmp_path / "one.safetensors", sample())
    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=rank_main, args=(r, world, str(tmp_path), backend, what))
             for r in range(world)]
    for p in procs:
        p.start()
    hung = []
    try:
        for p in procs:
            p.join(JOIN_SECONDS)
            if p.is_alive():
                hung.append(p.pid)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    if hung:
        pytest.fail(f"ranks (pids {hung}) still running after {JOIN_SECONDS} s")
    results = []
    for r in range(world):
        path = tmp_path / f"rank{r}.json"
        if not path.exists():
            pytest.fail(f"rank {r} ended (exit {procs[r].exitcode}) without a result")
        results.append(json.loads(path.read_text()))
    for res in results:
        if not res["ok"]:
            pytest.fail(f"rank {res['rank']}:\n{res['error']}")
    return [res["outcomes"] for res in results]


def plan_of(shards, world, piece, rounds, shard_fn=None):
    """A plan (every rank's) straight from headers: shards, a list per
    shard of (name, shape) of float32 tensors, laid out in order."""
    from svmbatch.distributed import _Plan
    from svmbatch.safetensors_format import Entry
    wanted = []
    for tensors in shards:
        at, entries = 0, []
        for name, shape in tensors:
            n = 4
            for d in shape:
                n *= d
            entries.append(Entry(name, "F32", tuple(shape), at, at + n))
            at += n
        wanted.append(entries)
    return _Plan([(-1, None, f"shard{k}") for k in range(len(shards))], wanted, shard_fn,
                 world, piece, rounds)


def round_bytes_of(plan):
    return [sum(p.end - p.begin for p in r) for r in plan.rounds]


def check_plan(plan, world, piece):
    """Every piece once, in file order, each tensor's bytes covered once
    (each rank's slice once where it reads its own), each tensor complete
    by its last_round, handed out in file order."""
    pieces = [p for r in plan.rounds for p in r]
    assert len({id(p) for p in pieces}) == len({p.key for p in pieces}) == len(pieces)
    assert [(p.s, p.begin) for p in pieces if p.kind != "own"] == \
        sorted((p.s, p.begin) for p in pieces if p.kind != "own")
    round_of = {id(p): n for n, r in enumerate(plan.rounds) for p in r}
    last = 0
    for item in plan.items:
        mine = [p for p in pieces if p.item is item]
        assert all(0 < p.end - p.begin <= piece and 0 <= p.owner < world for p in mine)
        e = item.entry
        for owner in ([None] if all(p.kind != "own" for p in mine) else range(world)):
            ranges = sorted((p.begin, p.end) for p in mine if owner in (None, p.owner))
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), e.name
            span = (ranges[0][0], ranges[-1][1]) if ranges else (e.begin, e.begin)
            sl = item.slices[owner] if owner is not None else None
            if sl is None:
                assert span == (e.begin, e.end), e.name
            else:
                stride = e.nbytes // item.shape[sl.dim]
                assert span == (e.begin + sl.start * stride,
                                e.begin + (sl.start + sl.length) * stride), e.name
        if mine:
            assert item.last_round == max(round_of[id(p)] for p in mine)
        assert item.last_round >= last  # tensors complete in file order
        last = item.last_round


def test_the_plans_last_rounds_taper():
    """Rounds of round_bytes, then the last 1 to 2 round_bytes in rounds of
    half what is left, down to world_size pieces (one a rank), the last
    taking the rest; every piece once, in file order."""
    from svmbatch.distributed import _round_size
    world, piece = 2, 1 << 20
    rounds = 4 * world * piece  # the default relation: pieces of round_bytes / (4 x world)
    floor = world * piece
    # 80 tensors of a piece each in 4 shards: 10 rounds' worth, cut exactly.
    even = [[(f"t{k}.{i}", (piece // 4,)) for i in range(20)] for k in range(4)]
    plan = plan_of(even, world, piece, rounds)
    check_plan(plan, world, piece)
    assert round_bytes_of(plan) == [rounds] * 9 + [rounds // 2, rounds // 4, rounds // 4]
    assert len(plan.rounds[-1]) == world and {p.owner for p in plan.rounds[-1]} == {0, 1}
    # Tensors of odd sizes, some split into pieces, some of no bytes, some
    # sliced (own pieces, blocks): each round holds its size or more, by
    # less than a piece; the sizes fall at the end.
    odd = [[(f"a{k}.{i}", ((3 * i + k) % 7 * 81929 + 1,)) for i in range(24)] +
           [(f"m{k}", (257, 1031 + k)), (f"z{k}", (0,)), (f"v{k}", (8192 + k,))]
           for k in range(3)]
    for world in (2, 3):
        piece = max(64 << 10, rounds // (4 * world))
        floor = world * piece
        for fn in (None, split_rows_and_columns):
            plan = plan_of(odd, world, piece, rounds, fn)
            check_plan(plan, world, piece)
            sizes = round_bytes_of(plan)
            left = sum(sizes)
            assert left > 5 * rounds and len(sizes) >= 8
            for n, size in enumerate(sizes):
                want = _round_size(left, floor, rounds)
                if n < len(sizes) - 1:
                    assert want <= size < want + piece, (n, sizes)
                else:
                    assert size == left == want and floor // 2 <= size < 3 * floor // 2, sizes
                left -= size
            assert min(sizes[:-4]) >= rounds, sizes
            tail = sizes[-4:]
            assert all(a > b for a, b in zip(tail, tail[1:])), sizes
            assert tail[0] <= rounds + piece and tail[-1] <= 3 * floor // 2, sizes


def test_a_plan_of_less_than_a_round():
    world, piece = 2, 1 << 20
    rounds = 8 * piece
    floor = world * piece
    # Less than 1.5 x floor: one round.
    plan = plan_of([[("a", (1000,)), ("e", (0,)), ("b", ((piece + 1000) // 4,))]], world,
                   piece, rounds)
    check_plan(plan, world, piece)
    assert round_bytes_of(plan)[0] < 3 * floor // 2
    assert len(plan.rounds) == 1 and len(plan.rounds[0]) == 3
    assert [i.last_round for i in plan.items] == [0, 0, 0]
    # Less than a round, more than 1.5 x floor: tapered still.
    plan = plan_of([[(f"t{i}", (piece // 4,)) for i in range(6)]], world, piece, rounds)
    check_plan(plan, world, piece)
    assert round_bytes_of(plan) == [3 * piece, 2 * piece, piece]
    # Nothing to read: one empty round, every tensor handed out after it.
    plan = plan_of([[("e", (0,)), ("f", (3, 0))]], world, piece, rounds)
    assert plan.rounds == [[]] and [i.last_round for i in plan.items] == [0, 0]
    assert plan_of([[]], world, piece, rounds).rounds == [[]]


def test_the_plans_digest_covers_its_rounds():
    world, piece = 2, 1 << 20
    shards = [[(f"t{i}", (piece // 4,)) for i in range(40)]]
    one = plan_of(shards, world, piece, 8 * piece)
    assert one.digest == plan_of(shards, world, piece, 8 * piece).digest
    other = plan_of(shards, world, piece, 16 * piece)
    assert round_bytes_of(other) != round_bytes_of(one) and other.digest != one.digest


WORLDS = [pytest.param(2, "gloo", id="gloo-2"),
          pytest.param(3, "gloo", id="gloo-3"),
          pytest.param(2, "nccl", marks=two_gpus, id="nccl-2")]


@pytest.mark.parametrize("world,backend", WORLDS)
def test_replicated_and_sliced_loads_equal_a_single_process_load(tmp_path, world, backend):
    run_ranks(tmp_path, world, "loads", backend)


@pytest.mark.parametrize("world,backend", WORLDS)
def test_a_failing_rank_makes_every_rank_raise(tmp_path, world, backend):
    outcomes = run_ranks(tmp_path, world, "failures", backend)
    victim = world - 1
    for rank, lines in enumerate(outcomes):
        said = dict(line.split(": ", 1) for line in lines)
        if rank == victim:
            assert said["open"].startswith("PermissionError") and "(the test's)" in said["open"]
            assert said["read"].startswith("OSError") and "piece 2" in said["read"]
        else:
            for case in ("open", "read"):
                # The others name the failed rank and what it said.
                assert f"rank {victim}" in said[case] and "(the test's)" in said[case]
        assert "planned different loads" in said["plan"]


def check_later_failures(outcomes, what):
    """Every rank handed out the tensors of the rounds before the failed
    one, and no more, issued the same collectives, and raised: the victim
    its error, the others a DistributedLoadError naming it, at the round
    that told it."""
    for case, seen in zip(what.split(","), zip(*outcomes)):
        victim = seen[0]["victim"]
        for rank, got in enumerate(seen):
            assert got["victim"] == victim and got["where"] == seen[0]["where"], (case, rank)
            assert got["got"] == got["before"] == seen[0]["before"], (case, rank, got["got"])
            assert got["issued"] == seen[0]["issued"], (case, rank)
            assert "(the test's)" in got["error"], (case, rank, got["error"])
            if rank == victim:
                assert got["error"].startswith("OutOfMemoryError" if case == "allocation"
                                                else "OSError"), (case, got["error"])
                if case == "allocation":
                    # Made in the allocation of a round's targets, not by a read.
                    assert "allocate" in got["frames"], got["frames"]
                    assert "_stream_staged" not in got["frames"], got["frames"]
            else:
                assert got["error"].startswith("DistributedLoadError"), (case, got["error"])
                assert got["failed"] == [victim], (case, got["failed"])
                assert f"{got['where']}: rank {victim} failed" in got["error"], \
                    (case, got["error"])
        # The failure came past the first rounds: tensors were handed out,
        # and round agreed points (a status row each) after the first.
        assert seen[0]["before"], case
        assert sum(op == "all_reduce" for op, *_ in seen[0]["issued"]) >= 3, case


@pytest.mark.parametrize("world,backend", WORLDS)
def test_a_read_failing_in_a_later_round_makes_every_rank_raise_there(tmp_path, world, backend):
    what = "read,last read"
    check_later_failures(run_ranks(tmp_path, world, "later " + what, backend), what)


@pytest.mark.parametrize("world,backend", WORLDS)
def test_a_round_short_of_memory_makes_every_rank_raise_before_its_broadcasts(
        tmp_path, world, backend):
    check_later_failures(run_ranks(tmp_path, world, "later allocation", backend), "allocation")


@pytest.mark.parametrize("world,backend", WORLDS)
def test_agreed_points_run_on_the_callers_cpu_group(tmp_path, world, backend):
    run_ranks(tmp_path, world, "groups", backend)


def test_without_a_process_group_it_says_so(tmp_path):
    import svmbatch.torch as sbt

    write_minimal(tmp_path / "one.safetensors", sample())
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        sbt.load_safetensors_distributed(tmp_path / "one.safetensors")
