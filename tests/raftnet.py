"""Raft links between masters that a test can blackhole one master at a time, without root.

iptables would be the plain way to cut a master's Raft traffic while its clients still reach
it; tests run unprivileged, so every *pair* of masters talks through a TCP proxy of its own
here and :meth:`RaftMesh.isolate` silences the proxies of one master's pairs. Silence, not a
reset (tests/netcut.py resets): bytes sent into a cut link are held, not delivered and not
refused, and a link opened during the cut connects to nothing, as with an iptables DROP. On
:meth:`RaftMesh.heal` the held bytes flow on, in order, as TCP's retransmissions would
deliver them; a side that gave up on its link meanwhile has closed it and dials again.

Why a proxy per pair works with pysyncobj's node identities: a node is known by the address
it is dialled at, and of two nodes only the one with the greater address dials (it sends its
own address first, and the other side looks that up among its peers). So for each pair the
dialling master lists the other by the address of the pair's proxy, which must sort below
its own address, and the dialled master lists the dialler by its real Raft address. All
proxy ports are below all Raft ports and have as many digits, so that always holds.

One cost: a master that reaches the leader through a proxy does not recognise it in the
replicated leadership record, so it answers ``NotLeader`` without naming the active master
(clients then try the next master of their list, as during an election).

Threading: one acceptor thread per proxy, and per connection a connector thread (it waits
out a cut before it dials) and two pumps; ``isolate``, ``heal`` and ``stop`` may be called
from any thread. Use the mesh as a context manager so every thread and socket ends.
"""
from __future__ import annotations

import socket
import threading
from itertools import combinations

from lib.process import free_ports

ACCEPT_POLL_S = 0.1
CHUNK = 64 << 10


class _Gate:
    """Open: bytes flow. Closed: every pump holds what it read until the gate opens."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.stopped = False

    def wait(self) -> None:
        self.open.wait()


class SilentProxy:
    """Forwards 127.0.0.1:<port> to ``target``; :meth:`cut` silences it (see the module)."""

    def __init__(self, port: int, target: str) -> None:
        host, _, tport = target.rpartition(":")
        self.target = (host, int(tport))
        self._gate = _Gate()
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.settimeout(ACCEPT_POLL_S)
        self.address = f"127.0.0.1:{port}"
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def cut(self) -> None:
        self._gate.open.clear()

    def heal(self) -> None:
        self._gate.open.set()

    def stop(self) -> None:
        self._gate.stopped = True
        self._gate.open.set()
        self._listener.close()
        with self._lock:
            socks = list(self._socks)
        for sock in socks:
            _close(sock)
        for t in list(self._threads):
            t.join(5)
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"proxy threads still running after stop: {alive}"

    def _spawn(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, daemon=True, name=f"raftnet-{self.address}")
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _keep(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._gate.stopped:
                _close(sock)
                return False
            self._socks.append(sock)
            return True

    def _accept(self) -> None:
        while not self._gate.stopped:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed
            client.settimeout(None)
            if self._keep(client):
                self._spawn(self._connect, client)

    def _connect(self, client: socket.socket) -> None:
        self._gate.wait()  # a link opened during a cut reaches nobody until the heal
        try:
            server = socket.create_connection(self.target, timeout=2.0)
        except OSError:
            _close(client)  # the target is down: as it would look without the proxy
            return
        server.settimeout(None)
        if not self._keep(server):
            _close(client)
            return
        for src, dst in ((client, server), (server, client)):
            self._spawn(self._pump, src, dst)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(CHUNK):
                self._gate.wait()  # held, not lost: TCP would retransmit it after the heal
                if self._gate.stopped:
                    break
                dst.sendall(chunk)
        except OSError:
            pass  # reset by a peer, or closed by stop()
        self._gate.wait()  # a close is news that a cut link does not carry either
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


class RaftMesh:
    """Raft addresses for ``n`` masters whose every pair talks through a :class:`SilentProxy`.

    ``node(i)`` is master i's Raft address (it binds it), ``peers(i)`` the addresses it lists
    for the others (``--raft-port`` / ``--raft-peers``, or ``RaftSettings``).
    """

    def __init__(self, n: int) -> None:
        pairs = list(combinations(range(n), 2))
        while True:
            ports = sorted(free_ports(n + len(pairs)))
            if len({len(str(p)) for p in ports}) == 1:
                break  # same digit count: string order is port order
        proxy_ports, self.ports = ports[:len(pairs)], ports[len(pairs):]
        self._proxies: dict[tuple[int, int], SilentProxy] = {}
        try:
            for (a, b), port in zip(pairs, proxy_ports, strict=True):
                dialled = min(a, b, key=lambda i: self.node(i))  # the other one dials it
                self._proxies[(a, b)] = SilentProxy(port, self.node(dialled))
        except BaseException:
            self.stop()
            raise

    def node(self, i: int) -> str:
        return f"127.0.0.1:{self.ports[i]}"

    def peers(self, i: int) -> list[str]:
        out = []
        for j in range(len(self.ports)):
            if j != i:
                dials = self.node(i) > self.node(j)
                out.append(self._proxies[tuple(sorted((i, j)))].address if dials
                           else self.node(j))
        return out

    def isolate(self, i: int) -> None:
        """Silence every link of master ``i`` (the others still talk to each other)."""
        for pair, proxy in self._proxies.items():
            if i in pair:
                proxy.cut()

    def heal(self) -> None:
        for proxy in self._proxies.values():
            proxy.heal()

    def stop(self) -> None:
        for proxy in self._proxies.values():
            proxy.stop()

    def __enter__(self) -> RaftMesh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
