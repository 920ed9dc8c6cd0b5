"""A TCP forwarder a test can cut and heal: a network partition without root.

Route a server's links through a :class:`Proxy` (its clients dial ``proxy.address``, which
forwards to the real address) and :meth:`Proxy.cut` partitions them: every live connection is
closed at once and new ones are closed as soon as they are accepted, until :meth:`Proxy.heal`.
gRPC (HTTP/2 over plain TCP) goes through unchanged; a cut connection fails its calls with
UNAVAILABLE, as a reset link does.

Threading: one acceptor thread, plus two pump threads per live connection (one per
direction, blocking I/O: no buffering of our own, so no deadlock whatever each side sends).
``cut``, ``heal`` and ``stop`` may be called from any thread. ``stop`` ends every thread and
closes every socket; use the proxy as a context manager so that happens even on failure.
Listens on 127.0.0.1 only, on a port of its own (0: the system picks a free one), which it
keeps while cut, so the address stays valid across a cut.
"""
from __future__ import annotations

import socket
import struct
import threading

ACCEPT_POLL_S = 0.1  # how soon the acceptor notices stop()
CONNECT_TIMEOUT_S = 2.0
CHUNK = 64 << 10


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _reset(sock: socket.socket) -> None:
    """Close with a reset (RST), as a broken link looks to the peer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # the peer is gone already
    sock.close()


class _Link:
    """One forwarded connection: two sockets, one pump per direction.

    Only the pumps close the sockets (the last one to end closes both): a socket closed under
    a pump blocked on it could have its descriptor reused by another connection meanwhile.
    Anyone may :meth:`end` it: shutting both sockets down wakes both pumps."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.socks = (client, server)
        self._lock = threading.Lock()
        self._running = 2

    def end(self) -> None:
        for sock in self.socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already shut down, or the peer reset it

    def pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Copy one direction until either side ends, then end the whole connection."""
        try:
            while chunk := src.recv(CHUNK):
                dst.sendall(chunk)
        except OSError:
            pass  # reset by a peer, or shut down by end()
        self.end()
        with self._lock:
            self._running -= 1
            last = self._running == 0
        if last:
            for sock in self.socks:
                _reset(sock)


class Proxy:
    """Forwards 127.0.0.1:<port> to ``target`` ("host:port") until cut."""

    def __init__(self, target: str, port: int = 0) -> None:
        self.target = _split(target)
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.settimeout(ACCEPT_POLL_S)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._cut = False
        self._stopped = threading.Event()
        self._links: set[_Link] = set()
        self._pumps: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True,
                                          name=f"netcut-{self.address}")

    def __enter__(self) -> Proxy:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cut(self) -> None:
        """Partition: end every live connection now; reset new ones until :meth:`heal`."""
        with self._lock:
            self._cut = True
            links, self._links = self._links, set()
        for link in links:
            link.end()

    def heal(self) -> None:
        """Forward new connections again (the cut ones stay closed: clients reconnect)."""
        with self._lock:
            self._cut = False

    def stop(self) -> None:
        """Cut everything, end every thread, close the listener. Safe to call twice."""
        self._stopped.set()
        self.cut()
        if self._acceptor.is_alive():
            self._acceptor.join()
        self._listener.close()
        for pump in self._pumps:
            pump.join(5)
        alive = [p.name for p in self._pumps if p.is_alive()]
        assert not alive, f"proxy threads still running after stop: {alive}"

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed
            client.settimeout(None)
            self._open(client)

    def _open(self, client: socket.socket) -> None:
        """Connect ``client`` through to the target, unless cut (then reset it at once)."""
        if self._cut or self._stopped.is_set():
            _reset(client)
            return
        try:
            server = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            _reset(client)  # the target is down: as it would look without the proxy
            return
        server.settimeout(None)
        link = _Link(client, server)
        with self._lock:
            # cut() may have run while we connected, before this link was listed
            live = not (self._cut or self._stopped.is_set())
            if live:
                self._links.add(link)
        if not live:
            _reset(server)
            _reset(client)
            return
        self._pumps = [p for p in self._pumps if p.is_alive()]
        for src, dst in ((client, server), (server, client)):
            pump = threading.Thread(target=self._pump, args=(link, src, dst), daemon=True,
                                    name=f"netcut-pump-{self.address}")
            self._pumps.append(pump)
            pump.start()

    def _pump(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        link.pump(src, dst)
        with self._lock:
            self._links.discard(link)
