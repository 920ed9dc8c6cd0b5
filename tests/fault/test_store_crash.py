"""Crash tests: a real child process appends to a Store and is killed with SIGKILL mid-stream.

The child (``store_writer.py``) acknowledges every returned append on stdout. After the kill
the store is reopened in this process (recovery runs) and checked against those acks:

* ``sync``: every acknowledged batch is there, byte for byte, at its acked offsets.
* ``async``: what is there is a prefix of what was appended (no holes, no torn or corrupt
  frame) and the acknowledged data lost fits the documented window for a process crash
  (StoreConfig docstring): at most what the two cache blocks hold (``2 * cache_block_bytes``)
  and nothing acknowledged longer ago than ``cache_flush_interval_ms`` (plus slack).
* both: offsets are dense, per-partition order is kept, the store opens and takes appends.

Children are killed and reaped by pid (fixture ``spawn``); each test takes about 0.2-2 s.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lib.records import decode_frames, encode_batch, encode_frame, iter_frames
from storage.datalog import CHUNK
from storage.store import Store
from tests.fault.store_writer import (
    CACHE_BLOCK_BYTES,
    CACHE_FLUSH_INTERVAL_MS,
    PARTITIONS,
    STORE_ID,
    TOPIC,
    config,
    make_record,
    parse_value,
)

REPO = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("store_writer.py")
ACK_WAIT_S = 3.0  # the most a test waits for acks before it kills anyway
# Async loss window for a process crash: what the two cache blocks hold, and nothing acked
# longer ago than the flush interval (plus the flusher's poll step and generous scheduling slack
# for a loaded test machine: the test is about "bounded", not about the exact milliseconds).
AGE_WINDOW_S = CACHE_FLUSH_INTERVAL_MS / 1e3 * 1.5 + 0.5


@dataclass
class Run:
    """What one killed child told us: its run number, first offsets, acknowledged appends."""

    run: int
    starts: list[int] | None = None
    acks: list[tuple[int, int, int]] = field(default_factory=list)
    ack_seen: list[float] = field(default_factory=list)  # when this process read each ack
    killed_at: float = 0.0
    returncode: int | None = None


class Child:
    """One store_writer.py process; a thread collects its stdout protocol lines."""

    def __init__(self, root: Path, durability: str, run: int, log_dir: Path,
                 extra: tuple[str, ...] = ()) -> None:
        self.info = Run(run)
        self.opened = self.eof = False
        self._cond = threading.Condition()
        self.stderr_path = log_dir / f"writer-{run}.stderr"
        env = dict(os.environ, PYTHONPATH=str(REPO))
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-u", str(WRITER), "--dir", str(root),
                 "--durability", durability, "--run", str(run), *extra],
                cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if not raw.endswith(b"\n"):
                break  # cannot happen: each line is one atomic pipe write
            words = raw.split()
            with self._cond:
                if words[0] == b"opening":
                    self.opened = True
                elif words[0] == b"start":
                    self.info.starts = [int(w) for w in words[1:]]
                else:
                    p, base, last = map(int, words)
                    self.info.acks.append((p, base, last))
                    self.info.ack_seen.append(time.monotonic())
                self._cond.notify_all()
        with self._cond:
            self.eof = True
            self._cond.notify_all()

    def wait(self, what: str, count: float = 0) -> None:
        """Wait for the "opening" or "start" line, for ``count`` acks (at most ACK_WAIT_S) or
        for ``count`` seconds of acks ("seconds")."""
        def ready() -> bool:
            if what == "acks":
                return self.eof or len(self.info.acks) >= count
            if what == "seconds":
                return self.eof
            return self.eof or (self.opened if what == "opening" else self.info.starts is not None)

        timeout = {"acks": ACK_WAIT_S, "seconds": count}.get(what, 10.0)
        with self._cond:
            self._cond.wait_for(ready, timeout=timeout)
            alive = not self.eof
        assert alive, f"writer ended before it was killed: {self.stderr()}"

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-2000:]

    def kill(self) -> Run:
        """SIGKILL by pid (if still running), reap it, collect every ack it managed to write."""
        if self.proc.returncode is None:
            self.info.killed_at = time.monotonic()
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.info.returncode = self.proc.wait(timeout=10)
            self._reader.join(timeout=10)
            assert self.proc.stdout is not None
            self.proc.stdout.close()
        return self.info


@pytest.fixture
def spawn(tmp_path):
    """Start writers; every one still running at the end is killed and reaped by pid."""
    children: list[Child] = []
    data = tmp_path / "data"

    def start(durability: str, run: int, *extra: str) -> Child:
        child = Child(data, durability, run, tmp_path, extra)
        children.append(child)
        return child

    start.data = data  # type: ignore[attr-defined]
    yield start
    for child in children:
        child.kill()


def kill_at(child: Child, moment: str, count: float = 0) -> Run:
    child.wait(moment, count)
    run = child.kill()
    assert run.returncode == -signal.SIGKILL, f"writer died on its own: {child.stderr()}"
    return run


# ------------------------------------------------------------------------ verification


def read_partition(store: Store, p: int) -> tuple[list[bytes], list[int]]:
    """Every frame of partition ``p`` (CRC-checked by decode_frames) and its offset."""
    frames: list[bytes] = []
    offsets: list[int] = []
    offset = store.earliest(p)
    while offset < store.latest(p):
        res = store.read(p, offset, 1 << 18)
        records = decode_frames(res.frames, res.offsets, p)  # raises on any bad CRC
        assert records and res.next_offset == offset + len(records)
        frames += [bytes(f) for f in iter_frames(res.frames)]
        offsets += [int(o) for o in res.offsets]
        offset = res.next_offset
    return frames, offsets


def batch_bytes(p: int, run: int, first_seq: int, count: int) -> int:
    """Data-log bytes of one appended batch: chunk header plus its frames."""
    return CHUNK.size + sum(len(encode_frame(make_record(p, run, s)))
                            for s in range(first_seq, first_seq + count))


def check_partition(store: Store, p: int, runs: list[Run], durability: str,
                    lost: dict[int, int], lost_age: dict[int, float]) -> int:
    frames, offsets = read_partition(store, p)
    latest = store.latest(p)
    assert store.earliest(p) == 0 and offsets == list(range(latest)), f"p{p}: offsets not dense"
    opened = [r for r in runs if r.starts is not None]
    assert opened and opened[0].starts == [0] * len(PARTITIONS)
    for i, run in enumerate(opened):
        lo = run.starts[p]
        hi = opened[i + 1].starts[p] if i + 1 < len(opened) else latest
        assert lo <= hi <= latest, f"p{p} run {run.run}: next run starts before it ({lo}..{hi})"
        # What survives of this run is exactly its first hi - lo records, in order.
        for o in range(lo, hi):
            expected = encode_frame(make_record(p, run.run, o - lo))
            if frames[o] != expected:
                got = decode_frames(frames[o])[0]
                pytest.fail(f"p{p} offset {o}: got {parse_value(got.value)}, "
                            f"expected {(p, run.run, o - lo)} (byte mismatch)")
        acks = [(base, last, seen) for (q, base, last), seen in zip(run.acks, run.ack_seen,
                                                                    strict=True) if q == p]
        next_base = lo
        for base, last, seen in acks:  # one thread per partition: acks come in offset order
            assert base == next_base and last >= base, f"p{p} run {run.run}: ack gap at {base}"
            next_base = last + 1
            if last < hi:
                continue  # present, and checked byte for byte above
            assert base >= hi, f"p{p} run {run.run}: batch {base}..{last} cut in the middle"
            assert durability == "async", f"p{p}: acked sync batch {base}..{last} lost"
            lost[run.run] = lost.get(run.run, 0) + batch_bytes(p, run.run, base - lo,
                                                               last - base + 1)
            # the ack was written before we read it: the batch is at least this old
            lost_age[run.run] = max(lost_age.get(run.run, 0.0), run.killed_at - seen)
    return latest


def verify(root: Path, durability: str, runs: list[Run],
           cache_block_bytes: int = CACHE_BLOCK_BYTES) -> dict[str, float]:
    """Reopen in-process (recovery), check every partition against the acks, append more."""
    cfg = config(durability, cache_block_bytes)
    lost: dict[int, int] = {}
    lost_age: dict[int, float] = {}
    with Store(root, TOPIC, STORE_ID, PARTITIONS, cfg) as store:
        latest = {p: check_partition(store, p, runs, durability, lost, lost_age)
                  for p in PARTITIONS}
        for run, nbytes in lost.items():
            assert nbytes <= 2 * cache_block_bytes, (
                f"run {run}: lost {nbytes} acked bytes, more than the two cache blocks hold "
                f"({2 * cache_block_bytes})")
            assert lost_age[run] <= AGE_WINDOW_S, (
                f"run {run}: lost a batch acked {lost_age[run]:.3f} s before the kill; "
                f"the flush interval is {CACHE_FLUSH_INTERVAL_MS} ms")
        # The recovered store keeps working: appends continue at the recovered offsets.
        for p in PARTITIONS:
            assert store.append(p, encode_batch([make_record(p, 99, 0)])) == (latest[p],) * 2
    with Store(root, TOPIC, STORE_ID, PARTITIONS, cfg) as store:  # and a clean reopen keeps it
        for p in PARTITIONS:
            assert store.latest(p) == latest[p] + 1
    return {"records": sum(latest.values()), "acks": sum(len(r.acks) for r in runs),
            "lost_bytes": sum(lost.values()), "lost_age": max(lost_age.values(), default=0.0)}


# ------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("durability", ["sync", "async"])
@pytest.mark.parametrize("kill_after_acks", [30, 600, 2500])
def test_kill_mid_append_then_recover(spawn, durability, kill_after_acks):
    run = kill_at(spawn(durability, 0), "acks", kill_after_acks)
    assert run.acks, "the writer acknowledged nothing before the kill"
    verify(spawn.data, durability, [run])


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_repeated_kills_across_reopen_and_append_cycles(spawn, durability):
    """Kill, reopen in a new child (recovery), append, kill again...; recovery is repeatable.

    The "opening" and "start" kills land in or right after the child's own recovery.
    """
    moments = [("acks", 400), ("opening", 0), ("acks", 1200), ("start", 0), ("acks", 300)]
    runs = [kill_at(spawn(durability, i), moment, count)
            for i, (moment, count) in enumerate(moments)]
    assert sum(len(r.acks) for r in runs) >= 3
    verify(spawn.data, durability, runs)


def test_async_loss_is_bounded_by_the_flush_interval_when_blocks_do_not_fill(spawn):
    """A trickle of appends into big cache blocks: only the flush interval gets data written,
    so a kill may lose the last interval's acks but nothing older."""
    block = 4 << 20  # ~1.5 s of this trickle is well under one block
    child = spawn("async", 0, "--cache-block-bytes", str(block), "--pace-ms", "10")
    child.wait("start")  # the 1.5 s count from the store's opening, not the interpreter's start
    child.wait("seconds", 1.5)
    child.wait("acks", 120)  # a loaded machine paces slower: up to ACK_WAIT_S more for enough
    run = kill_at(child, "acks", 0)
    assert len(run.acks) > 100
    stats = verify(spawn.data, "async", [run], cache_block_bytes=block)
    assert stats["records"] > 0  # the interval flushes wrote data although no block filled
