#!/usr/bin/python3 -IS
# SPDX-License-Identifier: MIT
"""The plain binding in a guest, kernel mode (torch does not fit the
guest): register → QUERY pages, a dma-buf export, READ_FIXED into the
registered buffers, a failed registration that leaves VmPin and the
module's gauges where they were, an Arena pinned by the module, and one
over RLIMIT_MEMLOCK refused before any work (svmbatch.Error, errno and
step).  Prints
TAP.  Needs only the interpreter, a few stdlib modules and the package;
--list-files prints the files it imports (the guest's --file arguments).
"""

import errno
import mmap
import os
import resource
import sys

PACKAGE_DIR = "/usr/lib/python3/dist-packages"
if len(sys.argv) > 2 and sys.argv[1] == "--package":
    PACKAGE_DIR = sys.argv[2]
sys.path.insert(0, PACKAGE_DIR)

import svmbatch  # noqa: E402

PAGE = mmap.PAGESIZE
results = []


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


def gauges():
    s = svmbatch.read_module_stats()
    return s["registrations"], s["pinned_pages"]


def main():
    ctx = svmbatch.Context(svmbatch.Mode.Kernel)
    check("kernel mode", ctx.mode == svmbatch.Mode.Kernel, ctx.info.reason)
    base_pin, base_gauges = svmbatch.process_pinned_bytes(), gauges()

    a, b = bytearray(3 * PAGE + 100), mmap.mmap(-1, 8 * PAGE)
    reg = ctx.register([a, b])
    q = reg.query()
    check("query pages", q["pages"] == reg.pages == reg.pinned_pages, str(q))
    check("VmPin grows by the pages",
          svmbatch.process_pinned_bytes() - base_pin == reg.pages * PAGE)
    check("module gauges count it",
          gauges() == (base_gauges[0] + 1, base_gauges[1] + reg.pages), str(gauges()))
    check("not stale", not reg.stale)

    with reg.export_dmabuf() as d:
        check("dma-buf size", d.size == reg.pages * PAGE, f"{d.size}")
        check("dma-buf offsets", reg.dmabuf_offset(1) == reg.location(1)[1] + sum(
            r[1] for r in reg.ranges[:reg.location(1)[0]]))
        # The dma-buf's inode has its size (dma_buf_getfile sets i_size).
        st_size = os.fstat(d.fileno()).st_size
        check("dma-buf file's size", st_size == d.size == reg.pages * PAGE,
              f"st_size {st_size}, size {d.size}, {reg.pages} pages")

    path = "/tmp/guest-binding-data"
    data = bytes(range(256)) * (8 * PAGE // 256)
    with open(path, "wb") as f:
        f.write(data)
    fd = os.open(path, os.O_RDONLY)
    with svmbatch.Reader(reg, threads=2) as reader:
        res = reader.read([(fd, 0, 8 * PAGE, 1), (fd, 100, 3 * PAGE, 0, 100)])
    os.close(fd)
    check("READ_FIXED into pinned buffers", all(r.ok for r in res) and
          bytes(b[:]) == data and bytes(a[100:100 + 3 * PAGE]) == data[100:100 + 3 * PAGE])
    view = memoryview(reg.buffer(1))
    check("buffer view", view[:4].tobytes() == data[:4])
    view.release()
    reg.close()
    check("unregistered", gauges() == base_gauges and
          svmbatch.process_pinned_bytes() == base_pin)

    gone = mmap.mmap(-1, PAGE)
    try:
        ctx.register([bytearray(PAGE), (0x10000, PAGE)])
        check("bad address refused", False)
    except svmbatch.Error as e:
        check("bad address refused", e.errno == errno.EFAULT and e.buffer_index == 1,
              f"{e.errno} {e.buffer_index}")
    check("nothing left after the failure", gauges() == base_gauges and
          svmbatch.process_pinned_bytes() == base_pin)
    gone.close()

    with svmbatch.Arena(4 << 20, huge_pages=False, context=ctx) as arena:
        r = arena.registration
        check("arena pinned by the module", r.pinned_pages == arena.mapped_bytes // PAGE)
    del r
    check("arena gone", gauges() == base_gauges)
    check("arena over RLIMIT_MEMLOCK refused first", memlock_refused() == 0)


def memlock_refused():
    """In a child without CAP_IPC_LOCK (root gives it up with its uid) and a
    memlock limit of 1 MiB, an Arena of 16 MiB raises svmbatch.Error ENOMEM
    at step validate, naming the limit and what to change, with nothing
    pinned or mapped.  The child's exit status: 0, or the check that failed."""
    pid = os.fork()
    if pid:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    code = 99
    try:
        ctx = svmbatch.Context(svmbatch.Mode.Kernel)  # as root, before the uid goes
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (1 << 20, 1 << 20))
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        pin, size = svmbatch.process_pinned_bytes(), vm_size()
        try:
            svmbatch.Arena(16 << 20, huge_pages=False, context=ctx)
            code = 1
        except svmbatch.Error as e:
            msg = str(e.strerror)
            code = 0
            if e.errno != errno.ENOMEM or e.step != "validate":
                code = 2
            elif not all(w in msg for w in ("RLIMIT_MEMLOCK, 1 MiB", "pinning 16 MiB",
                                              "ulimit -l 16384", "LimitMEMLOCK=16777216",
                                              "--ulimit memlock=16777216")):
                code = 3
            elif svmbatch.process_pinned_bytes() != pin or vm_size() >= size + (2 << 20):
                code = 4
            if code:
                print(f"# {e.errno} {e.step}: {msg}", flush=True)
    finally:
        os._exit(code)


def vm_size():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def list_files():
    """Every stdlib file the test imports, and os.py (Python's prefix landmark)."""
    import encodings.utf_8  # noqa: F401 - what the interpreter starts with
    libdir = os.path.dirname(os.__file__)
    files = {os.path.join(libdir, "os.py")}
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if f and f.startswith(libdir) and os.path.exists(f):
            files.add(f)
    print("\n".join(sorted(files)))


if __name__ == "__main__":
    if "--list-files" in sys.argv:
        list_files()
        sys.exit(0)
    try:
        main()
    except Exception as e:  # report, do not hide, what broke
        results.append((f"uncaught {type(e).__name__}: {e}", False, ""))
    print(f"1..{len(results)}")
    for i, (name, ok, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} {name}" + ("" if ok else f" # {detail}"))
    sys.exit(0 if all(ok for _, ok, _ in results) else 1)
