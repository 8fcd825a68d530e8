# SPDX-License-Identifier: MIT
"""The page cache, for the benchmarks' cold loads."""

import os


def drop_caches():
    """Write back, then drop the page cache; False where that is refused."""
    os.sync()  # dirty pages are not dropped
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False
