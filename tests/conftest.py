"""Session-wide credentials: every test cluster runs with auth on (the default), its masters
give the first admin one password made for this session, and the test process carries that
admin's credentials and the cluster secret in its environment. So every client a test makes
logs in as the admin, and so do the processes it starts (CLI subprocesses, Spark's Python
workers); tests of authentication itself clear the variables (monkeypatch) or run clusters
without the given password."""
from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

ADMIN_PASSWORD_FILE_ENV = "TUBEQ_TEST_ADMIN_PASSWORD_FILE"  # read by tests/cluster.py


@pytest.fixture(scope="session", autouse=True)
def session_credentials(tmp_path_factory) -> Iterator[None]:
    password = secrets.token_urlsafe(24)
    path = tmp_path_factory.mktemp("secrets") / "admin-password"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    env = {"TUBEQ_USER": "admin", "TUBEQ_PASSWORD": password,
           "TUBEQ_CLUSTER_SECRET": secrets.token_urlsafe(32),
           ADMIN_PASSWORD_FILE_ENV: str(path),
           # cluster up writes the user's credentials file there, never to the real home
           "XDG_CONFIG_HOME": str(tmp_path_factory.mktemp("config"))}
    saved = {k: os.environ.get(k) for k in (*env, "TUBEQ_API_KEY", "TUBEQ_TOKEN",
                                             "TUBEQ_CREDENTIALS_FILE")}
    for k in ("TUBEQ_API_KEY", "TUBEQ_TOKEN", "TUBEQ_CREDENTIALS_FILE"):
        os.environ.pop(k, None)
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
