"""Raft links between masters that a test can silence one master at a time, without root.

iptables would be the plain way to cut a master's Raft traffic while its clients still reach
it; tests run unprivileged, so every *pair* of masters talks through a
:class:`load.faultproxy.FaultProxy` of its own here and :meth:`RaftMesh.isolate` puts the
proxies of one master's pairs in ``hold``: silence, not a reset, as with an iptables DROP.
On :meth:`RaftMesh.heal` the held bytes flow on, in order; a side that gave up on its link
meanwhile has closed it and dials again.

Why a proxy per pair works with pysyncobj's node identities: a node is known by the address
it is dialled at, and of two nodes only the one with the greater address dials (it sends its
own address first, and the other side looks that up among its peers). So for each pair the
dialling master lists the other by the address of the pair's proxy, which must sort below
its own address, and the dialled master lists the dialler by its real Raft address. All
proxy ports are below all Raft ports and have as many digits, so that always holds.

One cost: a master that reaches the leader through a proxy does not recognise it in the
replicated leadership record, so it answers ``NotLeader`` without naming the active master
(clients then try the next master of their list, as during an election).

``isolate``, ``heal`` and ``stop`` may be called from any thread. Use the mesh as a context
manager so every proxy's threads and sockets end.
"""
from __future__ import annotations

from itertools import combinations

from lib.process import free_ports
from load.faultproxy import FaultProxy, Mode


class RaftMesh:
    """Raft addresses for ``n`` masters whose every pair talks through a proxy of its own.

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
        self._proxies: dict[tuple[int, int], FaultProxy] = {}
        try:
            for (a, b), port in zip(pairs, proxy_ports, strict=True):
                dialled = min(a, b, key=lambda i: self.node(i))  # the other one dials it
                self._proxies[(a, b)] = FaultProxy(self.node(dialled), port)
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
                proxy.set_mode(Mode.HOLD)

    def heal(self) -> None:
        for proxy in self._proxies.values():
            proxy.set_mode(Mode.PASS)

    def stop(self) -> None:
        for proxy in self._proxies.values():
            proxy.stop()

    def __enter__(self) -> RaftMesh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
