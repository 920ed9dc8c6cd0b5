"""The ceiling of moving rows over gRPC at all, for ``load/bench_spark.py``.

tubeq's data source sends every row it writes to a broker and receives every row it reads
from one, over gRPC in Python, on the same two cores as Spark. That crossing has a cost of its
own whatever a broker does with the bytes. This bare server does nothing else: a ``Put`` is
written to a file (the page cache, as a broker's flusher does), a ``Get`` is answered with one
ready-made blob of rows. Its data source (``load/spark_ceiling.py`` with the ``transport``
option) ships the value bytes of whole Arrow batches and builds Arrow batches straight from
what it receives: no framing, no checksums, no per-row Python. Measured in the same run as
tubeq, it shows how fast any broker fed over Python gRPC could be here.

    python -m load.transport_ceiling --dir DIR --rows N --size S  (the server; its address
    goes into DIR's ready file, as a broker's does: lib/process.py)
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import grpc

from lib.process import write_ready
from load.bare_server import BareServer

SERVICE = "tubeq.bench.Transport"
MAX_MESSAGE = 64 << 20
OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE),
           ("grpc.max_send_message_length", MAX_MESSAGE)]
TRUNCATE_AT = 256 << 20  # the data file starts over past this: the page cache, not the disk


async def _serve(root: Path, rows: int, size: int) -> None:
    fd = os.open(root / "transport.data", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    blob = os.urandom(rows * size)
    written = 0

    async def put(request: bytes, context) -> bytes:
        nonlocal written
        os.write(fd, request)
        written += len(request)
        if written > TRUNCATE_AT:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            written = 0
        return b""

    async def get(request: bytes, context) -> bytes:
        return blob

    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "Put": grpc.unary_unary_rpc_method_handler(put),
        "Get": grpc.unary_unary_rpc_method_handler(get)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    write_ready(root, {"address": f"127.0.0.1:{port}"})
    await server.wait_for_termination()


class TransportServer(BareServer):
    """The bare server as a process of its own (a broker's place), stopped by its PID."""

    def __init__(self, root: Path, blob_rows: int, size: int) -> None:
        super().__init__("load.transport_ceiling", root, "--rows", str(blob_rows),
                         "--size", str(size))


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=OPTIONS)


def put(ch: grpc.Channel, payload: bytes | memoryview) -> None:
    ch.unary_unary(f"/{SERVICE}/Put")(payload)


def get(ch: grpc.Channel) -> bytes:
    return ch.unary_unary(f"/{SERVICE}/Get")(b"")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.transport_ceiling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, required=True, help="its data file and ready file")
    p.add_argument("--rows", type=int, required=True, help="rows in each Get's answer")
    p.add_argument("--size", type=int, required=True, help="bytes per row")
    args = p.parse_args(argv)
    asyncio.run(_serve(args.dir, args.rows, args.size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
