"""Child process for the retry fault test (test_retry_faults.py): one PushConsumer of a group
with retries, SIGKILLed and restarted by the test.

``python -m tests.integration.retry_worker MASTERS TOPIC GROUP OUT``

Record values are ``b"<kind>-<n>"``: ``ok`` is taken at once; ``flaky`` fails on its first
two attempts (its retry headers count them) and is taken on the third; ``bad`` always
fails (dead-lettered after 3). Each taken value is written to OUT as one line, flushed at
once (a SIGKILL loses no written line; a record taken but not committed when killed is taken
again: at-least-once).
"""
from __future__ import annotations

import sys
import threading

from lib import PushConsumer, Record, RetryPolicy
from lib.process import StopSignals
from lib.retry import attempts_of

POLICY = RetryPolicy(max_attempts=3, backoff_s=(0.2, 0.4))


def main(masters: str, topic: str, group: str, out_path: str) -> None:
    out = open(out_path, "a", buffering=1)  # noqa: SIM115 - the process's
    lock = threading.Lock()

    def handler(record: Record) -> None:
        kind = record.value.split(b"-")[0]
        if kind == b"bad" or (kind == b"flaky" and attempts_of(record.headers) < 2):
            raise RuntimeError(f"{kind.decode()} record {record.value.decode()}")
        with lock:
            out.write(record.value.decode() + "\n")
            out.flush()

    signals = StopSignals()
    consumer = PushConsumer(masters, group=group, auto_offset_reset="earliest", retry=POLICY,
                            auto_commit_interval_ms=200, session_timeout_ms=3000)
    consumer.subscribe([topic], handler=handler, threads=2)
    print("subscribed", flush=True)
    signals.wait()
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
