"""The children of ``tubeq cluster up`` and their supervision: a child process with its data
dir, log and ready file (:class:`Child`), and the :class:`Supervisor` that restarts one that
exits on the ports it bound first, with a backoff, while the others keep serving."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click

from lib.process import READY_FILE, clear_ready, wait_ready

STOP_GRACE_S = 15.0
READY_TIMEOUT_S = 60.0  # a child that wrote no ready.json by then failed to start
RESTART_BACKOFF_S = (1.0, 30.0)  # a dead child's first restart delay, doubling up to the cap
RESTART_RESET_S = 60.0  # a child up this long starts the backoff over when it next exits


@dataclass
class Child:
    name: str
    data_dir: Path
    argv: list[str]
    popen: subprocess.Popen | None = None
    info: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "log.txt"

    def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Start and wait until ready; from then on the command line names the ports the
        process bound, so a restart comes back where peers and clients look for it."""
        self.spawn()
        self.info = wait_ready(self.data_dir, self.popen.pid, timeout,
                               alive=lambda: self.popen.poll() is None)
        self.argv = pinned_argv(self.argv, self.info)

    def spawn(self) -> None:
        """Start the process without waiting for it (see :meth:`ready`)."""
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        clear_ready(self.data_dir)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", *self.argv], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,  # Ctrl-C is ours to relay
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env})

    def ready(self) -> dict | None:
        """The ready.json of the current process once it wrote one (never an earlier run's)."""
        try:
            info = json.loads((self.data_dir / READY_FILE).read_text())
        except (OSError, ValueError):
            return None
        return info if self.popen is not None and info.get("pid") == self.popen.pid else None

    def exit_status(self) -> str:
        """How the process ended, for people: "exit code 2", "killed by SIGKILL"."""
        code = self.popen.returncode if self.popen is not None else None
        if code is None or code >= 0:
            return f"exit code {code}"
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)

    def wait_or_kill(self, deadline: float) -> None:
        if self.popen is None:
            return
        try:
            self.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def pinned_argv(argv: list[str], info: dict) -> list[str]:
    """``argv`` with ``--port`` and ``--metrics-port`` set to the ports its process bound (its
    ready ``info``): a child first started on port 0 must come back on the same address, which
    the brokers, the masters' Raft peers and clients already know."""
    bound = {"--port": info.get("address"), "--metrics-port": info.get("metrics")}
    pinned = list(argv)
    for i, arg in enumerate(argv[:-1]):
        address = bound.get(arg)
        if isinstance(address, str) and ":" in address:
            pinned[i + 1] = address.rsplit(":", 1)[1]
    return pinned


def restart_delay(restart: int) -> float:
    """Seconds before restart number ``restart`` (1, 2, ...) of a child: 1, 2, 4 ... up to the
    cap, so a child that keeps dying at once costs little while the others keep serving."""
    first, cap = RESTART_BACKOFF_S
    return min(cap, first * 2 ** min(max(restart, 1) - 1, 32))


@dataclass
class _Restarts:
    """One child's restart state."""
    up_since: float  # when it last became ready
    count: int = 0  # restarts since it last stayed up RESTART_RESET_S
    due: float | None = None  # dead: restart it then
    deadline: float | None = None  # restarted: it must be ready by then


class Supervisor:
    """Keeps a running cluster's children up: one that exits is restarted on its ports after a
    backoff (:func:`restart_delay`) while the others keep being watched.

    Single-threaded: run_cluster's loop calls :meth:`poll`, which never sleeps or waits for a
    child to get ready, and starts nothing once ``stopping()`` is true (the signal handler sets
    it), so a stop never races a restart; a child mid-restart is stopped like any other.
    """

    def __init__(self, children: list[Child], stopping: Callable[[], bool],
                 restarted: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic):
        """``restarted`` runs after a child came back (cluster up rewrites cluster.json)."""
        self.children, self.stopping, self.clock = children, stopping, clock
        self.restarted = restarted
        self.state = {c.name: _Restarts(up_since=clock()) for c in children}

    def poll(self) -> None:
        """Look at every child once: notice exits, start due restarts, finish started ones."""
        for child in self.children:
            if self.stopping():
                return
            state, now = self.state[child.name], self.clock()
            if state.deadline is not None:
                self._check_restarted(child, state, now)
            elif state.due is not None:
                if now >= state.due:
                    self._restart(child, state, now)
            elif not child.alive():
                if now - state.up_since >= RESTART_RESET_S:
                    state.count = 0
                self._schedule(child, state, now, f"exited ({child.exit_status()})",
                               "restarting it")

    def _schedule(self, child: Child, state: _Restarts, now: float, what: str,
                  action: str) -> None:
        state.count += 1
        delay = restart_delay(state.count)
        state.due, state.deadline = now + delay, None
        say(f"tubeq: {child.name} {what}; {action} in {delay:.1f} s "
             f"(restart {state.count}; see {child.log_path})")

    def _restart(self, child: Child, state: _Restarts, now: float) -> None:
        state.due = None
        try:
            child.spawn()
        except OSError as err:  # no fork, no log file: try again later
            self._schedule(child, state, now, f"could not be started ({err})", "retrying")
            return
        state.deadline = now + READY_TIMEOUT_S

    def _check_restarted(self, child: Child, state: _Restarts, now: float) -> None:
        info = child.ready()
        if info is not None:
            child.info, state.deadline, state.up_since = info, None, now
            self.restarted()
            say(f"tubeq: {child.name} restarted: pid {info['pid']} on "
                 f"{info.get('url') or info.get('address')}")
        elif not child.alive():  # its old port still taken, a bad data dir, ...
            self._schedule(child, state, now, f"failed to restart ({child.exit_status()}; is "
                           f"{child.info.get('address')} still in use?)", "retrying")
        elif now > state.deadline:
            child.popen.kill()
            child.popen.wait()
            self._schedule(child, state, now, f"was not ready within {READY_TIMEOUT_S:.0f} s",
                           "retrying")


def say(message: str) -> None:
    """Tell the operator on stderr; a stderr nobody reads any more (a closed pipe) must not
    cut the cleanup short and leave children running."""
    try:
        click.echo(message, err=True)
    except OSError:
        pass
