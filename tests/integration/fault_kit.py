"""What the replication fault, reassignment and sink failover tests share: a load writer,
a wait, and the settings that make a failover take seconds."""
from __future__ import annotations

import threading
from typing import Any

from lib.errors import TubeqError
from lib.producer.producer import Producer
from tests.helpers import wait_until as wait_until  # the suite's one wait, for the fault tests

# Master settings for fault tests: heartbeats every 300 ms, a silent broker is dead after 2 s.
FAST_FAILOVER = {"broker_heartbeat_interval_ms": 300, "broker_timeout_ms": 2000}
REPLICA_LAG_MAX_MS = 1500  # the brokers': a stalled follower leaves the ISR after 1.5 s


class NumberedWriter(threading.Thread):
    """Sends numbered messages (``b"m%06d" % n``, message n to partition n % ``partitions``)
    in rounds of 20, each round's acknowledgements awaited; keeps the acknowledged numbers in
    ``acked`` (a failed send may or may not be stored). ``producer``: the Producer's
    settings."""

    def __init__(self, masters: str, topic: str, partitions: int = 1, **producer: Any) -> None:
        super().__init__(daemon=True)
        self.masters, self.topic, self.partitions = masters, topic, partitions
        self.settings = {"retries": 50, "retry_backoff_ms": 100, "request_timeout_ms": 5000,
                         "linger_ms": 2, **producer}
        self.acked: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with Producer(self.masters, **self.settings) as producer:
            i = 0
            while not self.stop.is_set():
                futures = [(n, producer.send(self.topic, b"m%06d" % n,
                                             partition=n % self.partitions))
                           for n in range(i, i + 20)]
                i += 20
                for n, fut in futures:
                    try:
                        fut.result(30)
                        self.acked.append(n)
                    except TubeqError:
                        pass
