"""Benchmarks and Locust load tests; each prints one JSON object."""
from __future__ import annotations

import signal


def stop_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C: a benchmark's ``finally`` then stops, by PID, every
    process it started and removes its temp dir (a plain kill left them running)."""
    def _raise(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, _raise)


def broker_args(root, replica_stream: bool) -> list[str] | None:
    """Extra arguments for a benchmark's brokers: a config under ``root`` turning the replica
    stream off (followers copy over gRPC only), or None for the defaults."""
    if replica_stream:
        return None
    conf = root / "broker-no-stream.toml"
    conf.write_text("[broker]\nreplica_stream_port = -1\n")
    return ["--config", str(conf)]


def add_stream_flag(parser) -> None:
    parser.add_argument("--no-replica-stream", dest="replica_stream", action="store_false",
                        help="followers copy over gRPC only (replica_stream_port = -1)")


def wait_served(producer, topics: list[str], timeout: float = 120.0) -> None:
    """Until the broker acknowledges a record for every topic in ``topics`` (a new topic is
    served after the broker's next heartbeat); these warm-up records are not timed. Sent to
    every topic at once, then again to those that failed (10,000 topics one at a time took
    minutes)."""
    import time

    from lib.errors import TubeqError

    deadline = time.monotonic() + timeout
    waiting = list(topics)
    while waiting:
        futures = [(t, producer.send(t, b"warm-up")) for t in waiting]
        failed = []
        for topic, future in futures:
            try:
                future.result(max(1.0, deadline - time.monotonic()))
            except TubeqError:
                failed.append(topic)
        if failed and time.monotonic() > deadline:
            raise TimeoutError(f"{len(failed)} topics not served within {timeout} s, "
                               f"e.g. {failed[0]}")
        if failed:
            time.sleep(0.2)
        waiting = failed
