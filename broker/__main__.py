"""``python -m broker``: run one broker until SIGTERM/SIGINT.

Writes ``<data_dir>/ready.json`` (role, broker_id, address, metrics) once the gRPC server
listens; registration with the master may still be in progress then. A data dir that group
or others can read is refused (lib/private_files.py); what the broker writes is 0700/0600.
"""
from __future__ import annotations

import argparse
import logging
import sys

from broker.config import load
from broker.server import Broker
from lib.auth.settings import AUTH_MODES
from lib.errors import TubeqError
from lib.gc_freeze import freeze_long_lived
from lib.logs import event, setup
from lib.memory import keep_freed_memory, share_one_arena
from lib.open_files import raise_open_files
from lib.private_files import enter_data_dir, private_umask
from lib.process import StopSignals, write_ready
from lib.tls import add_server_args, server_overrides

log = logging.getLogger("broker")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m broker", description="Run a tubeq broker.")
    p.add_argument("--config", help="TOML file with a [broker] table (and [broker.store])")
    p.add_argument("--data-dir", dest="data_dir")
    p.add_argument("--broker-id", dest="broker_id", type=int)
    p.add_argument("--masters", help="comma-separated master host:port list")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--metrics-port", dest="metrics_port", type=int)
    p.add_argument("--advertised-address", dest="advertised_address")
    p.add_argument("--rack", help="rack (or zone) of this broker: replicas of a partition go "
                                  "to distinct racks")
    p.add_argument("--kafka-port", dest="kafka_port", type=int,
                   help="serve the Kafka protocol on this port (0: any free port; off if unset)")
    p.add_argument("--kafka-advertised-address", dest="kafka_advertised_address")
    p.add_argument("--auth", choices=AUTH_MODES, help="token (the default) or none")
    add_server_args(p)
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    share_one_arena()  # before any thread starts (lib/memory.py)
    freeze_long_lived()  # full collections skip the stores' objects (lib/gc_freeze.py)
    private_umask()  # nothing this process creates is for other users (lib/private_files.py)
    args = parse_args(argv)
    setup("broker", args.broker_id if args.broker_id is not None else "?", args.log_level)
    keep_freed_memory()  # requests and cache blocks reuse pages (lib/memory.py)
    try:
        config = load(args.config, data_dir=args.data_dir, broker_id=args.broker_id,
                      masters=args.masters, host=args.host, port=args.port,
                      metrics_port=args.metrics_port, advertised_address=args.advertised_address,
                      rack=args.rack, kafka_port=args.kafka_port,
                      kafka_advertised_address=args.kafka_advertised_address,
                      auth=args.auth, **server_overrides(args))
        enter_data_dir(config.data_dir, config.data_dir_group_access)
        limit, before = raise_open_files(config.open_files_limit)
        event(log, "broker.open_files_limit", logging.INFO if limit >= config.open_files_limit
              else logging.WARNING, limit=limit, was=before, wanted=config.open_files_limit)
        signals = StopSignals()  # one sent while the broker starts stops it once started
        broker = Broker(config).start()
    except TubeqError as err:
        event(log, "broker.start_failed", logging.ERROR, error=err.message)
        return 2
    write_ready(config.data_dir, {"role": "broker", "broker_id": config.broker_id,
                                  "address": broker.address, "metrics": broker.metrics_address,
                                  **({"kafka": broker.kafka_address}
                                     if broker.kafka_address else {}),
                                  **({"replica_stream": broker.replica_stream_port}
                                     if broker.replica_stream_port else {}),
                                  **({"client_stream": broker.client_stream_port}
                                     if broker.client_stream_port else {})})
    signals.wait(broker.stopped)
    broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
