"""Broadcast consumption (docs/broadcast.md): the settings both consumers share and the
default instance id.

In a broadcast group every instance reads every partition and keeps its own offsets on the
partitions' brokers under ``group@instance_id``, so the id must be the same across restarts of
one process and differ between processes: the default is ``client_id`` when one is given, else
the host name (one broadcast consumer per group and host; a second one on the same host needs
its own ``instance_id`` and is refused, ``InstanceInUse``, until it has one).
"""
from __future__ import annotations

import re
import socket

from lib.config import require
from lib.errors import ConfigError, InvalidName
from lib.names import MAX_INSTANCE_ID_LEN, check_instance_id

MODES = ("clustering", "broadcast")
_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def check_mode(mode: str, group: str, instance_id: str) -> None:
    """Config rules: a known mode; broadcast needs a group; instance_id only with broadcast."""
    require(mode in MODES, f"mode must be 'clustering' or 'broadcast', got {mode!r}")
    if mode == "broadcast":
        require(bool(group), "mode='broadcast' needs a group: the instances' offsets are kept "
                             "per group")
        if instance_id:
            try:
                check_instance_id(instance_id)
            except InvalidName as exc:
                raise ConfigError(str(exc)) from None
    else:
        require(not instance_id, "instance_id is only for mode='broadcast' (a clustering "
                                 "member's id is given by the master)")


def default_instance_id(client_id: str = "", host: str | None = None) -> str:
    """``client_id`` if it is a valid instance id, else the host name made into one."""
    for candidate in (client_id, host if host is not None else socket.gethostname()):
        name = _BAD.sub("-", candidate or "").lstrip("._-")[:MAX_INSTANCE_ID_LEN]
        if name:
            return name
    return "instance"
