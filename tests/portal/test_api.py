"""The portal's JSON API and pages through Flask's test client, over a real cluster: login
required, CSRF required for changes from a session, viewers change nothing, errors are JSON
that name the problem, hostile names and values come back escaped, and the OpenAPI document
matches the routes."""
from __future__ import annotations

import re

import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from lib import Producer
from lib.admin import AdminClient
from tests.integration.test_consumer_common import wait_for
from tests.portal.conftest import csrf_of, log_in


def test_everything_but_login_needs_a_login(app):
    client = app.test_client()
    page = client.get("/topics")
    assert page.status_code == 302 and page.headers["Location"].startswith("/login?next=")
    api = client.get("/api/v1/topics")
    assert api.status_code == 401 and api.json["error"]["code"] == "UNAUTHENTICATED"
    assert client.get("/api/v1/openapi.json").status_code == 200
    bad = client.get("/api/v1/topics", headers={"Authorization": "Basic eA=="})
    assert bad.status_code == 401 and "Bearer <token>" in bad.json["error"]["message"]


def test_a_wrong_password_or_a_forged_login_form_gets_no_session(app):
    client = app.test_client()
    wrong = log_in(client, "admin", "not-the-password")
    assert wrong.status_code == 401 and "wrong user or password" in wrong.text
    assert "tubeq_session" not in wrong.headers.get("Set-Cookie", "")
    forged = client.post("/login", data={"user": "admin", "password": "x",
                                         "login_token": "made-up"})
    assert forged.status_code == 403 and "expired" in forged.text


def test_session_cookie_is_httponly_and_samesite(app, cluster):
    creds = cluster.admin_credentials()
    response = log_in(app.test_client(), creds.user, creds.password)
    cookie = next(c for c in response.headers.getlist("Set-Cookie")
                  if c.startswith("tubeq_session="))
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert response.headers["Location"] == "/"


def test_create_list_describe_and_delete_a_topic_through_the_api(admin_client):
    csrf = {"X-CSRF-Token": csrf_of(admin_client)}
    made = admin_client.post("/api/v1/topics", json={"name": "api-topic", "partitions": 3,
                                                     "unclean_leader_election": True},
                             headers=csrf)
    assert made.status_code == 201 and made.json["partition_count"] == 3
    assert made.json["unclean_leader_election"] is True
    again = admin_client.post("/api/v1/topics", json={"name": "api-topic"}, headers=csrf)
    assert again.status_code == 409 and again.json["error"]["code"] == "TOPIC_EXISTS"
    listed = admin_client.get("/api/v1/topics?q=api-&sort=-name").json
    assert [t["name"] for t in listed["items"]] == ["api-topic"] and listed["total"] == 1
    one = admin_client.get("/api/v1/topics/api-topic").json
    assert [p["partition"] for p in one["partitions"]] == [0, 1, 2]
    assert one["replication_factor"] == 1 and one["min_insync_replicas"] == 1
    assert all(p["replicas"] == p["isr"] == [p["broker_id"]] for p in one["partitions"])
    unconfirmed = admin_client.delete("/api/v1/topics/api-topic", headers=csrf)
    assert unconfirmed.status_code == 400 and "type the topic's name" in \
        unconfirmed.json["error"]["message"]
    assert admin_client.delete("/api/v1/topics/api-topic?confirm=api-topic",
                               headers=csrf).status_code == 204
    gone = admin_client.get("/api/v1/topics/api-topic")
    assert gone.status_code == 404 and "api-topic" in gone.json["error"]["message"]


def test_changes_from_a_session_need_its_csrf_token(admin_client):
    refused = admin_client.post("/api/v1/topics", json={"name": "no-csrf"})
    assert refused.status_code == 403 and refused.json["error"]["code"] == "CSRF"
    wrong = admin_client.post("/api/v1/topics", json={"name": "no-csrf"},
                              headers={"X-CSRF-Token": "guess"})
    assert wrong.status_code == 403
    form = admin_client.post("/topics/new", data={"name": "no-csrf"})
    assert form.status_code == 403 and "CSRF" in form.text
    assert admin_client.get("/api/v1/topics/no-csrf").status_code == 404


def test_an_api_token_needs_no_csrf_and_acts_as_its_user(app, cluster):
    creds = cluster.admin_credentials()
    client = app.test_client()
    token = client.post("/api/v1/login", json={"user": creds.user,
                                               "password": creds.password}).json["token"]
    auth = {"Authorization": f"Bearer {token}"}
    made = client.post("/api/v1/topics", json={"name": "by-token"}, headers=auth)
    assert made.status_code == 201
    entries = client.get("/api/v1/audit?action=create_topic&target=by-token",
                         headers=auth).json["items"]
    assert [e["principal"] for e in entries] == ["admin"]  # the user, not the portal


def test_a_viewer_reads_but_cannot_change_anything(viewer_client, admin_client):
    csrf = {"X-CSRF-Token": csrf_of(admin_client)}
    admin_client.post("/api/v1/topics", json={"name": "seen-topic"}, headers=csrf)
    assert "seen-topic" in viewer_client.get("/topics").text
    page = viewer_client.get("/topics/seen-topic").text
    assert 'id="delete-topic"' not in page and 'id="new-topic"' not in \
        viewer_client.get("/topics").text
    mine = {"X-CSRF-Token": csrf_of(viewer_client)}
    denied = viewer_client.post("/api/v1/topics", json={"name": "vera-topic"}, headers=mine)
    assert denied.status_code == 403 and "vera may not create" in \
        denied.json["error"]["message"]
    kept = viewer_client.delete("/api/v1/topics/seen-topic?confirm=seen-topic", headers=mine)
    assert kept.status_code == 403


def test_bad_input_is_a_json_error_naming_the_field(admin_client):
    csrf = {"X-CSRF-Token": csrf_of(admin_client)}
    cases = [({"name": "x", "partitions": "many"}, "partitions must be an integer"),
             ({"name": "x", "partitions": 0}, "partitions must be between 1 and 10000"),
             ({"name": "bad name!"}, "invalid topic name"),
             ({"name": "x", "durability": "maybe"}, "durability"),
             ({"name": "x", "unclean_leader_election": "perhaps"},
              "unclean_leader_election must be true or false"),
             ({"name": "x", "replication_factor": 17}, "invalid topic setting "
                                                       "replication_factor=17")]
    for body, why in cases:
        got = admin_client.post("/api/v1/topics", json=body, headers=csrf)
        assert got.status_code == 400 and why in got.json["error"]["message"], (body, got.json)
    not_json = admin_client.post("/api/v1/topics", data="x", headers=csrf)
    assert not_json.status_code == 400 and "JSON object" in not_json.json["error"]["message"]
    assert admin_client.get("/api/v1/topics?sort=size").status_code == 400
    assert admin_client.get("/api/v1/topics?per_page=100000").status_code == 400


def test_hostile_values_are_escaped_in_pages(admin_client):
    hostile = "<script>alert(1)</script>"
    page = admin_client.get(f"/topics?q={hostile}")
    assert hostile not in page.text and "&lt;script&gt;" in page.text
    audit = admin_client.get(f"/audit?principal={hostile}").text
    assert hostile not in audit
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]


def test_dashboard_shows_masters_brokers_and_counts(admin_client, cluster):
    page = admin_client.get("/").text
    assert "leader" in page and cluster.brokers[1].address in page
    overview = admin_client.get("/api/v1/overview").json
    assert [m["role"] for m in overview["masters"]] == ["leader"]
    assert overview["problems"] == [] and overview["alerts"] == []


def test_pages_render_for_an_admin(admin_client):
    csrf = {"X-CSRF-Token": csrf_of(admin_client)}
    admin_client.post("/api/v1/topics", json={"name": "paged"}, headers=csrf)
    for path in ("/", "/topics", "/topics/new", "/topics/paged", "/groups", "/brokers",
                 "/audit"):
        response = admin_client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        assert response.headers["Cache-Control"] == "no-store"


def test_logout_ends_the_session(admin_client):
    csrf = csrf_of(admin_client)
    assert admin_client.post("/logout", data={"csrf_token": csrf}).status_code == 302
    assert admin_client.get("/api/v1/topics").status_code == 401


def test_the_openapi_document_and_the_routes_agree(app):
    spec = app.test_client().get("/api/v1/openapi.json").json
    documented = {(path, method.upper()) for path, ops in spec["paths"].items() for method in ops}
    routed = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/v1/"):
            path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule[len("/api/v1"):])
            routed |= {(path, m) for m in rule.methods - {"HEAD", "OPTIONS"}}
    assert documented == routed
    assert spec["openapi"].startswith("3.1")
    validate(spec)  # raises, naming the place, if the document breaks OpenAPI 3.1


def test_the_spec_validator_catches_a_broken_document(app):
    """The check above can fail: a path parameter that no operation declares is refused."""
    spec = app.test_client().get("/api/v1/openapi.json").json
    spec["paths"]["/nowhere/{thing}"] = {"get": {"responses": {"200": {"description": "ok"}}}}
    with pytest.raises(OpenAPIValidationError):
        validate(spec)


def test_a_second_login_page_keeps_the_first_forms_token(app, cluster):
    """A browser that loads /login again (a second tab, or a redirect followed for its
    favicon) must not invalidate the form already on screen."""
    client = app.test_client()
    first = re.search(r'name="login_token" value="([^"]+)"', client.get("/login").text)
    second = re.search(r'name="login_token" value="([^"]+)"', client.get("/login").text)
    assert first.group(1) == second.group(1)
    creds = cluster.admin_credentials()
    done = client.post("/login", data={"user": creds.user, "password": creds.password,
                                       "login_token": first.group(1)})
    assert done.status_code == 302 and done.headers["Location"] == "/"


def test_a_topic_is_altered_by_form_and_api(admin_client):
    csrf = csrf_of(admin_client)
    assert admin_client.post("/api/v1/topics", json={"name": "alterable", "partitions": 1},
                             headers={"X-CSRF-Token": csrf}).status_code == 201
    grown = admin_client.patch("/api/v1/topics/alterable", headers={"X-CSRF-Token": csrf},
                               json={"partitions": 2, "retention_ms": 60000})
    assert grown.status_code == 200, grown.json
    assert grown.json["partition_count"] == 2 and grown.json["retention_ms"] == 60000
    empty = admin_client.patch("/api/v1/topics/alterable", headers={"X-CSRF-Token": csrf},
                               json={})
    assert empty.status_code == 400 and "nothing to change" in empty.json["error"]["message"]
    shrink = admin_client.patch("/api/v1/topics/alterable", headers={"X-CSRF-Token": csrf},
                                json={"partitions": 1})
    assert shrink.status_code == 400 and "partition" in shrink.json["error"]["message"]
    form = admin_client.post("/topics/alterable/alter", data={
        "csrf_token": csrf, "partitions": "", "max_message_bytes": "2048"})
    assert form.status_code == 302
    after = admin_client.get("/api/v1/topics/alterable").json
    assert after["max_message_bytes"] == 2048 and after["partition_count"] == 2
    unforged = admin_client.post("/topics/alterable/alter", data={"partitions": "3"})
    assert unforged.status_code == 403


def test_bytes_on_disk_per_partition_on_the_topic_and_broker_pages(admin_client, cluster):
    """Records of a sync topic are in the files when acknowledged; the broker reports each
    partition's bytes (records plus index) in its next heartbeat."""
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as root:
        root.create_topic("on-disk", partitions=2, durability="sync")
    value = b"v" * 1000
    with Producer(cluster.master_addresses, linger_ms=0) as producer:
        for _ in range(50):
            producer.send_sync("on-disk", value, partition=0, timeout=30)

    def partitions():
        return admin_client.get("/api/v1/topics/on-disk").json["partitions"]
    wait_for(lambda: partitions()[0]["disk_bytes"] >= 50 * (len(value) + 24), 20,
             "partition 0's bytes on disk in a heartbeat")
    p0, p1 = partitions()
    assert p0["disk_bytes"] < 50 * (len(value) + 200)  # the frames' overhead is small
    assert p1["disk_bytes"] == 0  # nothing written there
    page = admin_client.get("/topics/on-disk").text
    assert f'data-bytes="{p0["disk_bytes"]}"' in page and 'id="disk-bytes"' in page
    broker = admin_client.get(f"/api/v1/brokers/{p0['broker_id']}").json
    hosted = {(p["topic"], p["partition"]): p["disk_bytes"] for p in broker["partitions"]}
    assert hosted[("on-disk", 0)] == p0["disk_bytes"]
    assert broker["disk_bytes"] >= p0["disk_bytes"]
