"""Servers stop cleanly on SIGTERM after they were paused (SIGSTOP, then SIGCONT), as a
container or VM pause, a debugger or an operator's `kill -STOP` leaves them.

The kernel may hand a signal to any thread of a process; Python runs the handler only in the
main thread. A broker whose main thread slept in a wait with no timeout ignored SIGTERM after
a pause until the test harness SIGKILLed it 15 s later (no flush, no hand-off). Later a handler
that set the Event the main thread waited on ran while that thread held the Event's lock, and
the broker hung for good (lib.process.StopSignals now: the handler does nothing)."""
from __future__ import annotations

import json
import signal
import time

import pytest

from lib import Producer
from lib.admin import AdminClient

STOPPED_EVENTS = {"broker": "broker.stopped", "master": "master.stopped"}


def _paused_then_terminated(proc) -> int:
    proc.signal(signal.SIGSTOP)
    time.sleep(1.0)  # the pause itself (its length is the test), not a wait
    proc.signal(signal.SIGCONT)
    proc.signal(signal.SIGTERM)
    return proc.popen.wait(60)  # a stop takes seconds (hand-off, grace); a hang never ends


def _logged(proc, name: str) -> bool:
    return any(json.loads(line).get("event") == name
               for line in proc.log_tail(400).splitlines() if line.startswith("{"))


@pytest.mark.parametrize("role", ["broker", "master"])
def test_a_paused_server_still_stops_cleanly_on_sigterm(cluster_factory, role):
    cluster = cluster_factory(2)
    with AdminClient(cluster.master_addresses) as admin:  # threads busy: a follower's fetch
        admin.create_topic("paused", partitions=2, replication_factor=2)
    with Producer(cluster.master_addresses, acks="all", retries=20) as producer:
        for partition in (0, 1):  # acknowledged: each follower fetched, and long-polls on
            producer.send("paused", b"x", partition=partition).result(30)
    procs = [cluster.brokers[1], cluster.brokers[2]] if role == "broker" else cluster.masters
    for proc in procs:
        assert _paused_then_terminated(proc) == 0, proc.log_tail()
        assert _logged(proc, STOPPED_EVENTS[role]), proc.log_tail()
