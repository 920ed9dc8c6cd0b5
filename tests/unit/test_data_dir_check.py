"""The data-dir rule of lib/private_files.py (PostgreSQL's): owner only, or owner and group
reading with data_dir_group_access; never group write, never others."""
from __future__ import annotations

import os
import stat

import pytest

from broker.config import BrokerConfig
from lib.config import build
from lib.errors import ConfigError
from lib.private_files import data_dir_problem, own_data_dir, own_data_dirs
from master.config import MasterConfig
from portal_web.config import PortalConfig


def _dir(tmp_path, mode: int, name: str = "d"):
    d = tmp_path / name
    d.mkdir()
    d.chmod(mode)
    return d


@pytest.mark.parametrize("mode", [0o700, 0o500, 0o300])
def test_an_owner_only_dir_is_fine_either_way(tmp_path, mode):
    d = _dir(tmp_path, mode)
    assert data_dir_problem(d) == "" and data_dir_problem(d, group_access=True) == ""


@pytest.mark.parametrize("mode", [0o750, 0o710, 0o740, 0o705, 0o701, 0o755, 0o777])
def test_any_group_or_other_bit_is_refused_without_group_access(tmp_path, mode):
    d = _dir(tmp_path, mode)
    problem = data_dir_problem(d)
    assert problem.startswith(f"data directory {d} has mode {mode:04o}, open to group or others")
    assert f"chmod 700 {d} fixes it" in problem and "data_dir_group_access = true" in problem
    assert "\n" not in problem


@pytest.mark.parametrize("mode", [0o750, 0o740, 0o710])
def test_group_access_allows_group_read_and_search(tmp_path, mode):
    assert data_dir_problem(_dir(tmp_path, mode), group_access=True) == ""


@pytest.mark.parametrize("mode", [0o770, 0o720, 0o751, 0o754, 0o757])
def test_group_access_still_refuses_group_write_and_others(tmp_path, mode):
    d = _dir(tmp_path, mode)
    assert data_dir_problem(d, group_access=True) == (
        f"data directory {d} has mode {mode:04o}, open to others: chmod 750 {d} fixes it")


def test_the_chmod_quotes_a_path_a_shell_would_split(tmp_path):
    d = _dir(tmp_path, 0o755, "my data")
    assert f"chmod 700 '{d}' fixes it" in data_dir_problem(d)


@pytest.fixture
def shell_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.parametrize(("group_access", "mode"), [(False, 0o700), (True, 0o750)])
def test_a_missing_data_dir_is_created_private_whatever_the_umask(tmp_path, shell_umask,
                                                                  group_access, mode):
    d = own_data_dir(tmp_path / "a" / "b", group_access)
    assert stat.S_IMODE(d.stat().st_mode) == mode


def test_an_open_data_dir_is_refused_and_left_as_it_was(tmp_path):
    d = _dir(tmp_path, 0o755)
    with pytest.raises(ConfigError, match="has mode 0755"):
        own_data_dir(d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o755


def test_a_file_is_no_data_dir(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ConfigError, match=f"data directory {f}"):
        own_data_dir(f)


def test_cluster_dirs_name_every_open_child_at_once(tmp_path):
    root = _dir(tmp_path, 0o700, "cluster")
    for name, mode in (("master0", 0o755), ("broker1", 0o700), ("broker2", 0o750)):
        _dir(root, mode, name)
    with pytest.raises(ConfigError) as caught:
        own_data_dirs(root, ["master0", "broker1", "broker2", "portal"])
    lines = caught.value.message.splitlines()
    assert [line.split()[2] for line in lines] == [str(root / "master0"), str(root / "broker2")]


@pytest.mark.parametrize("cls", [MasterConfig, BrokerConfig, PortalConfig])
def test_group_access_is_a_validated_config_key(cls):
    extra = {"data_dir": "x"}
    if cls is not PortalConfig:
        extra.update(auth="none")
    if cls is BrokerConfig:
        extra.update(broker_id=1, masters="127.0.0.1:1")
    assert build(cls, {"data_dir_group_access": True, **extra}).data_dir_group_access
    assert not build(cls, extra).data_dir_group_access
    with pytest.raises(ConfigError, match="data_dir_group_access must be true or false"):
        build(cls, {"data_dir_group_access": "yes", **extra})
