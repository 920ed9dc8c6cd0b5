"""The portal's one frozen config (TOML table ``[portal]``, command-line overrides)."""
from __future__ import annotations

from dataclasses import dataclass

from lib.config import require

DEFAULT_MASTERS = "127.0.0.1:8715,127.0.0.1:8716,127.0.0.1:8717"


@dataclass(frozen=True)
class PortalConfig:
    masters: str = DEFAULT_MASTERS
    host: str = "127.0.0.1"
    port: int = 8080  # 0: any free port (written to ready.json)
    data_dir: str = "tubeq-data/portal"
    data_dir_group_access: bool = False  # 0750 instead of 0700 (lib/private_files.py)
    tls_cert: str = ""  # PEM: serve HTTPS (session cookies are then Secure)
    tls_key: str = ""
    session_ttl_s: int = 8 * 3600  # at most the token's life: the master's token_ttl_s
    max_sessions: int = 10_000  # beyond, the oldest session is logged out
    master_timeout_s: float = 5.0  # a page shows what it got after this, naming the master
    threads: int = 16  # WSGI worker threads
    page_size: int = 100  # rows per page of long lists
    max_page_size: int = 1000
    # the portal's own identity for the charts' sampler (a credentials file: user = ...,
    # password = ...; describe on topics and groups is enough); "": no sampling, no charts
    monitor_credentials_file: str = ""
    sample_interval_s: float = 10.0
    history_s: float = 3600.0  # how far back the charts go (kept in memory)

    def validate(self) -> None:
        require(1 <= self.port + 1 <= 65536, "PortalConfig.port must be 0..65535")
        require(bool(self.tls_cert) == bool(self.tls_key),
                "PortalConfig: tls_cert needs tls_key (and tls_key needs tls_cert)")
        require(60 <= self.session_ttl_s <= 7 * 86400,
                "PortalConfig.session_ttl_s must be 60..604800")
        require(1 <= self.max_sessions <= 1_000_000, "PortalConfig.max_sessions must be 1..1e6")
        require(0.1 <= self.master_timeout_s <= 120,
                "PortalConfig.master_timeout_s must be 0.1..120")
        require(1 <= self.threads <= 256, "PortalConfig.threads must be 1..256")
        require(0.1 <= self.sample_interval_s <= 3600,
                "PortalConfig.sample_interval_s must be 0.1..3600")
        require(self.sample_interval_s <= self.history_s <= 7 * 86400,
                "PortalConfig.history_s must be sample_interval_s..604800")
        require(1 <= self.page_size <= self.max_page_size <= 10_000,
                "PortalConfig: need 1 <= page_size <= max_page_size <= 10000")

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)
