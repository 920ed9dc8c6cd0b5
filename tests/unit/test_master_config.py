"""MasterConfig and topic settings: defaults, validation messages that name the field."""
from __future__ import annotations

import pytest

from lib.errors import ConfigError, InvalidArgument
from lib.proto import master_pb2 as mpb
from master import settings
from master.config import MasterConfig, load


def test_config_from_toml_with_overrides(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('[master]\ndata_dir = "x"\nport = 1234\ndefault_partitions = 8\n')
    cfg = load(str(path), port=4321)
    assert (cfg.data_dir, cfg.port, cfg.default_partitions) == ("x", 4321, 8)


def test_replication_is_on_and_the_old_preview_flag_still_loads(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('[master]\ndata_dir = "d"\nreplication_preview = true\n'
                    'default_replication_factor = 3\n')
    assert load(str(path)).default_replication_factor == 3  # an older config still loads
    assert load(None, data_dir="d", default_replication_factor=16).max_replication_factor == 16
    with pytest.raises(ConfigError, match=r"default_replication_factor must be in \[1, 16\]"):
        load(None, data_dir="d", default_replication_factor=17)


@pytest.mark.parametrize("values, key", [
    ({"bogus": 1}, "bogus"),
    ({"data_dir": ""}, "data_dir"),
    ({"broker_heartbeat_interval_ms": 7000}, "broker_heartbeat_interval_ms"),
    ({"group_min_session_timeout_ms": 20_000}, "group_min_session_timeout_ms"),
    ({"default_durability": "never"}, "default_durability"),
    ({"default_stores": 4}, "default_stores"),
])
def test_bad_config_is_refused_naming_the_key(values, key):
    with pytest.raises(ConfigError, match=key):
        load(None, **{"data_dir": "d", **values})


def test_zero_fields_use_defaults_on_create_and_stores_follow_partitions():
    cfg = MasterConfig(data_dir="d", default_stores=2, default_partitions=4)
    assert settings.for_create(None, cfg)["stores"] == 2
    one = settings.for_create(mpb.TopicSettings(partitions=1), cfg)
    assert (one["partitions"], one["stores"], one["durability"]) == (1, 1, "async")


def test_alter_keeps_unset_fields_and_refuses_shrinking_or_new_store_count():
    cfg = MasterConfig(data_dir="d")
    current = settings.for_create(mpb.TopicSettings(partitions=4, durability="sync"), cfg)
    altered = settings.for_alter(current, mpb.TopicSettings(retention_bytes=1000), cfg)
    assert altered == {**current, "retention_bytes": 1000}
    with pytest.raises(InvalidArgument, match="only grow"):
        settings.for_alter(current, mpb.TopicSettings(partitions=2), cfg)
    with pytest.raises(InvalidArgument, match="stores"):
        settings.for_alter(current, mpb.TopicSettings(stores=2), cfg)


def test_unclean_leader_election_is_off_unless_asked_and_false_can_be_said():
    cfg = MasterConfig()
    assert settings.for_create(None, cfg)["unclean_leader_election"] is False
    on = settings.for_create(mpb.TopicSettings(unclean_leader_election=True), cfg)
    assert on["unclean_leader_election"] is True
    kept = settings.for_alter(on, mpb.TopicSettings(retention_ms=5), cfg)
    assert kept["unclean_leader_election"] is True, "unset on alter: unchanged"
    off = settings.for_alter(on, mpb.TopicSettings(unclean_leader_election=False), cfg)
    assert off["unclean_leader_election"] is False, "false is a value, not 'unset'"
    assert settings.to_pb(off, 3).HasField("unclean_leader_election")
    older = {k: v for k, v in off.items() if k != "unclean_leader_election"}
    assert settings.for_alter(older, None, cfg)["unclean_leader_election"] is False
    assert MasterConfig(default_unclean_leader_election=True).default_unclean_leader_election


def test_a_master_bound_on_every_interface_is_named_by_its_advertised_address():
    """Bound on 0.0.0.0 (another host's deploy): clients are sent to, and the other masters'
    Raft know it by, the advertised host; Raft still listens on the bound host only."""
    from master.server import raft_settings
    cfg = load(None, data_dir="d", host="0.0.0.0", port=8715,
               advertised_address="10.0.0.11:8715", raft_port=8716,
               raft_peers="10.0.0.12:8716,10.0.0.13:8716", raft_password="x" * 16)
    settings = raft_settings(cfg)
    assert (settings.node, settings.bind) == ("10.0.0.11:8716", "0.0.0.0:8716")
    plain = raft_settings(load(None, data_dir="d", host="10.0.0.11", raft_port=8716,
                               raft_peers="10.0.0.12:8716", raft_password="x" * 16))
    assert (plain.node, plain.bind) == ("10.0.0.11:8716", "10.0.0.11:8716")


@pytest.mark.parametrize("address", ["0.0.0.0:8715", "10.0.0.11", "10.0.0.11:0", ":8715"])
def test_an_advertised_address_others_cannot_dial_is_refused(address):
    with pytest.raises(ConfigError, match="advertised_address"):
        load(None, data_dir="d", advertised_address=address)


def test_raft_peers_naming_this_master_by_its_advertised_host_are_refused():
    with pytest.raises(ConfigError, match="OTHER masters"):
        load(None, data_dir="d", host="0.0.0.0", advertised_address="10.0.0.11:8715",
             raft_port=8716, raft_peers="10.0.0.11:8716,10.0.0.12:8716", raft_password="x" * 16)

