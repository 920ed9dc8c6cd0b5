"""Serve the app with cheroot (a threaded WSGI server with TLS built in), not Flask's
development server; the bound address goes to ``ready.json`` as for masters and brokers."""
from __future__ import annotations

import logging
import threading
from pathlib import Path

from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

from lib.logs import event
from lib.process import StopSignals, write_ready
from portal_web.app import create_app
from portal_web.config import PortalConfig

log = logging.getLogger(__name__)


class PortalServer:
    def __init__(self, config: PortalConfig) -> None:
        self.config = config
        self.app = create_app(config)
        self.server = wsgi.Server((config.host, config.port), self.app,
                                  numthreads=config.threads, server_name="tubeq-portal",
                                  timeout=30, shutdown_timeout=5)
        self.server.max_request_body_size = 1 << 20
        if config.tls:
            self.server.ssl_adapter = BuiltinSSLAdapter(config.tls_cert, config.tls_key)

    @property
    def url(self) -> str:
        host, port = self.server.bind_addr[:2]
        return f"{'https' if self.config.tls else 'http'}://{host}:{port}"

    def start(self) -> str:
        self.server.prepare()  # binds: port 0 becomes a real port
        threading.Thread(target=self.server.serve, name="portal-http", daemon=True).start()
        Path(self.config.data_dir).mkdir(parents=True, exist_ok=True)
        host, port = self.server.bind_addr[:2]
        write_ready(self.config.data_dir, {"role": "portal", "address": f"{host}:{port}",
                                           "url": self.url})
        event(log, "portal.serving", url=self.url)
        return self.url

    def stop(self) -> None:
        self.server.stop()
        self.app.extensions["tubeq"].close()


def serve(config: PortalConfig) -> None:
    """Run until SIGTERM or SIGINT."""
    server = PortalServer(config)
    signals = StopSignals()
    server.start()
    signals.wait()
    server.stop()
