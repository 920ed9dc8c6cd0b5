"""spark_sink/source_runner.py: the streaming source's Python process connects back to Spark
(secret, "ok", pid) before it imports pyspark, then runs pyspark's runner on that connection.

A stand-in for Spark's side of the socket (SocketAuthHelper.authClient, then the pid) listens on
127.0.0.1; the processes are real interpreters started as Spark starts them."""
from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-of-this-test"
# What the process has imported by the time it has connected back: none of these.
IMPORTED = ("import sys, spark_sink.source_runner as r; f = r.connect_back(); "
            "f.write(repr(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'pyspark', 'py4j', 'numpy', 'pyarrow', 'grpc', 'lib'})).encode()); f.flush()")
FAKE_RUNNER = '''
def main(infile, outfile):
    outfile.write(infile.read(5)[::-1])
    outfile.flush()
'''


def read_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        assert chunk, "the worker closed the connection"
        data += chunk
    return data


class FakeSpark:
    """Accepts one worker: checks its secret as SocketAuthHelper does, reads its pid."""

    def __init__(self, answer: bytes = b"ok") -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(60)
        self.answer = answer
        self.port = self.server.getsockname()[1]

    def accept(self) -> tuple[socket.socket, str, int]:
        conn, _ = self.server.accept()
        conn.settimeout(60)
        [n] = struct.unpack("!i", read_exactly(conn, 4))
        secret = read_exactly(conn, n).decode()
        conn.sendall(struct.pack("!i", len(self.answer)) + self.answer)
        if self.answer != b"ok":
            return conn, secret, -1
        [pid] = struct.unpack("!i", read_exactly(conn, 4))
        return conn, secret, pid

    def close(self) -> None:
        self.server.close()


def start(args: list[str], port: int, pythonpath: str = str(ROOT)) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHON_WORKER_FACTORY_PORT": str(port),
           "PYTHON_WORKER_FACTORY_SECRET": SECRET}
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.fixture
def spark_side():
    fake = FakeSpark()
    yield fake
    fake.close()


def test_the_worker_connects_back_before_importing_pyspark_or_numpy(spark_side):
    proc = start(["-c", IMPORTED], spark_side.port)
    try:
        conn, secret, pid = spark_side.accept()
        with conn:
            assert (secret, pid) == (SECRET, proc.pid)
            got = b""
            while chunk := conn.recv(100):
                got += chunk
        assert got == b"[]"
    finally:
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


def test_it_runs_pyspark_s_runner_on_the_connection_it_made(spark_side, tmp_path):
    runner = tmp_path / "pyspark" / "sql" / "streaming"
    runner.mkdir(parents=True)
    for package in (tmp_path / "pyspark", tmp_path / "pyspark" / "sql", runner):
        (package / "__init__.py").write_text("")
    (runner / "python_streaming_source_runner.py").write_text(FAKE_RUNNER)
    proc = start(["-m", "spark_sink.source_runner"], spark_side.port,
                 os.pathsep.join([str(tmp_path), str(ROOT)]))
    try:
        conn, _, pid = spark_side.accept()
        with conn:
            assert pid == proc.pid
            conn.sendall(b"hello")
            assert read_exactly(conn, 5) == b"olleh"
    finally:
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


def test_a_refused_secret_ends_the_worker_with_an_error():
    fake = FakeSpark(answer=b"err")
    try:
        proc = start(["-m", "spark_sink.source_runner"], fake.port)
        conn, _, _ = fake.accept()
        conn.close()
        _, err = proc.communicate(timeout=60)
    finally:
        fake.close()
    assert proc.returncode != 0
    assert b"refused this worker's secret" in err


def test_a_unix_socket_is_used_without_a_secret(tmp_path):
    path = str(tmp_path / "w.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    server.settimeout(60)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHON_WORKER_FACTORY_SOCK_PATH": path}
    env.pop("PYTHON_WORKER_FACTORY_SECRET", None)
    proc = subprocess.Popen([sys.executable, "-c", IMPORTED], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        conn, _ = server.accept()
        conn.settimeout(60)
        with conn:
            [pid] = struct.unpack("!i", read_exactly(conn, 4))
            assert pid == proc.pid
            assert read_exactly(conn, 2) == b"[]"
    finally:
        server.close()
        proc.communicate(timeout=60)
    assert proc.returncode == 0

