"""``python -m portal_web``: the operations portal (see portal_web/config.py)."""
from __future__ import annotations

import argparse
import sys
import tomllib

from lib.config import build
from lib.errors import ConfigError
from lib.logs import setup
from lib.private_files import enter_data_dir, private_umask
from portal_web.config import PortalConfig
from portal_web.server import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal_web", description=__doc__)
    parser.add_argument("--config", help="TOML file with a [portal] table")
    parser.add_argument("--masters")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--data-dir")
    parser.add_argument("--tls-cert", help="PEM certificate: serve HTTPS")
    parser.add_argument("--tls-key", help="PEM key of --tls-cert")
    parser.add_argument("--monitor-credentials-file",
                        help="the portal's own credentials for sampling the charts")
    parser.add_argument("--log-level", default="INFO")
    private_umask()  # nothing this process creates is for other users (lib/private_files.py)
    args = parser.parse_args(argv)
    setup("portal", "web", args.log_level)
    try:
        table = {}
        if args.config:
            with open(args.config, "rb") as f:
                table = tomllib.load(f).get("portal", {})
        config = build(PortalConfig, table, masters=args.masters, host=args.host,
                       port=args.port, data_dir=args.data_dir, tls_cert=args.tls_cert,
                       tls_key=args.tls_key,
                       monitor_credentials_file=args.monitor_credentials_file)
        enter_data_dir(config.data_dir, config.data_dir_group_access)
    except (ConfigError, OSError, tomllib.TOMLDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    serve(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
