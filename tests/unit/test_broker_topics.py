"""TopicManager on a temp dir: placements, growth, reconfiguration, deletion, lookups."""
from __future__ import annotations

import json

import pytest

from broker.config import BrokerConfig, load, topic_store_config
from broker.topics import PartitionRole, TopicManager, TopicSpec
from lib.errors import ConfigError, InvalidName, PartitionNotHosted, UnknownPartition, UnknownTopic
from storage.config import StoreConfig
from tests.helpers import batch_of, read_all

SMALL = StoreConfig(cache_flush_interval_ms=10)


@pytest.fixture
def tm(tmp_path):
    m = TopicManager(tmp_path, SMALL)
    yield m
    m.close()


def test_hosted_partitions_open_in_store_p_mod_stores(tm, tmp_path):
    tm.apply({"t": TopicSpec(partitions=4, stores=2, topic_id=1)}, [("t", 0), ("t", 1), ("t", 3)])
    assert tm.hosted("t") == [0, 1, 3]
    assert tm.store_for("t", 0).store_id == 0
    assert tm.store_for("t", 3).store_id == 1
    assert tm.store_for("t", 1) is tm.store_for("t", 3)
    meta = json.loads((tmp_path / "topics" / "t" / "topic.json").read_text())
    assert meta["topic_id"] == 1


def test_lookup_errors_name_the_problem(tm):
    tm.apply({"t": TopicSpec(partitions=2, topic_id=1)}, [("t", 0)])
    with pytest.raises(UnknownTopic):
        tm.store_for("nope", 0)
    with pytest.raises(UnknownPartition, match="partitions 0..1"):
        tm.store_for("t", 2)
    with pytest.raises(PartitionNotHosted):
        tm.store_for("t", 1)
    with pytest.raises(InvalidName):
        tm.store_for("../etc", 0)


def test_a_follower_copy_is_hosted_for_replication_but_clients_are_sent_to_the_leader(tm):
    spec = {"t": TopicSpec(partitions=3, topic_id=1)}
    roles = {("t", 0): PartitionRole(leader=7, leader_epoch=0, replicas=(7, 9), isr=(7, 9)),
             ("t", 1): PartitionRole(leader=9, leader_epoch=4, replicas=(9, 7), isr=(9,))}
    tm.apply(spec, [("t", 0), ("t", 1)], roles=roles, broker_id=7)
    assert tm.hosted("t") == [0, 1]
    assert tm.store_for("t", 0) is tm.replica_store("t", 0)  # led here
    with pytest.raises(PartitionNotHosted, match=r"t/1 is led by broker 9 \(leader epoch 4\); "
                                                 r"this broker holds a follower copy") as err:
        tm.store_for("t", 1)
    assert (err.value.leader, err.value.leader_epoch) == (9, 4)
    tm.replica_store("t", 1).append(1, batch_of([b"copied"]))  # replication writes it
    assert tm.followed() == [("t", 1, roles[("t", 1)])]
    assert tm.role("t", 0) == roles[("t", 0)] and tm.role("t", 2) is None
    with pytest.raises(PartitionNotHosted, match="not hosted on this broker"):
        tm.store_for("t", 2)
    # The leader moves here (a failover): the same copy now serves clients.
    moved = {**roles, ("t", 1): PartitionRole(leader=7, leader_epoch=5, replicas=(9, 7),
                                              isr=(7,))}
    tm.apply(spec, [("t", 0), ("t", 1)], roles=moved, broker_id=7)
    assert [r.value for r in read_all(tm.store_for("t", 1), 1)] == [b"copied"]
    assert tm.followed() == []
    # Placements without a replica set (a master of an earlier version): every one is led.
    tm.apply(spec, [("t", 1), ("t", 2)], broker_id=7)
    assert tm.store_for("t", 2) and tm.store_for("t", 1)


def test_a_new_topic_is_unknown_to_lookups_until_its_stores_are_open(tm, monkeypatch):
    """A lookup racing the first apply (lookups take no lock) must say UnknownTopic, not
    PartitionNotHosted for a partition the master placed here (CI caught that once)."""
    import broker.topic_dirs as topics

    seen = []

    class Watched(topics.Store):
        def __init__(self, *args, **kwargs):
            try:
                tm.store_for("t", 0)
            except Exception as exc:  # noqa: BLE001 - the type is the assertion
                seen.append(type(exc))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(topics, "Store", Watched)
    tm.apply({"t": TopicSpec(partitions=2, stores=2, topic_id=1)}, [("t", 0), ("t", 1)])
    assert seen == [UnknownTopic, UnknownTopic]
    assert tm.hosted("t") == [0, 1]


def test_a_store_that_fails_to_open_leaves_the_topic_unknown_and_the_others_closed(
        tm, monkeypatch):
    import broker.topic_dirs as topics

    opened = []

    class Failing(topics.Store):
        def __init__(self, root, name, sid, *args, **kwargs):
            if sid == 1:
                raise OSError("disk says no")
            super().__init__(root, name, sid, *args, **kwargs)
            opened.append(self)

    monkeypatch.setattr(topics, "Store", Failing)
    tm.apply({"t": TopicSpec(partitions=2, stores=2, topic_id=1)}, [("t", 0), ("t", 1)])
    with pytest.raises(UnknownTopic):
        tm.store_for("t", 0)
    assert len(opened) == 1 and opened[0].closed
    monkeypatch.undo()
    tm.apply({"t": TopicSpec(partitions=2, stores=2, topic_id=1)}, [("t", 0), ("t", 1)])
    assert tm.hosted("t") == [0, 1]  # the next heartbeat opens it


def test_growing_topic_adds_partitions_and_keeps_data(tm):
    tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
    tm.store_for("t", 0).append(0, batch_of([b"a", b"b"]))
    tm.apply({"t": TopicSpec(partitions=3, topic_id=1)}, [("t", 0), ("t", 2)])
    tm.store_for("t", 2).append(2, batch_of([b"c"]))
    assert [r.value for r in read_all(tm.store_for("t", 0), 0)] == [b"a", b"b"]
    assert tm.store_for("t", 2).latest(2) == 1


def test_changed_settings_reopen_the_store_with_the_new_config(tm):
    tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
    tm.store_for("t", 0).append(0, batch_of([b"a"]))
    tm.apply({"t": TopicSpec(partitions=1, durability="sync", max_message_bytes=2 << 20,
                             topic_id=1)}, [("t", 0)])
    store = tm.store_for("t", 0)
    assert store.config.durability == "sync"
    assert store.config.max_message_bytes == 2 << 20
    assert [r.value for r in read_all(store, 0)] == [b"a"]


def test_deleted_incarnation_drops_data_and_recreated_topic_starts_empty(tm, tmp_path):
    tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
    tm.store_for("t", 0).append(0, batch_of([b"old"]))
    assert tm.apply({}, [], [("t", 1)]) == ["t"]
    assert not (tmp_path / "topics" / "t").exists()
    with pytest.raises(UnknownTopic):
        tm.store_for("t", 0)
    tm.apply({"t": TopicSpec(partitions=1, topic_id=2)}, [("t", 0)])
    assert tm.store_for("t", 0).latest(0) == 0


def test_recreated_topic_with_new_id_replaces_old_data(tm):
    tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
    tm.store_for("t", 0).append(0, batch_of([b"old"]))
    assert tm.apply({"t": TopicSpec(partitions=1, topic_id=2)}, [("t", 0)]) == ["t"]
    assert tm.store_for("t", 0).latest(0) == 0


def test_a_request_naming_a_newer_incarnation_is_refused_until_it_is_open_here(tm):
    """A client whose routes name the re-created topic must not append to (or read) the old
    incarnation this broker still holds: that data is erased when the broker hears of it."""
    tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
    old = tm.store_for("t", 0)
    with pytest.raises(PartitionNotHosted, match=r"re-created \(incarnation 2\); this broker "
                                                 r"still holds incarnation 1") as err:
        tm.store_for("t", 0, topic_id=2)
    assert err.value.retriable and err.value.refresh_metadata
    assert tm.store_for("t", 0, topic_id=1) is old and tm.store_for("t", 0, topic_id=0) is old
    tm.apply({"t": TopicSpec(partitions=1, topic_id=2)}, [("t", 0)])
    assert tm.store_for("t", 0, topic_id=2) is not old
    assert tm.store_for("t", 0, topic_id=1) is tm.store_for("t", 0)  # an older name: by name


def test_tombstone_of_another_incarnation_keeps_current_data(tm):
    tm.apply({"t": TopicSpec(partitions=1, topic_id=2)}, [("t", 0)])
    tm.store_for("t", 0).append(0, batch_of([b"keep"]))
    tm.apply({"t": TopicSpec(partitions=1, topic_id=2)}, [("t", 0)], [("t", 1)])
    assert tm.store_for("t", 0).latest(0) == 1


def test_topic_missing_from_picture_is_unhosted_but_data_kept(tmp_path):
    tm = TopicManager(tmp_path, SMALL)
    tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
    tm.store_for("t", 0).append(0, batch_of([b"a"]))
    tm.apply({}, [])
    with pytest.raises(UnknownTopic):
        tm.store_for("t", 0)
    tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
    assert tm.store_for("t", 0).latest(0) == 1
    tm.close()


def test_signal_wakes_waiter_on_notify(tm):
    tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
    sig = tm.signal("t")
    seen = sig.version
    assert not sig.wait(seen, 0.01)
    tm.notify("t")
    assert sig.wait(seen, 0.01)


def test_config_rejects_bad_values_and_merges_topic_settings():
    with pytest.raises(ConfigError, match="broker_id"):
        load(None, data_dir="/tmp/x")
    with pytest.raises(ConfigError, match="masters"):
        load(None, data_dir="/tmp/x", broker_id=1, masters="nohost")
    with pytest.raises(ConfigError, match="unknown"):
        load(None, data_dir="/tmp/x", broker_id=1, bogus=1)
    cfg = load(None, data_dir="/tmp/x", broker_id=1, masters="127.0.0.1:1,127.0.0.1:2")
    assert isinstance(cfg, BrokerConfig) and cfg.master_list == ["127.0.0.1:1", "127.0.0.1:2"]
    merged = topic_store_config(StoreConfig(), "sync", 1000, 0, 8 << 20)
    assert merged.durability == "sync" and merged.retention_ms == 1000
    assert merged.max_batch_bytes >= 8 << 20 and merged.cache_block_bytes >= merged.max_batch_bytes


def test_config_file_with_store_table(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('[broker]\nport = 0\nmasters = ["127.0.0.1:9"]\n'
                    '[broker.store]\ncache_flush_interval_ms = 50\n')
    cfg = load(str(path), data_dir=str(tmp_path), broker_id=3)
    assert cfg.port == 0 and cfg.masters == "127.0.0.1:9"
    assert cfg.store.cache_flush_interval_ms == 50
