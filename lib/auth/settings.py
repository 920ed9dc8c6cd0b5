"""A server's auth settings: the mode and the cluster secret, checked when its config loads.

``auth = "token"`` (the default) checks every call but the public ones; ``auth = "none"`` is an
explicit choice that lets every call pass as ``anonymous``, said loudly at start
(:func:`announce_auth_off`). Brokers and masters prove to each other that they belong to the
cluster with the cluster secret that ``cluster up`` makes (from the config or
``$TUBEQ_CLUSTER_SECRET``), sent as ``authorization: Cluster <secret>``
(:func:`cluster_header`); lib/auth/identities.py checks it on arrival.
"""
from __future__ import annotations

import logging

from lib.auth.client import AUTH_HEADER

AUTH_MODES = ("token", "none")
CLUSTER_SECRET_ENV = "TUBEQ_CLUSTER_SECRET"
MIN_CLUSTER_SECRET = 16


def auth_setting_problem(component: str, auth: str, cluster_secret: str) -> str:
    """What is wrong with a component's ``auth`` and cluster secret settings ('' if nothing)."""
    if auth not in AUTH_MODES:
        return f"{component}.auth must be one of {AUTH_MODES}"
    if auth != "none" and len(cluster_secret) < MIN_CLUSTER_SECRET:
        return (f"{component}: auth = 'token' needs cluster_secret (or ${CLUSTER_SECRET_ENV}) "
                f"of at least {MIN_CLUSTER_SECRET} characters: brokers and masters present it "
                "to each other")
    return ""


def announce_auth_off(logger: logging.Logger) -> None:
    """Said at the start of every process that runs with ``auth = "none"``."""
    logger.warning("security.auth_disabled", extra={"fields": {
        "warning": "auth = 'none': every call is allowed to anyone who can reach this port; "
                   "use only on a trusted network"}})


def cluster_header(secret: str) -> tuple[tuple[str, str], ...]:
    """Metadata a broker or master presents to its peers."""
    return ((AUTH_HEADER, f"Cluster {secret}"),) if secret else ()
