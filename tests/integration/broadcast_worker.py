"""Child process for the broadcast tests:
``python -m tests.integration.broadcast_worker MASTERS TOPIC GROUP INSTANCE push|pull OUT``.

One broadcast instance of GROUP (``instance_id=INSTANCE``, earliest when it has no offsets,
at-least-once, commits every 200 ms) that appends ``partition offset`` per record it receives
to OUT with one unbuffered write each, before the record counts as processed: whatever it
committed is in OUT even after a SIGKILL. Runs until killed or SIGTERM.
"""
from __future__ import annotations

import os
import sys

from lib import PullConsumer, PushConsumer
from lib.process import StopSignals

SETTINGS = {"mode": "broadcast", "auto_offset_reset": "earliest", "session_timeout_ms": 3000,
            "auto_commit_interval_ms": 200}


def main() -> int:
    masters, topic, group, instance, kind, out = sys.argv[1:7]
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    signals = StopSignals()

    def note(records) -> None:
        if records:
            os.write(fd, b"".join(b"%d %d\n" % (r.partition, r.offset) for r in records))

    if kind == "push":
        consumer = PushConsumer(masters, group=group, instance_id=instance, **SETTINGS)
        consumer.subscribe([topic], handler=lambda record: note([record]), threads=2)
        signals.wait()
        consumer.close()
    else:
        with PullConsumer(masters, group=group, instance_id=instance, **SETTINGS) as consumer:
            consumer.subscribe([topic])
            while signals.received() is None:
                note(consumer.poll(timeout=0.2))
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
