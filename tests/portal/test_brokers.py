"""Brokers in the portal over a real cluster (one broker): the list shows each broker's
placement state, admins drain and undrain from the page or the JSON API (CSRF still needed
from a session), viewers see no button and a clear refusal, the detail page lists the
partitions a broker hosts, and with the only broker draining a create fails saying why.
Every test undrains the module's broker in the end: the other tests of the module need it."""
from __future__ import annotations

import re

import pytest

from lib.admin import AdminClient
from tests.portal.conftest import csrf_of


@pytest.fixture
def undrain(cluster):
    yield
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as root:
        root.undrain_broker(1)


def test_an_admin_drains_and_undrains_from_the_brokers_page(admin_client, undrain):
    page = admin_client.get("/brokers").text
    assert 'id="drain-1"' in page and 'id="undrain-1"' not in page and ">open<" in page
    form = re.search(r'<form[^>]*id="drain-1"[^>]*action="([^"]+)"', page, re.S)
    assert form.group(1) == "/brokers/1/drain"
    csrf = csrf_of(admin_client)
    done = admin_client.post("/brokers/1/drain", data={"csrf_token": csrf, "back": "list"})
    assert done.status_code == 302 and done.headers["Location"] == "/brokers"
    page = admin_client.get("/brokers").text
    assert 'id="undrain-1"' in page and ">draining<" in page
    assert admin_client.get("/api/v1/brokers").json[0]["draining"] is True
    alerts = admin_client.get("/api/v1/overview").json["alerts"]
    assert "broker 1 is draining (info): no new partitions are placed on it; it still holds 0 " \
        "replica(s)" in alerts
    back = admin_client.post("/brokers/1/undrain", data={"csrf_token": csrf})
    assert back.status_code == 302 and back.headers["Location"] == "/brokers/1"
    assert admin_client.get("/api/v1/brokers").json[0]["draining"] is False
    refused = admin_client.post("/brokers/1/drain", data={"back": "list"})
    assert refused.status_code == 403 and "CSRF" in refused.text


def test_the_broker_page_lists_the_partitions_it_hosts(admin_client, cluster):
    csrf = {"X-CSRF-Token": csrf_of(admin_client)}
    assert admin_client.post("/api/v1/topics", json={"name": "hosted", "partitions": 3},
                             headers=csrf).status_code == 201
    one = admin_client.get("/api/v1/brokers/1").json
    assert one["broker_id"] == 1 and one["address"] == cluster.brokers[1].address
    assert one["alive"] and not one["draining"] and one["partition_count"] >= 3
    assert [p["partition"] for p in one["partitions"] if p["topic"] == "hosted"] == [0, 1, 2]
    assert {"disk_free_bytes", "disk_reserve_bytes", "disk_full", "messages",
            "topic_count"} <= set(one)
    page = admin_client.get("/brokers/1")
    assert page.status_code == 200 and 'href="/topics/hosted"' in page.text
    assert 'id="drain-1"' in page.text and "open: takes new partitions" in page.text
    assert 'href="/brokers/1"' in admin_client.get("/brokers").text
    missing = admin_client.get("/api/v1/brokers/42")
    assert missing.status_code == 404 and missing.json["error"]["code"] == "UNKNOWN_BROKER"
    assert "unknown broker 42" in missing.json["error"]["message"]
    assert admin_client.get("/brokers/42").status_code == 404
    too_big = admin_client.post(f"/api/v1/brokers/{2**31}/drain", headers=csrf)
    assert too_big.status_code == 400 and "broker_id" in too_big.json["error"]["message"]


def test_the_json_api_drains_and_a_create_with_no_open_broker_fails_clearly(app, admin_client,
                                                                            cluster, undrain):
    csrf = {"X-CSRF-Token": csrf_of(admin_client)}
    for _ in range(2):  # idempotent
        drained = admin_client.post("/api/v1/brokers/1/drain", headers=csrf)
        assert drained.status_code == 200 and drained.json["draining"] is True
    assert admin_client.get("/api/v1/brokers/1").json["draining"] is True
    refused = admin_client.post("/api/v1/topics", json={"name": "nowhere"}, headers=csrf)
    assert refused.status_code == 503 and refused.json["error"]["code"] == "NOT_ENOUGH_BROKERS"
    assert "every live broker is draining" in refused.json["error"]["message"]
    page = admin_client.post("/topics/new", data={"name": "nowhere", "csrf_token":
                                                  csrf["X-CSRF-Token"]})
    assert page.status_code == 503 and "every live broker is draining" in page.text
    creds = cluster.admin_credentials()  # an API token needs no CSRF token
    token = app.test_client().post("/api/v1/login", json={
        "user": creds.user, "password": creds.password}).json["token"]
    undrained = app.test_client().post("/api/v1/brokers/1/undrain",
                                       headers={"Authorization": f"Bearer {token}"})
    assert undrained.status_code == 200 and undrained.json["draining"] is False
    assert admin_client.post("/api/v1/topics", json={"name": "somewhere"},
                             headers=csrf).status_code == 201
    actions = [e["action"] for e in admin_client.get(
        "/api/v1/audit?target=broker 1").json["items"]]
    assert actions[-2:] == ["drain_broker", "undrain_broker"]


def test_a_viewer_sees_no_drain_button_and_is_refused_clearly(viewer_client, admin_client,
                                                              undrain):
    for path in ("/brokers", "/brokers/1"):
        page = viewer_client.get(path)
        assert page.status_code == 200 and "drain-1" not in page.text and "/drain" not in page.text
    csrf = csrf_of(viewer_client)
    api = viewer_client.post("/api/v1/brokers/1/drain", headers={"X-CSRF-Token": csrf})
    assert api.status_code == 403 and api.json["error"]["code"] == "PERMISSION_DENIED"
    message = api.json["error"]["message"]
    assert message.startswith("only an admin (admin on the cluster) may drain a broker")
    assert "vera may not admin" in message
    form = viewer_client.post("/brokers/1/undrain", data={"csrf_token": csrf})
    assert form.status_code == 403 and "may undrain a broker" in form.text
    assert admin_client.get("/api/v1/brokers/1").json["draining"] is False
