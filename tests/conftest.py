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


# How `make test` spreads the suite over its workers (pytest-xdist, --dist loadgroup): a file's
# tests stay together (its module fixtures, a shared cluster, are made once), except that every
# test on the Spark session goes to one worker, so the suite starts one Spark JVM (each costs
# this machine about a minute of CPU) instead of one per worker. The longest units go first
# (the Spark session's, then the other Spark and load files): started last, they would be the
# run's tail.
SPARK_SESSION_GROUP = "spark-session"
FIRST_DIRS = ("tests/spark/", "tests/load/", "tests/deploy/", "tests/integration/")


def work_unit(item: pytest.Item) -> str:
    path = item.nodeid.split("::")[0]
    if path.startswith("tests/spark/") and "spark" in getattr(item, "fixturenames", ()):
        return SPARK_SESSION_GROUP
    return path


def start_rank(item: pytest.Item) -> int:
    if work_unit(item) == SPARK_SESSION_GROUP:
        return 0
    path = item.nodeid
    return next((i + 1 for i, d in enumerate(FIRST_DIRS) if path.startswith(d)),
                len(FIRST_DIRS) + 1)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(work_unit(item)))
    items.sort(key=start_rank)
