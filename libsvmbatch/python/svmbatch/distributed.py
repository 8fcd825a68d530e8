# SPDX-License-Identifier: MIT
"""A safetensors checkpoint loaded by the ranks of a torch.distributed
process group together: each rank reads a disjoint share of the bytes
through its own staging ring (the stream of iter_safetensors), and
broadcasts from each share's reader give every rank the tensors, whole
(replicated) or only its own slice of each (tensor parallelism, with a
shard_fn).  The backend moves the bytes: NCCL for CUDA tensors, gloo for
CPU ones.

Every rank runs the same plan, made from the shards' headers: the
tensors in file order cut into pieces (about four a rank a round),
each piece read by one rank (the one with the fewest bytes so far), and
rounds of about round_bytes (by default max(8, 2 x world_size) rings),
but for the last 1 to 2 x round_bytes: there each round takes half of
what is left, down to world_size pieces, so that the last round's
broadcasts and cuts, which no read hides, are small (_round_size).

The agreed points are one all_reduce of a status row per rank (a failure
and its message, and a digest of the plan); at each, a rank that failed
has its error raised, the others a DistributedLoadError naming it: nobody
waits for a rank that will not send.  The first, after every rank opened
the checkpoint, planned, and allocated the first round's targets (the
memory its pieces are broadcast into), is synchronous: a rank without a
plan cannot issue matching collectives.  Then, in each round n, every
rank reads its pieces (unless it failed before: it reads no further),
waits for round n-1's agreed point (started a round ago, so long done),
hands out round n-1's tensors, allocates round n+1's targets, starts round
n's agreed point (asynchronously: the next round reads while it goes)
and, at once, broadcasts each of round n's pieces from its reader
(asynchronously too).  So round n's agreed point tells round n's reads
and round n+1's allocations, and is waited for before any tensor of round
n is handed out and before anyone broadcasts round n+1: every rank raises
at the same round, nobody hands out a tensor of a round not agreed on,
and nobody broadcasts from or into memory some rank could not allocate.
Every rank issues the same collectives in every case: a rank whose read
failed still issues its round's broadcasts (sending junk, from targets
agreed on before), and one that failed skips the reads and allocations
that follow, which no collective waits for.  The agreed points run on a CPU (gloo) group of the
same ranks, so that no rank waits for its GPU before it reads on."""

import contextlib as _contextlib
import hashlib as _hashlib
import typing as _typing

import torch as _torch

from . import _svmbatch
from . import _torch_common as _common
from . import loading as _loading
from .safetensors_format import Entry as _Entry

try:
    import torch.distributed as _dist
    _HAVE_DIST = _dist.is_available()
except ImportError:  # a torch built without distributed
    _dist = None
    _HAVE_DIST = False

__all__ = ["DistributedLoadError", "Slice", "iter_safetensors_distributed",
           "load_safetensors_distributed"]


class Slice(_typing.NamedTuple):
    """A rank's part of a tensor: length indices from start along dim."""

    dim: int
    start: int
    length: int


class DistributedLoadError(RuntimeError):
    """Another rank of the group failed the load (failures: rank -> its
    error), or the ranks planned different loads."""

    def __init__(self, message: str, failures: _typing.Mapping[int, str]) -> None:
        super().__init__(message)
        self.failures = dict(failures)


#: shard_fn(name, shape, rank, world_size): the Slice (or (dim, start,
#: length)) of the tensor that rank keeps, or None for all of it.
_ShardFn = _typing.Callable[[str, tuple, int, int],
                           _typing.Optional[_typing.Tuple[int, int, int]]]
_ProcessGroup = _typing.Any  # a torch.distributed.ProcessGroup, or None for the world

# Bytes of the status row each rank sends at an agreed point: a flag, the
# plan's digest, and its error message (cut to fit).
_ROW = 1024
_DIGEST = 8


def _global_rank(group, rank):
    if group is None:
        return rank
    get = getattr(_dist, "get_global_rank", None) or _dist.distributed_c10d._get_global_rank
    return get(group, rank)


class _Piece:
    """Bytes [begin, end) of the data section of shard s, read by owner.
    kind: "bcast" (into the whole tensor, then broadcast), "own" (a
    rank's contiguous slice, read by that rank alone) or "block" (rows
    [row0, row1) of a tensor some rank slices across its rows: broadcast
    into scratch, each rank takes its part)."""

    __slots__ = ("s", "item", "begin", "end", "owner", "kind", "row0", "row1", "key", "view")

    def __init__(self, s, item, begin, end, owner, kind, row0=0, row1=0):
        self.s, self.item, self.begin, self.end = s, item, begin, end
        self.owner, self.kind, self.row0, self.row1 = owner, kind, row0, row1
        self.key = None
        self.view = None  # its target while its round is being moved


class _Item:
    """One wanted tensor: its entry, torch dtype and shape, every rank's
    slice (None: whole), and the round after which it is complete."""

    __slots__ = ("entry", "dtype", "shape", "slices", "last_round")

    def __init__(self, entry, dtype, shape, slices):
        self.entry, self.dtype, self.shape, self.slices = entry, dtype, shape, slices
        self.last_round = 0


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _slices(shard_fn, name, shape, world):
    """Every rank's slice of a tensor, checked; None where a rank keeps all."""
    out = []
    for r in range(world):
        got = shard_fn(name, tuple(shape), r, world) if shard_fn is not None else None
        if got is None:
            out.append(None)
            continue
        try:
            dim, start, length = (int(x) for x in got)
        except (TypeError, ValueError):
            raise ValueError(f"shard_fn({name!r}, {list(shape)}, rank {r}): {got!r} is not "
                             "(dim, start, length)") from None
        if not 0 <= dim < len(shape) or start < 0 or length < 0 or \
                start + length > shape[dim]:
            raise ValueError(f"shard_fn({name!r}, {list(shape)}, rank {r}): slice {dim=}, "
                             f"{start=}, {length=} is outside the tensor")
        out.append(None if start == 0 and length == shape[dim] else Slice(dim, start, length))
    return out


def _contiguous(sl, shape):
    """Whether a slice is one byte range of the tensor: every dimension
    before its own has size 1."""
    return sl is None or _numel(shape[:sl.dim]) == 1


def _slice_shape(shape, sl):
    if sl is None:
        return tuple(shape)
    return tuple(sl.length if d == sl.dim else n for d, n in enumerate(shape))


class _Plan:
    """What every rank does, the same on every rank: the pieces in file
    order with their readers, cut into rounds (see _round_size)."""

    def __init__(self, shards, wanted, shard_fn, world, piece_bytes, round_bytes):
        self.items = []
        pieces = []
        ends = []  # per item: the index in pieces of its last piece (else the one before)
        load = [0] * world
        digest = _hashlib.blake2b(digest_size=_DIGEST)

        def least():
            return min(range(world), key=lambda r: (load[r], r))

        def add(piece):
            piece.key = f"{len(self.items) - 1}:{piece.begin}"
            load[piece.owner] += piece.end - piece.begin
            pieces.append(piece)

        for s, ((_, _, path), entries) in enumerate(zip(shards, wanted)):
            for e in entries:
                dtype, shape = _common.torch_dtype(e, path)
                item = _Item(e, dtype, tuple(shape), _slices(shard_fn, e.name, shape, world))
                self.items.append(item)
                digest.update(repr((s, e.name, e.begin, e.end, str(dtype), item.shape,
                                    item.slices)).encode())
                if not e.nbytes:
                    ends.append(len(pieces) - 1)
                    continue
                if all(sl is None for sl in item.slices):
                    for a in range(e.begin, e.end, piece_bytes):
                        add(_Piece(s, item, a, min(a + piece_bytes, e.end), least(), "bcast"))
                elif all(_contiguous(sl, shape) for sl in item.slices):
                    # Each rank reads its own slice: no bytes move between ranks.
                    for r, sl in enumerate(item.slices):
                        stride = e.nbytes // shape[sl.dim] if sl is not None else 0
                        lo, hi = (e.begin, e.end) if sl is None else \
                            (e.begin + sl.start * stride, e.begin + (sl.start + sl.length) * stride)
                        for a in range(lo, hi, piece_bytes):
                            add(_Piece(s, item, a, min(a + piece_bytes, hi), r, "own"))
                else:
                    # Blocks of whole rows (dimension 0): each read once,
                    # broadcast, and cut by every rank into its slice.
                    row = e.nbytes // shape[0]
                    per = max(1, piece_bytes // row)
                    for r0 in range(0, shape[0], per):
                        r1 = min(r0 + per, shape[0])
                        add(_Piece(s, item, e.begin + r0 * row, e.begin + r1 * row, least(),
                                   "block", r0, r1))
                ends.append(len(pieces) - 1)
        # The rounds, in file order: each takes pieces until it holds the
        # size _round_size gives it as it begins (or more, by less than a
        # piece).
        self.rounds = [[]]
        round_of = []
        floor = world * piece_bytes
        left = sum(p.end - p.begin for p in pieces)
        want = _round_size(left, floor, round_bytes)
        size = 0
        for p in pieces:
            if size >= want:
                self.rounds.append([])
                want = _round_size(left, floor, round_bytes)
                size = 0
            self.rounds[-1].append(p)
            size += p.end - p.begin
            left -= p.end - p.begin
            round_of.append(len(self.rounds) - 1)
        for item, end in zip(self.items, ends):
            # A tensor of no bytes is complete with the round of the piece
            # before it (the first round if none).
            item.last_round = round_of[end] if end >= 0 else 0
        # The round boundaries, which every rank must cut alike.
        digest.update(repr((piece_bytes, round_bytes, [len(r) for r in self.rounds])).encode())
        self.digest = digest.digest()


def _round_size(left, floor, round_bytes):
    """The size of a round that begins with left bytes of the plan still
    to read.  round_bytes while 2 x round_bytes or more are left; then half
    of what is left, but not less than floor (world_size pieces: about one
    a rank, so every rank still reads in every round); and all of it once
    less than 1.5 x floor is left (so no runt round: the last holds floor
    / 2 to 1.5 x floor).  The last round's broadcasts and cuts come after
    every read, nothing hiding them: tapering the last round_bytes to 2 x
    round_bytes of a checkpoint to about round_bytes / 2, round_bytes / 4,
    ... floor makes that tail about floor bytes instead of round_bytes,
    while each round's broadcasts can still hide behind the next round's
    reads (of half the bytes: as long as the group broadcasts at least
    twice as fast as it reads, as over NVLink).  It costs about log2(round_bytes /
    floor) + 1 more rounds (with the default pieces floor is round_bytes
    / 4: 2 or 3 more), each an agreed point that the reads hide but for
    its calls.  A plan of less than 1.5 x floor is one round."""
    if 2 * left < 3 * floor:
        return left
    return min(round_bytes, max(floor, left // 2))


# The world's gloo twin, made at the first load that needs it: (the world
# group it was made for, the twin).  A new init_process_group() gets a new
# one.
_world_cpu_group = [None, None]


def _ranks(group):
    """The global ranks of group's members, in group rank order."""
    return [_global_rank(group, r) for r in range(_dist.get_world_size(group))]


def _cpu_group_for(group, cpu_group, backend):
    """The group the agreed points run on: cpu_group (checked: the same
    ranks as group, in the same order); else group itself where it is not
    NCCL; else, for the world, its gloo twin (made by every rank's first
    load, as new_group() asks of the whole world); else (a subgroup, whose
    twin only the caller can make) group itself."""
    if cpu_group is not None:
        if _ranks(cpu_group) != _ranks(group):
            raise ValueError(f"cpu_group has the ranks {_ranks(cpu_group)}, the group "
                             f"{_ranks(group)}: they must be the same ranks in the same order")
        return cpu_group
    if backend != "nccl" or not _dist.is_gloo_available():
        return group
    world = _dist.group.WORLD
    if group is not None and group is not world:
        return group
    if _world_cpu_group[0] is not world:
        _world_cpu_group[:] = [world, _dist.new_group(backend="gloo")]
    return _world_cpu_group[1]


class _Group:
    """The process group: this rank, the world, the agreed points."""

    def __init__(self, group, cpu_group):
        if not _HAVE_DIST:
            raise RuntimeError("torch.distributed is absent from this torch "
                               f"({_torch.__version__})")
        if not _dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialised: call "
                               "init_process_group() first")
        self.group = group
        self.rank = _dist.get_rank(group)
        self.world = _dist.get_world_size(group)
        if self.rank < 0:
            raise ValueError("this process is not a member of the group")
        self.backend = str(_dist.get_backend(group))
        self.agree_group = _cpu_group_for(group, cpu_group, self.backend)
        # The status rows travel where the agreeing group moves bytes: NCCL
        # only between GPUs (set to the load's device).
        self.agree_backend = str(_dist.get_backend(self.agree_group))
        self.status_device = _torch.device("cpu")

    def src(self, rank):
        return _global_rank(self.group, rank)

    def start(self, failure, digest, where):
        """Begin an agreed point (where: what it is, for the error): this
        rank's status row, all-reduced asynchronously; finish() waits."""
        row = bytearray(_ROW)
        row[1:1 + _DIGEST] = digest
        if failure is not None:
            row[0] = 1
            text = f"{type(failure).__name__}: {failure}".encode()[:_ROW - 1 - _DIGEST]
            row[1 + _DIGEST:1 + _DIGEST + len(text)] = text
        rows = _torch.zeros((self.world, _ROW), dtype=_torch.uint8)
        rows[self.rank] = _torch.frombuffer(row, dtype=_torch.uint8)
        rows = rows.to(self.status_device)
        work = _dist.all_reduce(rows, group=self.agree_group, async_op=True)
        return rows, work, failure, where

    def finish(self, started):
        """End an agreed point: every rank learns which ranks failed; a
        failed rank raises its own error (the one it sent), the others
        DistributedLoadError."""
        rows, work, failure, where = started
        work.wait()
        rows = rows.cpu()
        failures = {}
        digests = set()
        for r in range(self.world):
            raw = bytes(rows[r].tolist())
            if raw[0]:
                failures[r] = raw[1 + _DIGEST:].rstrip(b"\0").decode(errors="replace")
            else:
                digests.add(raw[1:1 + _DIGEST])
        if failure is not None:
            raise failure
        if failures:
            said = "; ".join(f"rank {r}: {m}" for r, m in sorted(failures.items()))
            raise DistributedLoadError(f"distributed load {where}: rank"
                                       f"{'s' if len(failures) > 1 else ''} "
                                       f"{', '.join(map(str, sorted(failures)))} failed ({said})",
                                       failures)
        if len(digests) > 1:
            raise DistributedLoadError(f"distributed load {where}: the ranks planned different "
                                       "loads (different files, names, or shard_fn)", {})

    def agree(self, failure, digest, where):
        """A synchronous agreed point."""
        self.finish(self.start(failure, digest, where))


def _default_device(device, backend):
    if device is None:
        device = "cuda" if backend == "nccl" else "cpu"
    device = _torch.device("cuda", device) if isinstance(device, int) else _torch.device(device)
    if device.type == "cuda":
        device = _common.cuda_device(device, "distributed load")
    elif backend == "nccl":
        raise ValueError(f"device {device}: NCCL moves CUDA tensors only")
    return device


def _stream(opened, plan, rank, threads, context, staging_bytes, chunk_bytes, target):
    """(key, view) of this rank's pieces in file order, read through its
    reader (loading._read_rounds over the pieces as entries of bytes, a
    round of the reader's at a time)."""
    shards, _, _, device, direct = opened
    mine = [[] for _ in shards]
    for pieces in plan.rounds:
        for p in pieces:
            if p.owner == rank:
                mine[p.s].append(_Entry(p.key, "U8", (p.end - p.begin,), p.begin, p.end))
    by_key = {p.key: p for pieces in plan.rounds for p in pieces if p.owner == rank}
    return _loading._read_rounds(shards, mine, lambda e: target(by_key[e.name]), device, None,
                                 threads, context, staging_bytes, chunk_bytes, direct,
                                 _loading._round_bytes(0, staging_bytes))


def iter_safetensors_distributed(
        path: _loading._Path, device: _typing.Union[_torch.device, str, int, None] = None,
        dtype: _typing.Optional[_torch.dtype] = None, *, group: _ProcessGroup = None,
        shard_fn: _typing.Optional[_ShardFn] = None, names: _loading._Names = None,
        threads: int = 0, context: _typing.Optional[_svmbatch.Context] = None,
        staging_bytes: int = 64 << 20, chunk_bytes: int = 4 << 20,
        io: str = "auto", round_bytes: int = 0, cpu_group: _ProcessGroup = None
) -> _typing.Iterator[tuple[str, _torch.Tensor]]:
    """(name, tensor) of a safetensors checkpoint on every rank of group
    (None: the world), in file order, each rank reading only its share of
    the bytes.  Every rank of the group must call it with the same
    arguments.  path, dtype, names, threads, context, staging_bytes,
    chunk_bytes and io are iter_safetensors'; device defaults to the
    current CUDA device under NCCL, else the CPU.  shard_fn(name, shape,
    rank, world_size) -> (dim, start, length) or None gives each rank's
    slice of each tensor (shape is torch's; None: the whole tensor); every
    rank then gets only its slice, contiguous.  round_bytes: the bytes the
    group reads between two agreed points, which bounds each rank's scratch
    (0: max(8, 2 x world_size) x staging_bytes); the last rounds are
    smaller: once less than 2 x round_bytes is left, each takes half of
    it, but not less than world_size pieces (round_bytes / 4).  A rank's failure (a file
    it cannot open or read, a bad shard_fn result) is raised on it, and a
    DistributedLoadError on every other rank, at the next agreed point.
    cpu_group: a group of the same ranks in the same order whose
    collectives run on the CPU (gloo; vLLM's GroupCoordinator.cpu_group),
    for the agreed points; None: the world's own gloo twin where group is
    the world under NCCL (made at the first such load), else group
    itself, whose NCCL agreed points each wait for the GPU."""
    comm = _Group(group, cpu_group)
    device = _default_device(device, comm.backend)
    if comm.agree_backend == "nccl":
        comm.status_device = device
    staging_bytes = max(2 << 20, staging_bytes)
    # Each agreed point waits for the round's reads on every rank (and,
    # agreeing through NCCL, for the GPU): rounds of several rings keep
    # those waits few.
    round_bytes = round_bytes or max(8, 2 * comm.world) * staging_bytes
    # A piece is broadcast (one collective, its Python around it) once read:
    # each rank reads about 4 a round, in chunk_bytes through its ring.
    piece_bytes = max(64 << 10, round_bytes // (4 * comm.world))
    load = _DistributedLoad(comm, group, device, dtype)
    with _contextlib.ExitStack() as stack:
        load.open(stack, path, names, io, shard_fn, piece_bytes, round_bytes,
                  (threads, context, staging_bytes, chunk_bytes))
        rounds = len(load.plan.rounds)
        for n in range(rounds):
            load.read(n)
            if n:
                # Raises on every rank if round n - 1 failed anywhere: before
                # anyone broadcasts round n.
                yield from load.hand_out(n - 1)
            load.allocate_next(n)
            load.move(n)
        yield from load.hand_out(rounds - 1)


class _DistributedLoad:
    """One rank's side of iter_safetensors_distributed: its outputs and
    scratch blocks, its reader's stream of pieces, the failure it will
    tell, and a method per step of a round (read, hand out, allocate the
    next, agree and move)."""

    def __init__(self, comm, group, device, dtype):
        self.comm = comm
        self.group = group
        self.device = device
        self.dtype = dtype
        self.outputs = {}
        self.scratch = {}
        self.plan = None
        self.stream = None
        self.failure = None
        self.digest = bytes(_DIGEST)
        self.handed = 0
        self.moved = []  # the previous round's broadcasts: (piece, work)
        self.agreeing = None  # the previous round's agreed point, started

    def output(self, item):
        t = self.outputs.get(item.entry.name)
        if t is None:
            t = self.outputs[item.entry.name] = _torch.empty(
                _slice_shape(item.shape, item.slices[self.comm.rank]), dtype=item.dtype,
                device=self.device)
        return t

    def target(self, p):
        """The memory a piece is read or received into (made once: it is
        asked for as the round is allocated, read and moved)."""
        if p.view is not None:
            return p.view
        if p.kind == "block":
            p.view = self.scratch[p.key] = _torch.empty(p.end - p.begin, dtype=_torch.uint8,
                                                        device=self.device)
            return p.view
        sl = p.item.slices[self.comm.rank] if p.kind == "own" else None
        flat = _common.bytes_of(self.output(p.item))
        e = p.item.entry
        lo = e.begin if sl is None else e.begin + sl.start * (e.nbytes // p.item.shape[sl.dim])
        p.view = flat[p.begin - lo:p.end - lo]
        return p.view

    def cut(self, p):
        """This rank's part of a broadcast block, into its tensor."""
        item = p.item
        sl = item.slices[self.comm.rank]
        block = self.scratch.pop(p.key).view(item.dtype).view(
            (p.row1 - p.row0,) + item.shape[1:])
        out = self.output(item)
        if sl is None:
            out[p.row0:p.row1].copy_(block)
        elif sl.dim == 0:
            a, b = max(p.row0, sl.start), min(p.row1, sl.start + sl.length)
            if a < b:
                out[a - sl.start:b - sl.start].copy_(block[a - p.row0:b - p.row0])
        else:
            out[p.row0:p.row1].copy_(block.narrow(sl.dim, sl.start, sl.length))

    def allocate(self, n):
        """Round n's targets of the pieces it moves, before the agreed point
        that precedes its broadcasts: a rank short of memory fails there,
        not halfway through them.  (A rank's own slices are made as read.)"""
        for p in self.plan.rounds[n]:
            if p.kind != "own":
                self.target(p)

    def open(self, stack, path, names, io, shard_fn, piece_bytes, round_bytes, reading):
        """Open and plan the checkpoint, start the reader's stream, make
        round 0's targets; then the first agreed point, where every rank
        learns whether all of them could."""
        try:
            opened = stack.enter_context(_loading._opened(path, self.device, names, io))
            self.plan = _Plan(opened[0], opened[1], shard_fn, self.comm.world, piece_bytes,
                              round_bytes)
            self.digest = self.plan.digest
            self.stream = _stream(opened, self.plan, self.comm.rank, *reading, self.target)
            stack.callback(self.stream.close)
            self.allocate(0)
        except Exception as e:  # told to every rank at the first agreed point
            self.failure = e
        self.comm.agree(self.failure, self.digest, "opening the checkpoint")

    def read(self, n):
        """This rank's pieces of round n, through its reader (a rank that
        failed reads no further; a failure is told at the round's agreed
        point)."""
        if self.failure is not None:
            return
        try:
            for p in self.plan.rounds[n]:
                if p.owner == self.comm.rank:
                    key, _ = next(self.stream)
                    if key != p.key:
                        raise AssertionError(f"piece {key} read where {p.key} was planned")
        except Exception as e:
            self.failure = e

    def agreed(self):
        """The previous round's agreed point, waited for; if it raises,
        the round's broadcasts (which every rank issued) end first."""
        started, self.agreeing = self.agreeing, None
        try:
            self.comm.finish(started)
        except BaseException:
            for _, work in self.moved:
                with _contextlib.suppress(Exception):  # the agreed point's error says why
                    work.wait()
            self.moved.clear()
            raise

    def hand_out(self, n):
        """Round n agreed on, its blocks cut, and the tensors complete by
        its end, yielded."""
        self.agreed()
        for p, work in self.moved:
            work.wait()  # the current stream waits for the broadcast
            if p.kind == "block":
                self.cut(p)
        self.moved.clear()
        for p in self.plan.rounds[n]:
            p.view = None  # nothing here refers to a tensor handed out
        items = self.plan.items
        while self.handed < len(items) and items[self.handed].last_round <= n:
            item = items[self.handed]
            self.handed += 1
            t = self.outputs.pop(item.entry.name, None)
            if t is None:
                t = self.output(item)
                del self.outputs[item.entry.name]
            yield item.entry.name, _loading._converted(t, self.dtype)
            del t

    def allocate_next(self, n):
        """Round n + 1's targets, told at round n's agreed point, which
        every rank waits for before it broadcasts into them."""
        try:
            if self.failure is None and n + 1 < len(self.plan.rounds):
                self.allocate(n + 1)
        except Exception as e:
            self.failure = e

    def move(self, n):
        """Start round n's agreed point, then its broadcasts.

        Asynchronous: the current stream does not wait for the broadcasts,
        so the next round's copies out of the ring run while they do; they
        are waited for (long done by then) only as the round's tensors are
        handed out.  Their targets were agreed on at the previous agreed
        point; a rank whose read failed sends what its targets hold, and
        the round's agreed point stops everyone before they are handed
        out."""
        pieces = self.plan.rounds[n]
        self.agreeing = self.comm.start(self.failure, self.digest,
                                        f"round {n + 1} of {len(self.plan.rounds)}")
        self.moved = [(p, _dist.broadcast(self.target(p), src=self.comm.src(p.owner),
                                          group=self.group, async_op=True))
                      for p in pieces if p.kind != "own"]


def load_safetensors_distributed(
        path: _loading._Path, device: _typing.Union[_torch.device, str, int, None] = None,
        dtype: _typing.Optional[_torch.dtype] = None, *, group: _ProcessGroup = None,
        shard_fn: _typing.Optional[_ShardFn] = None, names: _loading._Names = None,
        threads: int = 0, context: _typing.Optional[_svmbatch.Context] = None,
        staging_bytes: int = 64 << 20, chunk_bytes: int = 4 << 20,
        io: str = "auto", round_bytes: int = 0,
        cpu_group: _ProcessGroup = None) -> dict[str, _torch.Tensor]:
    """iter_safetensors_distributed as a dict name -> tensor: on every
    rank what load_safetensors returns (replicated), or each rank's slices
    where shard_fn says.  It keeps every tensor anyway, so its rounds are
    larger: round_bytes 0 is max(32, 8 x world_size) x staging_bytes."""
    if not round_bytes and _HAVE_DIST and _dist.is_initialized():
        # Fewer agreed points and broadcasts; the iterator keeps its rounds
        # small, since it holds two rounds of tensors the caller may not.
        world = _dist.get_world_size(group)
        if world > 0:
            round_bytes = max(32, 8 * world) * max(2 << 20, staging_bytes)
    return dict(iter_safetensors_distributed(
        path, device, dtype, group=group, shard_fn=shard_fn, names=names, threads=threads,
        context=context, staging_bytes=staging_bytes, chunk_bytes=chunk_bytes, io=io,
        round_bytes=round_bytes, cpu_group=cpu_group))
