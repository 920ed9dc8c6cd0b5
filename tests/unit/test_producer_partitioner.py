"""Partitioner: stable key hash across processes, round robin over available partitions."""
from __future__ import annotations

import os
import subprocess
import sys
import zlib

from lib.producer.partitioner import Partitioner, key_partition


def test_keyed_record_goes_to_crc32_of_key_modulo_partitions():
    p = Partitioner()
    for key in (b"", b"a", b"customer-7", bytes(range(256))):
        assert p.partition("t", key, 6, [0, 1, 2, 3, 4, 5]) == zlib.crc32(key) % 6
        assert key_partition(key, 6) == zlib.crc32(key) % 6


def test_key_partition_is_the_same_in_another_process_with_another_hash_seed():
    keys = [f"key-{i}".encode() for i in range(50)]
    here = [key_partition(k, 7) for k in keys]
    code = ("from lib.producer.partitioner import key_partition;"
            f"print([key_partition(f'key-{{i}}'.encode(), 7) for i in range({len(keys)})])")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out.strip() == str(here)


def test_keyed_record_keeps_its_partition_while_that_partition_is_unavailable():
    key = b"sticky"
    expected = zlib.crc32(key) % 4
    available = [p for p in range(4) if p != expected]
    assert Partitioner().partition("t", key, 4, available) == expected


def test_records_without_key_go_round_robin_over_available_partitions_only():
    p = Partitioner()
    picks = [p.partition("t", None, 6, [1, 4]) for _ in range(6)]
    assert picks == [1, 4, 1, 4, 1, 4]


def test_round_robin_uses_every_partition_when_none_is_available():
    p = Partitioner()
    assert sorted(p.partition("t", None, 3, []) for _ in range(3)) == [0, 1, 2]


def test_round_robin_counters_are_per_topic():
    p = Partitioner()
    assert p.partition("a", None, 3, [0, 1, 2]) == 0
    assert p.partition("b", None, 3, [0, 1, 2]) == 0
    assert p.partition("a", None, 3, [0, 1, 2]) == 1


def test_sticky_round_robin_moves_on_after_sticky_bytes():
    p = Partitioner(sticky_bytes=100)
    picks = [p.partition("t", None, 3, [0, 1, 2], size=40) for _ in range(9)]
    assert picks == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_sticky_turns_only_pick_partitions_that_are_available():
    p = Partitioner(sticky_bytes=10)
    picks = [p.partition("t", None, 3, [0, 2], size=10) for _ in range(4)]
    assert picks == [0, 2, 0, 2]
