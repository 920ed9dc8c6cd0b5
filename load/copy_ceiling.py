"""The ceiling of a copy, for ``load/bench_replication.py``: what moving a record's bytes from a
leader to a follower costs at least on this machine, whatever a broker does around it.

A leader process answers each request with 2 MiB from memory (a cache block's frames) and
their CRC; a follower process receives each answer into one buffer, checks the CRC, copies
it into one of two cache blocks and writes full blocks to a file (the page cache, as a flusher does;
the file starts over past 256 MiB, so pages are freed and taken again, as the page cache
window makes a broker's). No framing, no index, no Python per record: the CPU microseconds
per KiB of each process are the bytes' own cost (a socket's copies, the CRC, the memory
copies, the page cache).

    python -m load.copy_ceiling [--mib 512]    (prints one JSON object)
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import socket
import sys
import tempfile
from pathlib import Path

from lib.records.layout import crc32

ANSWER = 2 << 20  # what a follower's fetch of a busy partition brings
BLOCK = 8 << 20  # StoreConfig.cache_block_bytes
RESTART_AT = 256 << 20


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _leader(ports, answers: int, out) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ports.put(listener.getsockname()[1])
        conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    block = memoryview(bytearray(os.urandom(BLOCK)))
    request = bytearray(16)
    start = _cpu()
    for i in range(answers):
        conn.recv_into(request)
        frames = block[(i * ANSWER) % BLOCK:][:ANSWER]
        conn.sendall(crc32(frames).to_bytes(4, "big"))
        conn.sendall(frames)
    out.put(("leader", _cpu() - start))


def _follower(port: int, answers: int, path: str, out) -> None:
    conn = socket.create_connection(("127.0.0.1", port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    answer = memoryview(bytearray(ANSWER + 4))
    blocks = [bytearray(BLOCK), bytearray(BLOCK)]  # a store's pair: memory used again
    block, fill, written = blocks[0], 0, 0
    start = _cpu()
    for _ in range(answers):
        conn.sendall(b"\x01" * 16)
        got = 0
        while got < len(answer):
            got += conn.recv_into(answer[got:])
        if crc32(answer[4:]) != int.from_bytes(answer[:4], "big"):
            raise SystemExit("an answer arrived damaged")
        if fill + ANSWER > BLOCK:
            os.pwrite(fd, memoryview(block)[:fill], written)
            written, fill = written + fill, 0
            blocks.reverse()
            block = blocks[0]
            if written > RESTART_AT:
                os.ftruncate(fd, 0)
                written = 0
        block[fill:fill + ANSWER] = answer[4:]
        fill += ANSWER
    out.put(("follower", _cpu() - start))
    os.close(fd)


def measure(mib: int) -> dict[str, float]:
    """CPU microseconds per KiB copied: the leader's, the follower's and their sum."""
    answers = max(1, (mib << 20) // ANSWER)
    ctx = multiprocessing.get_context("spawn")  # no state of the caller's (gRPC) is inherited
    out, ports = ctx.Queue(), ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="tubeq-copy-ceiling-") as tmp:
        procs = [ctx.Process(target=_leader, args=(ports, answers, out))]
        procs[0].start()
        try:
            port = ports.get(timeout=60)
            procs.append(ctx.Process(target=_follower,
                                     args=(port, answers, str(Path(tmp) / "copy.data"), out)))
            procs[1].start()
            spent = dict(out.get(timeout=600) for _ in procs)
        finally:
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.kill()
    kib = answers * ANSWER / 1024
    per = {f"{name}_us_per_kib": round(s * 1e6 / kib, 3) for name, s in spent.items()}
    per["copy_us_per_kib"] = round(sum(spent.values()) * 1e6 / kib, 3)
    return per


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.copy_ceiling", description=__doc__)
    p.add_argument("--mib", type=int, default=512)
    args = p.parse_args(argv)
    if args.mib < 2:
        p.error("--mib must be >= 2")
    print(json.dumps(measure(args.mib)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
