"""Spark's streaming source runner, connected back to the JVM before it imports pyspark.

Why: a query reading a Python streaming source (``readStream.format("tubeq")``) has its offsets
served on the driver by a Python process that Spark starts itself, never through
``pyspark.daemon`` (``PythonStreamingSourceRunner.init``), and Spark gives it a fixed 10 s to
connect back (``PythonWorkerFactory.createSimpleWorker``: ``Selector.select(10000)``, no setting
changes it in PySpark 4.0-4.3). pyspark's runner connects only once its imports are done
(pyspark, py4j, numpy, pyarrow: 0.6 s of CPU on a quiet machine, more than 10 s of wall time
beside two busy loops on two cores, three starts in a row). This module does the runner's
handshake first with the standard library alone (``pyspark.worker_util
.get_sock_file_to_executor``: connect, send the secret, read "ok", send the pid; about 0.05 s of
CPU with the interpreter's start), then imports pyspark's runner and runs it on that connection.
Once the worker has connected, the JVM waits for the runner's first answer as long as it takes.

``spark_sink.daemon.worker_python`` runs this module where Spark asks for
``-m pyspark.sql.streaming.python_streaming_source_runner``. Nothing here may import pyspark,
numpy or anything of ours at module level: it is the point.
"""
from __future__ import annotations

import os
import socket
import struct
import sys
from typing import BinaryIO

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


def _read_exactly(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise ConnectionError("Spark closed the connection during the handshake")
    return data


def _connect() -> socket.socket:
    timeout = int(os.environ.get("SPARK_AUTH_SOCKET_TIMEOUT", 15))
    path = os.environ.get("PYTHON_WORKER_FACTORY_SOCK_PATH")
    if path is not None:  # spark.python.unix.domain.socket.enabled: no secret on that socket
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(path)
        return sock
    host = "::1" if os.environ.get("SPARK_PREFER_IPV6", "false").lower() == "true" else "127.0.0.1"
    return socket.create_connection((host, int(os.environ["PYTHON_WORKER_FACTORY_PORT"])), timeout)


def connect_back() -> BinaryIO:
    """Connect to the JVM that started this process, authenticate (Spark's SocketAuthHelper:
    the secret with its length, then "ok" with its length) and send this process's pid, as
    pyspark's runner does; returns the connection as a buffered read-write file, blocking
    from now on."""
    sock = _connect()
    sock_file = sock.makefile("rwb", int(os.environ.get("SPARK_BUFFER_SIZE", 65536)))
    secret = os.environ.get("PYTHON_WORKER_FACTORY_SECRET")
    if "PYTHON_WORKER_FACTORY_SOCK_PATH" not in os.environ:
        if secret is None:
            raise RuntimeError("PYTHON_WORKER_FACTORY_SECRET is not set: not started by Spark")
        data = secret.encode()
        sock_file.write(struct.pack("!i", len(data)) + data)
        sock_file.flush()
        [length] = struct.unpack("!i", _read_exactly(sock_file, 4))
        if length != 2 or _read_exactly(sock_file, 2) != b"ok":
            raise ConnectionError("Spark refused this worker's secret")
    sock.settimeout(None)
    sock_file.write(struct.pack("!i", os.getpid()))
    sock_file.flush()
    return sock_file


def main() -> None:
    sock_file = connect_back()
    with sock_file:
        from importlib import import_module

        import_module(RUNNER).main(sock_file, sock_file)


if __name__ == "__main__":
    sys.exit(main())
