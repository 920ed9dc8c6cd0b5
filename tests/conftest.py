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


# How `make test` spreads the suite over its workers (pytest-xdist, --dist loadfile): a file's
# tests stay together (its module fixtures, a shared cluster, are made once), and the Spark tests
# on the session (every tests/spark file but the test_driver_*.py ones, which run drivers of
# their own) are one unit, so the suite starts one Spark JVM (each costs this machine about a
# minute of CPU) instead of one per worker. The longest units go first (the Spark session's,
# then the other Spark and the load files): started last, they would be the run's tail.
# (xdist's own --dist loadgroup cannot do it with pytest 9: it renames nodes through
# ``item._nodeid``, which pytest 9 no longer reads.)
SPARK_SESSION_UNIT = "tests/spark/(session)"
FIRST_DIRS = ("tests/spark/", "tests/load/", "tests/deploy/", "tests/integration/")


def work_unit(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    if path.startswith("tests/spark/") and not path.startswith("tests/spark/test_driver_"):
        return SPARK_SESSION_UNIT
    return path


def start_rank(nodeid: str) -> int:
    if work_unit(nodeid) == SPARK_SESSION_UNIT:
        return 0
    return next((i + 1 for i, d in enumerate(FIRST_DIRS) if nodeid.startswith(d)),
                len(FIRST_DIRS) + 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: start_rank(item.nodeid))


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        """--dist loadfile with the units of :func:`work_unit`, in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # keep the order above
    return SuiteScheduling(config, log)
