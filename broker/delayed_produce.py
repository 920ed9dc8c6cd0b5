"""The broker's check of a batch produced to ``tubeq.delayed`` (lib/delay.py).

The access rule lets any identified caller produce to the delay topic; this check stands in
for it, per record: each record names a target topic the caller may produce to, falls due
within the cluster's maximum delay, and only the cluster itself (a mover) writes done
records. It decodes every frame, a per-record loop the hot path never takes: delayed
records are rarer than plain ones and each is read again when due anyway.
"""
from __future__ import annotations

import time

from lib.auth.access import Access
from lib.auth.identities import CLUSTER
from lib.delay import H_DONE, check_due, target_of
from lib.errors import InvalidArgument, PermissionDenied
from lib.records import BatchView, decode_frames


def check_delayed(view: BatchView, access: Access, retention_ms: int) -> None:
    """InvalidArgument or PermissionDenied naming the first record that may not be stored.
    Without authorization (auth = "none") every caller counts as the cluster."""
    cluster = access.authorizer is None or access.identity.kind == CLUSTER
    now = time.time_ns() // 1_000_000
    if not cluster and view.count and int(view.timestamps.max()) - now > 0:
        check_due(int(view.timestamps.max()), now, retention_ms)
    targets: set[str] = set()
    for i, record in enumerate(decode_frames(view.frames)):
        if H_DONE in record.headers:
            if not cluster:
                raise PermissionDenied(
                    f"record {i}: only the cluster writes {H_DONE} records", name=H_DONE)
            continue
        topic, partition = target_of(record.headers)
        if partition < 0:
            raise InvalidArgument(f"record {i}: target partition {partition} is negative")
        targets.add(topic)
    if not cluster:
        for topic in sorted(targets):
            access.check("produce", "topic", topic)
