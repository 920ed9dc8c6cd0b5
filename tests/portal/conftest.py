"""A real cluster (one master, one broker) for the portal tests of a module, and the portal
app over it driven by Flask's test client."""
from __future__ import annotations

import re

import pytest

from lib.admin import AdminClient
from portal_web import PortalConfig, create_app
from tests.cluster import Cluster

VIEWER = ("vera", "vera-viewer-password")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    made = Cluster(tmp_path_factory.mktemp("portal-cluster"))
    try:
        made.start(1)
        with AdminClient(made.master_addresses, credentials=made.admin_credentials()) as root:
            root.add_user(*VIEWER, roles=["viewer"])
            for resource, name, pattern in (("topic", "", "prefix"), ("group", "", "prefix"),
                                            ("cluster", "cluster", "literal")):
                root.add_acl("role:viewer", "describe", resource, name, pattern=pattern)
        yield made
    finally:
        made.stop_all()


@pytest.fixture
def app(cluster):
    made = create_app(PortalConfig(masters=cluster.master_addresses, master_timeout_s=5),
                      testing=True)
    yield made
    made.extensions["tubeq"].close()


def log_in(client, user: str, password: str, follow: bool = False):
    """POST the login form as a browser would (with the form's own token)."""
    page = client.get("/login")
    token = re.search(r'name="login_token" value="([^"]+)"', page.text).group(1)
    return client.post("/login", data={"user": user, "password": password,
                                       "login_token": token}, follow_redirects=follow)


def csrf_of(client) -> str:
    return client.get("/api/v1/whoami").json["csrf_token"]


@pytest.fixture
def admin_client(app, cluster):
    client = app.test_client()
    creds = cluster.admin_credentials()
    assert log_in(client, creds.user, creds.password).status_code == 302
    return client


@pytest.fixture
def viewer_client(app):
    client = app.test_client()
    assert log_in(client, *VIEWER).status_code == 302
    return client
