"""How a server process tells its parent where it listens: a ``ready.json`` file.

Servers bind port 0 (or a given port), then write their real addresses with :func:`write_ready`
(temp file + rename, so a reader never sees half a file). The CLI and the tests wait for it with
:func:`wait_ready` instead of sleeping or parsing logs.
"""
from __future__ import annotations

import json
import os
import random
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

READY_FILE = "ready.json"


def one_blas_thread() -> None:
    """Our servers and the CLI call this before numpy loads: OpenBLAS otherwise starts a
    thread per core that spins for ~0.1 s of CPU at every process start (0.17 against 0.07 s
    to import numpy here), and nothing of ours multiplies matrices. A user's setting wins."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def write_ready(data_dir: str | Path, info: dict[str, Any]) -> Path:
    path = Path(data_dir) / READY_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**info, "pid": os.getpid()}))
    os.replace(tmp, path)
    return path


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """SIGTERM and SIGINT, taken from the moment this is made (one sent while the server
    starts is kept) until the main thread asks with :meth:`wait`.

    The handler does nothing itself: the signal's byte reaches a socket the main thread
    selects on (``signal.set_wakeup_fd``). A Python handler that set an Event ran in the main
    thread between two bytecodes, and could run while that thread held the same Event's lock
    inside ``Event.wait``: a broker paused, resumed and terminated hung there until SIGKILL
    (no flush, no hand-off). The kernel may also hand the signal to another thread; its byte
    wakes the select all the same. Main thread only, one per process."""

    def __init__(self) -> None:
        self._reader, writer = socket.socketpair()
        self._writer = writer  # kept open: the wakeup fd must stay valid
        for sock in (self._reader, writer):
            sock.setblocking(False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, _ignore)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def wait(self, stopped: threading.Event | None = None, step_s: float = 0.5) -> int | None:
        """Block until a stop signal (returns its number) or ``stopped`` is set (None).
        Signals after that are ignored: the stop is under way."""
        while stopped is None or not stopped.is_set():
            if select.select([self._reader], [], [], step_s)[0]:
                sig = self.received()
                if sig is not None:
                    return sig
        return None

    def received(self) -> int | None:
        """A stop signal that came since the last look, without blocking (a main thread
        with a loop of its own)."""
        try:
            got = [sig for sig in self._reader.recv(512) if sig in STOP_SIGNALS]
        except BlockingIOError:
            return None
        return got[0] if got else None


def _ignore(signum: int, frame: object) -> None:
    """A Python handler, so that the default action does not end the process and the
    wakeup fd gets the signal's byte."""


def clear_ready(data_dir: str | Path) -> None:
    (Path(data_dir) / READY_FILE).unlink(missing_ok=True)


def wait_ready(data_dir: str | Path, pid: int, timeout: float = 30.0,
               alive: Any = None) -> dict[str, Any]:
    """The ready info written by process ``pid``; raises TimeoutError or RuntimeError if it died.

    ``alive`` is an optional callable returning False once the process has exited (e.g.
    ``lambda: proc.poll() is None``), so a crash is reported at once rather than at the timeout.
    """
    path = Path(data_dir) / READY_FILE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            info = json.loads(path.read_text())
            if info.get("pid") == pid:
                return info
        except (OSError, ValueError):
            pass
        if alive is not None and not alive():
            raise RuntimeError(f"process {pid} exited before it was ready ({path})")
        time.sleep(0.05)
    raise TimeoutError(f"process {pid} not ready after {timeout} s ({path})")


PORT_FLOOR = 10_000  # free_ports picks from here up to the kernel's ephemeral range
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` right now (bound together, then released).

    Picked below the kernel's ephemeral range when there is room: a port the kernel hands out
    (bind to 0) may go, once released, to the source port of any outgoing connection before
    the server that was given it binds it (a master of ``cluster up`` failed so, "Address
    already in use", in a parallel test run). Ports below that range are only ever taken by
    an explicit bind."""
    low = ephemeral_range_start()
    if low - PORT_FLOOR < 100 * count:
        return _kernel_ports(count, host)
    rng = random.SystemRandom()
    held: list[socket.socket] = []
    try:
        for port in rng.sample(range(PORT_FLOOR, low), min(low - PORT_FLOOR, 50 * count)):
            s = socket.socket()
            try:
                s.bind((host, port))
            except OSError:
                s.close()
                continue
            held.append(s)
            if len(held) == count:
                return [h.getsockname()[1] for h in held]
    finally:
        for h in held:
            h.close()
    return _kernel_ports(count, host)


def ephemeral_range_start() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return PORT_FLOOR  # unknown: leave the choice to the kernel


def _kernel_ports(count: int, host: str) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def terminate(proc: subprocess.Popen, timeout: float = 15.0) -> int | None:
    """SIGTERM ``proc``, then SIGKILL if it has not exited after ``timeout``; its exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still exists (a zombie counts until its parent reaps it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def group_pids(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, from Linux's ``/proc``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def end_group(pgid: int, timeout: float) -> bool:
    """Wait until no process of group ``pgid`` is left, SIGKILLing the rest at ``timeout``;
    True when they ended by themselves. A parent can exit before the children it forked
    (Locust's ``--processes`` workers), whose last writes are then still under way."""
    deadline = time.monotonic() + timeout
    while group_pids(pgid):
        if time.monotonic() > deadline:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return False
        time.sleep(0.1)
    return True
