"""``python -m master``: run one master until SIGTERM/SIGINT.

Writes ``<data_dir>/ready.json`` (role, address, metrics, epoch, raft) once the gRPC server
listens (a standby is ready too: it answers with NotLeader). The Raft password comes from the
config's ``raft_password`` or $TUBEQ_RAFT_PASSWORD, never from the command line (``ps``).
The data dir holds the token signing keys: a master refuses one that group or others can read
(lib/private_files.py) and creates what it writes there 0700/0600.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from lib.auth.settings import AUTH_MODES
from lib.errors import TubeqError
from lib.gc_freeze import freeze_long_lived
from lib.logs import event, setup
from lib.private_files import enter_data_dir, private_umask
from lib.process import StopSignals, write_ready
from lib.tls import add_server_args, server_overrides
from master.config import load
from master.server import Master

log = logging.getLogger("master")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m master", description="Run a tubeq master.")
    p.add_argument("--config", help="TOML file with a [master] table")
    p.add_argument("--data-dir", dest="data_dir")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--metrics-port", dest="metrics_port", type=int)
    p.add_argument("--advertised-address", dest="advertised_address",
                   help="host:port other hosts dial to reach this master (default: the bound "
                        "host:port); its host also names this master's Raft node")
    p.add_argument("--raft-port", dest="raft_port", type=int,
                   help="this master's Raft port (needed with --raft-peers)")
    p.add_argument("--raft-peers", dest="raft_peers",
                   help="comma-separated host:port of the other masters' Raft ports")
    p.add_argument("--auth", choices=AUTH_MODES, help="token (the default) or none")
    p.add_argument("--admin-password-file", dest="admin_password_file",
                   help="the first admin's password, for a new cluster")
    p.add_argument("--replication-preview", dest="replication_preview", action="store_true",
                   default=None, help=argparse.SUPPRESS)  # deprecated: no effect
    add_server_args(p)
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    freeze_long_lived()  # full collections skip the cluster state's objects (lib/gc_freeze.py)
    private_umask()  # nothing this process creates is for other users (lib/private_files.py)
    args = parse_args(argv)
    setup("master", Path(args.data_dir).name if args.data_dir else "?", args.log_level)
    try:
        config = load(args.config, data_dir=args.data_dir, host=args.host, port=args.port,
                      advertised_address=args.advertised_address,
                      metrics_port=args.metrics_port, raft_port=args.raft_port,
                      raft_peers=args.raft_peers, auth=args.auth,
                      admin_password_file=args.admin_password_file,
                      replication_preview=args.replication_preview, **server_overrides(args))
        enter_data_dir(config.data_dir, config.data_dir_group_access)
        signals = StopSignals()  # one sent while the master starts stops it once started
        master = Master(config).start()
    except TubeqError as err:
        event(log, "master.start_failed", logging.ERROR, error=err.message)
        return 2
    if not config.peers:  # a lone master elects itself: be ready when it serves
        master.wait_active(15)
    write_ready(config.data_dir, {"role": "master", "address": master.address,
                                  "metrics": master.metrics_address, "epoch": master.epoch,
                                  "raft": master.raft.settings.node})
    signals.wait(master.stopped)
    master.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
