"""Hosts of their own on one machine: a Linux network namespace per host, each with one address
on a bridge (a veth pair per host: one end in the namespace as ``eth0``, the other on the
bridge), as separate hosts on one LAN would be.

Names carry the test process's pid (``tq<pid>...``; interface names stay within the kernel's
15 characters), so parallel runs never collide; their addresses may repeat, since each run has
a bridge of its own and the bridge has no address (the root namespace gets no route to them).
:meth:`Network.close` deletes every namespace, veth and the bridge it made, and only those,
whatever failed. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's ``ip``:
:func:`why_not` says why namespaces cannot be made here, for a skip.
"""
from __future__ import annotations

import os
import shutil
import subprocess

PREFIX_LEN = 24  # every host on one /24
IP_TIMEOUT_S = 20.0


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          timeout=IP_TIMEOUT_S)


def why_not() -> str:
    """Why network namespaces cannot be made here ('' when they can): tried, then removed."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces"
    probe = f"tq{os.getpid()}probe"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: ip netns add: {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    bridge = ip("link", "add", probe[:15], "type", "bridge", check=False)
    if bridge.returncode != 0:
        return f"cannot make a bridge: ip link add type bridge: {bridge.stderr.strip()}"
    ip("link", "del", probe[:15], check=False)
    return ""


class Network:
    """One bridge and the namespaces on it; ``add(name, address)`` makes a host."""

    def __init__(self) -> None:
        self.tag = f"tq{os.getpid()}"
        self.bridge = f"{self.tag}br"
        self.namespaces: dict[str, str] = {}  # host name -> namespace
        self._veths: list[str] = []  # the bridge-side ends
        ip("link", "add", self.bridge, "type", "bridge")
        try:
            ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise

    def add(self, name: str, address: str) -> str:
        """A namespace for host ``name`` with ``address`` on the bridge; its name."""
        ns, n = f"{self.tag}-{name}", len(self._veths)
        outer, inner = f"{self.tag}v{n}", f"{self.tag}n{n}"
        ip("netns", "add", ns)
        self.namespaces[name] = ns
        ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        self._veths.append(outer)
        ip("link", "set", inner, "netns", ns)
        ip("link", "set", outer, "master", self.bridge)
        ip("link", "set", outer, "up")
        ip("-n", ns, "link", "set", inner, "name", "eth0")
        ip("-n", ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def run_in(self, name: str) -> list[str]:
        """The command prefix that runs a program in host ``name`` (``ip netns exec`` execs
        it: the process's pid is the program's)."""
        return ["ip", "netns", "exec", self.namespaces[name]]

    def close(self) -> None:
        """Delete what was made; each step on its own, so one failure leaves nothing else."""
        for ns in self.namespaces.values():
            ip("netns", "del", ns, check=False)  # takes its veth end, and so the pair, along
        for outer in self._veths:
            ip("link", "del", outer, check=False)  # already gone unless its namespace was not
        ip("link", "del", self.bridge, check=False)
        self.namespaces.clear()
        self._veths.clear()
