"""The master's broker registry keeps each broker's last reported disk status (live state)."""
from __future__ import annotations

from lib.admin import broker_info
from lib.proto import master_pb2 as mpb
from master.brokers import BrokerRegistry, DiskState


def test_registry_keeps_the_disk_status_of_the_last_heartbeat_and_forgets_it_on_register():
    now = [0]
    reg = BrokerRegistry(timeout_ms=1000, clock=lambda: now[0], wall=lambda: 5)
    reg.register(1, "127.0.0.1:9000")
    assert reg.snapshot() == [(1, "127.0.0.1:9000", True, 5, None)]
    reg.heartbeat(1, [], DiskState(free_bytes=10, reserve_bytes=64, full=True))
    assert reg.snapshot()[0][4] == DiskState(10, 64, True)
    reg.heartbeat(1, [], DiskState(free_bytes=900, reserve_bytes=64, full=False))
    assert reg.snapshot()[0][4].full is False
    reg.register(1, "127.0.0.1:9001")  # a restarted broker reports again
    assert reg.snapshot()[0][4] is None


def test_admin_client_shows_disk_fields_and_minus_one_before_any_report():
    info = mpb.BrokerInfo(broker_id=2, address="h:1", alive=True, last_heartbeat_ms=7)
    assert (broker_info(info).disk_full, broker_info(info).disk_free_bytes) == (False, -1)
    info.disk.free_bytes, info.disk.reserve_bytes, info.disk.full = 3, 64, True
    shown = broker_info(info)
    assert (shown.disk_full, shown.disk_free_bytes, shown.disk_reserve_bytes) == (True, 3, 64)
