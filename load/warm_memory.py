"""Touch the machine's free memory once, and say what a page's first touch cost.

On a freshly booted VM (these development machines are Firecracker VMs) the host backs guest
memory on its first touch: measured on one, 20 GiB touched in 55 s of kernel time (10 us a
page) against 2.4 s for 4 GiB once touched (2.3 us). Every page the broker's page cache or
heap takes from the kernel's free lists pays that until the guest has touched it once, so a
benchmark that writes a lot (10,000 topics: 0.53 of one topic's rate on a fresh VM, 0.65
right after this ran) reads low for the first gigabytes of a VM's life. Run this once after a
VM boots, before comparing runs; it prints one JSON object (pages touched, microseconds per
page in the first pass and in a second pass over the last chunk, and their ratio).

    .venv/bin/python -m load.warm_memory [--gib G]   (default: 90 % of MemAvailable)
"""
from __future__ import annotations

import argparse
import json
import mmap
import time

import numpy as np

PAGE = mmap.PAGESIZE
CHUNK = 256 << 20  # touched and given back a chunk at a time: never more held than this


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def touch(nbytes: int) -> float:
    """Map ``nbytes`` of anonymous memory, write one byte per page, unmap; the seconds it
    took (the page faults and the kernel's zeroing are the cost)."""
    started = time.perf_counter()
    area = mmap.mmap(-1, nbytes)
    try:
        pages = np.frombuffer(area, np.uint8)
        pages[::PAGE] = 1
        del pages
    finally:
        area.close()
    return time.perf_counter() - started


def warm(total: int) -> dict[str, float | int]:
    """Touch ``total`` bytes a chunk at a time, then the last chunk again (the warm cost)."""
    chunk = min(CHUNK, max(PAGE, total))
    seconds, done = 0.0, 0
    while done < total:
        size = min(chunk, total - done)
        seconds += touch(size)
        done += size
    again = touch(chunk)
    first = seconds / (done / PAGE) * 1e6
    second = again / (chunk / PAGE) * 1e6
    return {"gib": round(done / 2**30, 2), "pages": done // PAGE, "seconds": round(seconds, 2),
            "first_pass_us_per_page": round(first, 3),
            "second_pass_us_per_page": round(second, 3),
            "first_vs_second": round(first / second, 2) if second else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.warm_memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gib", type=float, default=None,
                   help="how much to touch (default: 90%% of MemAvailable)")
    args = p.parse_args(argv)
    free = available_bytes()
    total = int(free * 0.9) if args.gib is None else int(args.gib * 2**30)
    if total <= 0:
        p.error("--gib must be > 0")
    if total > free:
        p.error(f"--gib {args.gib} is more than the {free / 2**30:.1f} GiB available")
    print(json.dumps(warm(total), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
