"""A TCP forwarder that can become a black hole: a link cut off with no RST, without root.

tests/netcut.py cuts a link by resetting its connections, which a peer notices at once. A
black hole is the harder case (a pulled cable, a firewall dropping packets, a VM frozen
elsewhere): connections stay open and nothing arrives. Route a server's links through a
:class:`Blackhole` (its clients dial ``address``, which forwards to ``target``); after
:meth:`Blackhole.swallow` every byte either side sends is read and dropped and new connections
are accepted and never answered, until :meth:`Blackhole.heal`, which resets the swallowed
connections (their HTTP/2 streams lost bytes: they cannot go on) and forwards new ones again.

Threading: one acceptor thread, two pump threads per forwarded connection (blocking I/O).
``swallow``, ``heal`` and ``stop`` may be called from any thread; use it as a context manager
so ``stop`` (every socket closed, every thread ended) runs even on failure. Listens on
127.0.0.1 only, on ``port`` (0: any free one), kept across a swallow.
"""
from __future__ import annotations

import socket
import struct
import threading

ACCEPT_POLL_S = 0.1  # how soon the acceptor notices stop()
CHUNK = 64 << 10


def _reset(sock: socket.socket) -> None:
    """Close with an RST, as a link that is given up looks to its peer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # the peer is gone already
    sock.close()


class Blackhole:
    """Forwards 127.0.0.1:<port> to ``target`` ("host:port") until swallowed."""

    def __init__(self, target: str, port: int = 0) -> None:
        host, _, tport = target.rpartition(":")
        self.target = (host, int(tport))
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.settimeout(ACCEPT_POLL_S)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self.swallowing = False
        self._stopped = threading.Event()
        self._socks: set[socket.socket] = set()  # every open socket, closed by heal/stop
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True,
                                          name=f"blackhole-{self.address}")

    def __enter__(self) -> Blackhole:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def swallow(self) -> None:
        """From now on nothing gets through either way, and no connection is closed."""
        with self._lock:
            self.swallowing = True

    def heal(self) -> None:
        """Reset every connection open now (they lost bytes) and forward new ones again."""
        with self._lock:
            self.swallowing = False
            socks, self._socks = self._socks, set()
        for sock in socks:
            _reset(sock)

    def stop(self) -> None:
        """Close everything and end every thread. Safe to call twice."""
        self._stopped.set()
        self.heal()
        if self._acceptor.is_alive():
            self._acceptor.join()
        self._listener.close()
        for t in self._threads:
            t.join(5)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed
            client.settimeout(None)
            with self._lock:
                self._socks.add(client)
                held = self.swallowing
            if not held:  # a swallowed connection is accepted and never answered
                self._open(client)

    def _open(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.target, timeout=2.0)
        except OSError:
            _reset(client)  # the target is down: as it would look without us
            return
        server.settimeout(None)
        with self._lock:
            self._socks.add(server)
        self._threads = [t for t in self._threads if t.is_alive()]
        for src, dst in ((client, server), (server, client)):
            t = threading.Thread(target=self._pump, args=(src, dst), daemon=True,
                                 name=f"blackhole-pump-{self.address}")
            self._threads.append(t)
            t.start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Copy one direction (dropping what arrives while swallowing) until a side ends."""
        try:
            while chunk := src.recv(CHUNK):
                if not self.swallowing:
                    dst.sendall(chunk)
        except OSError:
            pass  # reset by heal(), stop() or a peer
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
