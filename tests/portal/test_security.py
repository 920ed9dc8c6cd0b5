"""The security pages and their JSON API over a real cluster: admins add users that can then
log in, give them ACL entries that change what they see, create API keys shown once that work
until revoked, set quotas and IP rules; viewers are refused everything (403), forms need the
CSRF token, bad input is a 400 naming the field, hostile values come back escaped, and the
audit log names the admin who made each change."""
from __future__ import annotations

import logging
import re

import pytest

from lib.admin import AdminClient
from tests.portal.conftest import VIEWER, csrf_of, log_in

PASSWORD = "sam-first-password"
PAGES = ("/security/users", "/security/users/admin", "/security/api-keys", "/security/acls",
         "/security/quotas", "/security/ip-rules")
FORMS = ("/security/users", "/security/users/admin/roles", "/security/users/admin/password",
         "/security/users/admin/delete", "/security/api-keys", "/security/api-keys/abc/revoke",
         "/security/acls", "/security/acls/remove", "/security/quotas",
         "/security/quotas/remove", "/security/ip-rules", "/security/ip-rules/remove")
API_CALLS = (("get", "/users"), ("post", "/users"), ("get", "/users/admin"),
             ("put", "/users/admin/roles"), ("put", "/users/admin/password"),
             ("delete", "/users/admin?confirm=admin"), ("get", "/api-keys"),
             ("post", "/api-keys"), ("delete", "/api-keys/abc"), ("get", "/acls"),
             ("post", "/acls"), ("delete", "/acls"), ("get", "/quotas"),
             ("put", "/quotas/user:vera"), ("delete", "/quotas/user:vera"),
             ("get", "/ip-rules"), ("post", "/ip-rules"), ("delete", "/ip-rules"))


@pytest.fixture(scope="module")
def root(cluster):
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as made:
        yield made


@pytest.fixture(autouse=True)
def restored(root):
    """Whatever a test adds (users and their keys, ACL entries, quotas, IP rules) is gone
    after it, so each test starts from the conftest's cluster: admin, vera and her ACLs."""
    users = {u.name for u in root.list_users()}
    acls, quotas, rules = set(root.list_acls()), set(root.list_quotas()), \
        set(root.list_ip_rules())
    yield
    for rule in set(root.list_ip_rules()) - rules:
        root.remove_ip_rule(rule.network, effect=rule.effect, prefix=rule.pattern == "prefix",
                            topic=rule.name if rule.scope == "topic" else None)
    for quota in set(root.list_quotas()) - quotas:
        root.remove_quota(quota.entity)
    for entry in set(root.list_acls()) - acls:
        root.remove_acl(entry.principal, entry.operation, entry.resource, entry.name,
                        effect=entry.effect, pattern=entry.pattern)
    for key in root.list_api_keys():
        if key.principal in users:
            root.revoke_api_key(key.key_id)
    for user in {u.name for u in root.list_users()} - users:
        root.delete_user(user)


def post(client, path: str, **form):
    """A form as the page sends it: with the session's CSRF token."""
    return client.post(path, data={"csrf_token": csrf_of(client), **form})


def api(client, method: str, path: str, **kwargs):
    """A JSON API call from a browser session (X-CSRF-Token on changes)."""
    headers = {"X-CSRF-Token": csrf_of(client)} if method != "get" else {}
    return getattr(client, method)(f"/api/v1/security{path}", headers=headers, **kwargs)


def audited(admin_client, action: str, target: str) -> list[str]:
    entries = admin_client.get(f"/api/v1/audit?action={action}&target={target}").json["items"]
    return [e["principal"] for e in entries if e["action"] == action]


def test_only_admins_see_the_security_link(admin_client, viewer_client):
    assert 'id="nav-security"' in admin_client.get("/").text
    assert 'id="nav-security"' not in viewer_client.get("/").text
    assert admin_client.get("/security").headers["Location"] == "/security/users"


def test_a_viewer_is_refused_every_page_form_and_call(viewer_client, root):
    for path in PAGES:
        page = viewer_client.get(path)
        assert page.status_code == 403 and "security is for admins only" in page.text, path
    for path in FORMS:
        refused = post(viewer_client, path, name="vera-made", password="vera-made-password",
                       password_again="vera-made-password", roles="admin", confirm="admin",
                       principal="user:vera", operation="all", resource="topic", entity="user:vera",
                       network="10.1.2.3", produce_bytes_per_s="1MiB")
        assert refused.status_code == 403 and "vera may not" in refused.text, path
    for method, path in API_CALLS:
        got = api(viewer_client, method, path, json={"name": "vera-made", "roles": ["admin"]})
        assert got.status_code == 403, (method, path, got.json)
        assert got.json["error"]["code"] == "PERMISSION_DENIED"
    assert "vera-made" not in {u.name for u in root.list_users()}
    assert dict((u.name, u.roles) for u in root.list_users())["vera"] == ("viewer",)


def test_a_viewers_api_key_is_refused_too(app, admin_client):
    made = api(admin_client, "post", "/api-keys", json={"principal": VIEWER[0]})
    assert made.status_code == 201
    key = {"Authorization": f"ApiKey {made.json['api_key']}"}
    caller = app.test_client()
    assert caller.get("/api/v1/topics", headers=key).status_code == 200  # the key works
    refused = caller.get("/api/v1/security/users", headers=key)
    assert refused.status_code == 403 and "vera may not admin" in refused.json["error"]["message"]
    denied = caller.post("/api/v1/security/users", headers=key,
                         json={"name": "by-vera-key", "password": "0123456789"})
    assert denied.status_code == 403


def test_forms_need_the_csrf_token(admin_client, root):
    for path in ("/security/users", "/security/acls", "/security/api-keys"):
        sent = admin_client.post(path, data={"name": "no-csrf", "password": PASSWORD,
                                             "principal": "admin"})
        assert sent.status_code == 403 and "CSRF" in sent.text, path
    forged = admin_client.post("/security/users", data={"csrf_token": "guess", "name": "no-csrf",
                                                        "password": PASSWORD})
    assert forged.status_code == 403
    assert "no-csrf" not in {u.name for u in root.list_users()}
    assert root.list_api_keys() == []


def test_a_user_added_by_form_logs_in_and_an_acl_lets_it_see_a_topic(app, admin_client, caplog):
    caplog.set_level(logging.DEBUG)
    csrf = {"X-CSRF-Token": csrf_of(admin_client)}
    assert admin_client.post("/api/v1/topics", json={"name": "sec-hidden"},
                             headers=csrf).status_code == 201
    made = post(admin_client, "/security/users", name="sam", password=PASSWORD,
                password_again=PASSWORD)
    assert made.status_code == 302 and made.headers["Location"] == "/security/users/sam"
    listing = admin_client.get("/security/users").text
    assert re.search(r">sam</a></td>\s*<td>user</td>", listing)
    assert PASSWORD not in listing and PASSWORD not in admin_client.get("/security/users/sam").text

    sam = app.test_client()
    assert log_in(sam, "sam", PASSWORD).status_code == 302
    assert sam.get("/api/v1/topics/sec-hidden").status_code == 403
    assert "sec-hidden" not in [t["name"] for t in sam.get("/api/v1/topics").json["items"]]
    assert 'id="nav-security"' not in sam.get("/").text

    entry = {"principal": "user:sam", "operation": "describe", "resource": "topic",
             "name": "sec-hidden", "pattern": "literal", "effect": "allow"}
    added = post(admin_client, "/security/acls", **entry)
    assert added.status_code == 302
    shown = admin_client.get(added.headers["Location"]).text
    assert "user:sam" in shown and "sec-hidden" in shown
    assert sam.get("/api/v1/topics/sec-hidden").status_code == 200
    assert "sec-hidden" in [t["name"] for t in sam.get("/api/v1/topics").json["items"]]
    on_user_page = admin_client.get("/security/users/sam").text
    assert re.search(r"<td>user:sam</td>.*?<td>sec-hidden</td>", on_user_page, re.S)

    assert post(admin_client, "/security/acls/remove", **entry).status_code == 302
    assert sam.get("/api/v1/topics/sec-hidden").status_code == 403
    assert "user:sam" not in admin_client.get("/security/acls").text

    unconfirmed = post(admin_client, "/security/users/sam/delete", confirm="sa")
    assert unconfirmed.status_code == 400 and "type the user&#39;s name (sam)" in unconfirmed.text
    assert post(admin_client, "/security/users/sam/delete", confirm="sam").status_code == 302
    assert sam.get("/api/v1/topics").status_code == 401  # logged out at once
    assert log_in(app.test_client(), "sam", PASSWORD).status_code == 401
    assert admin_client.get("/security/users/sam").status_code == 404

    for action, target in (("add_user", "sam"), ("add_acl", "user:sam"),
                           ("remove_acl", "user:sam"), ("delete_user", "sam")):
        assert audited(admin_client, action, target) == ["admin"], action
    assert PASSWORD not in caplog.text
    admin_client.delete("/api/v1/topics/sec-hidden?confirm=sec-hidden", headers=csrf)


def test_an_api_key_is_shown_once_works_and_stops_when_revoked(app, admin_client):
    assert api(admin_client, "post", "/users", json={
        "name": "kai", "password": PASSWORD, "roles": ["viewer"]}).status_code == 201
    created = post(admin_client, "/security/api-keys", principal="kai", description="ci job")
    assert created.status_code == 200 and "it will not be shown again" in created.text
    secret = re.search(r'<code id="api-key">(tqk_[^<]+)</code>', created.text).group(1)
    key_id = re.search(r'<dd id="key-id">([0-9a-f]+)</dd>', created.text).group(1)
    assert secret.startswith(f"tqk_{key_id}_")
    assert created.headers["Cache-Control"] == "no-store"
    for later in (admin_client.get("/security/api-keys").text,
                  admin_client.get("/security/users/kai").text,
                  admin_client.get("/api/v1/security/api-keys").text,
                  admin_client.get("/api/v1/security/users/kai").text):
        assert key_id in later and secret not in later and secret.split("_", 2)[2] not in later

    caller = app.test_client()
    key = {"Authorization": f"ApiKey {secret}"}
    assert caller.get("/api/v1/topics", headers=key).status_code == 200
    revoked = post(admin_client, f"/security/api-keys/{key_id}/revoke", back="user")
    assert revoked.status_code == 302 and revoked.headers["Location"] == "/security/users/kai"
    refused = caller.get("/api/v1/topics", headers=key)
    assert refused.status_code == 401 and "revoked" in refused.json["error"]["message"]
    assert key_id not in admin_client.get("/security/api-keys").text
    assert audited(admin_client, "create_api_key", "kai") == ["admin"]
    assert audited(admin_client, "revoke_api_key", "kai") == ["admin"]


def test_an_api_key_made_through_the_api_is_revoked_through_the_api(app, admin_client):
    made = api(admin_client, "post", "/api-keys", json={"principal": "admin",
                                                        "description": "automation"})
    assert made.status_code == 201 and made.json["key"]["description"] == "automation"
    key = {"Authorization": f"ApiKey {made.json['api_key']}"}
    caller = app.test_client()
    assert caller.get("/api/v1/security/users", headers=key).status_code == 200  # admin's key
    listed = api(admin_client, "get", "/api-keys?principal=admin").json["items"]
    assert [k["key_id"] for k in listed] == [made.json["key"]["key_id"]]
    assert "api_key" not in listed[0]
    gone = api(admin_client, "delete", f"/api-keys/{made.json['key']['key_id']}")
    assert gone.status_code == 204
    assert caller.get("/api/v1/security/users", headers=key).status_code == 401


def test_roles_and_password_can_be_changed(app, admin_client):
    assert api(admin_client, "post", "/users", json={
        "name": "rho", "password": PASSWORD}).json["roles"] == []
    assert post(admin_client, "/security/users/rho/roles", roles="viewer").status_code == 302
    page = admin_client.get("/security/users/rho").text
    assert '<dd id="roles">viewer</dd>' in page
    assert re.search(r'value="viewer" checked', page)
    cleared = api(admin_client, "put", "/users/rho/roles", json={"roles": []})
    assert cleared.status_code == 200 and cleared.json["roles"] == []

    new = "rho-second-password"
    mismatch = post(admin_client, "/security/users/rho/password", password=new,
                    password_again="something-else")
    assert mismatch.status_code == 400 and "password_again does not match" in mismatch.text
    assert new not in mismatch.text and "something-else" not in mismatch.text
    assert post(admin_client, "/security/users/rho/password", password=new,
                password_again=new).status_code == 302
    assert log_in(app.test_client(), "rho", PASSWORD).status_code == 401
    assert log_in(app.test_client(), "rho", new).status_code == 302
    third = api(admin_client, "put", "/users/rho/password", json={"password": "rho-third-pass"})
    assert third.status_code == 204
    assert log_in(app.test_client(), "rho", "rho-third-pass").status_code == 302
    for action in ("set_roles", "set_password"):
        assert set(audited(admin_client, action, "rho")) == {"admin"}


def test_a_service_account_gets_no_password(admin_client):
    made = post(admin_client, "/security/users", name="etl-bot", service="on")
    assert made.status_code == 302
    page = admin_client.get("/security/users/etl-bot").text
    assert "<dd>service</dd>" in page and 'id="set-password"' not in page


@pytest.mark.parametrize(("path", "body", "why"), [
    ("/users", {"name": ""}, "name is required"),
    ("/users", {"name": "bad name!", "password": PASSWORD}, "name must be a valid user name"),
    ("/users", {"name": "ok", "password": "short"}, "password must be 10 to 1024 characters"),
    ("/users", {"name": "ok", "password": PASSWORD, "roles": ["nosuch"]},
     "roles has an unknown role 'nosuch'"),
    ("/users", {"name": "ok", "password": PASSWORD, "roles": "admin, bad role"},
     "roles must be a valid role name"),
    ("/users", {"name": "ok", "password": PASSWORD, "service": True},
     "password must be empty for a service account"),
    ("/users", {"name": "ok", "password": PASSWORD, "service": "maybe"}, "service must be true"),
    ("/api-keys", {"principal": ""}, "principal is required"),
    ("/api-keys", {"principal": "admin", "description": "x" * 201},
     "description must be at most 200"),
    ("/acls", {"principal": "user:x", "operation": "describe", "resource": "topic",
               "name": "t", "pattern": "glob"}, "pattern must be one of literal, prefix"),
    ("/acls", {"principal": "alice", "operation": "describe", "resource": "topic",
               "name": "t"}, "principal must be user:<name>, role:<name> or *"),
    ("/acls", {"principal": "user:x", "operation": "read", "resource": "topic", "name": "t"},
     "operation must be one of produce"),
    ("/acls", {"principal": "user:x", "operation": "describe", "resource": "topic"},
     "name is required"),
    ("/acls", {"principal": "user:x", "operation": "admin", "resource": "cluster",
               "name": "other"}, "name of a cluster entry must be 'cluster'"),
    ("/ip-rules", {"network": "10.0.0.300"}, "network must be an IP address"),
    ("/ip-rules", {"network": "10.0.0.0/8", "scope": "topic", "name": "../x"},
     "name must be a valid topic name"),
])
def test_bad_input_is_a_400_naming_the_field(admin_client, path, body, why):
    got = api(admin_client, "post", path, json=body)
    assert got.status_code == 400 and why in got.json["error"]["message"], got.json
    if "password" in body:
        assert body["password"] not in got.text


def test_bad_paths_and_rates_name_the_field_too(admin_client):
    cases = [("put", "/quotas/alice", {"consume_bytes_per_s": 2048}, "entity must be user:"),
             ("put", "/quotas/user:vera", {"produce_bytes_per_s": "fast"},
              "produce_bytes_per_s must be bytes per second"),
             ("put", "/quotas/user:vera", {"produce_bytes_per_s": 10},
              "produce_bytes_per_s must be 0 (no limit) or 1024"),
             ("delete", "/api-keys/not-hex!", None, "key_id must be an API key id"),
             ("put", "/users/vera/roles", {}, "roles is required"),
             ("delete", "/users/vera?confirm=ver", None, "confirm: type the user's name"),
             ("delete", "/users/admin?confirm=admin", None,
              "name is the user you are logged in as"),
             ("get", "/acls?resource=table", None, "resource must be one of")]
    for method, path, body, why in cases:
        got = api(admin_client, method, path, json=body)
        assert got.status_code == 400 and why in got.json["error"]["message"], (path, got.json)
    empty = api(admin_client, "post", "/users", data="x")
    assert empty.status_code == 400 and "JSON object" in empty.json["error"]["message"]


def test_a_failed_form_shows_its_page_again_with_the_error_and_no_password(admin_client, root):
    page = post(admin_client, "/security/users", name="bad name", password=PASSWORD,
                password_again=PASSWORD, roles="viewer")
    assert page.status_code == 400
    assert 'id="error"' in page.text and "name must be a valid user name" in page.text
    assert 'value="bad name"' in page.text and PASSWORD not in page.text
    exists = post(admin_client, "/security/users", name="vera", password=PASSWORD,
                  password_again=PASSWORD)
    assert exists.status_code in (400, 409) and "already exists" in exists.text
    acl = post(admin_client, "/security/acls", principal="user:vera", operation="describe",
               resource="topic", name="t", pattern="regex")
    assert acl.status_code == 400 and "pattern must be one of literal, prefix" in acl.text
    assert {u.name for u in root.list_users()} == {"admin", "vera"}


def test_hostile_values_are_escaped(admin_client):
    hostile = '<script>alert("x")</script>'
    assert api(admin_client, "post", "/api-keys", json={"principal": "admin",
                                                        "description": hostile}).status_code == 201
    for page in (admin_client.get("/security/api-keys").text,
                 admin_client.get("/security/users/admin").text,
                 admin_client.get(f"/security/acls?principal={hostile}").text,
                 post(admin_client, "/security/acls", principal=hostile, operation="all",
                      resource="topic", name="t").text,
                 post(admin_client, "/security/users", name=hostile, password=PASSWORD).text):
        assert hostile not in page and "&lt;script&gt;" in page


def test_quotas_are_set_listed_and_removed(admin_client, root):
    made = post(admin_client, "/security/quotas", entity="user:vera",
                produce_bytes_per_s="1MiB", consume_bytes_per_s="")
    assert made.status_code == 302
    row = re.search(r"<td>user:vera</td><td>([^<]*)</td><td>([^<]*)</td>",
                    admin_client.get("/security/quotas").text)
    assert row and row.groups() == ("1 MiB/s", "no limit")
    assert [(q.entity, q.produce_bytes_per_s) for q in root.list_quotas()] == \
        [("user:vera", 1 << 20)]
    by_api = api(admin_client, "put", "/quotas/group:*", json={"consume_bytes_per_s": 4096})
    assert by_api.status_code == 200 and by_api.json["consume"] == "4 KiB/s"
    assert {q["entity"] for q in api(admin_client, "get", "/quotas").json["items"]} == \
        {"user:vera", "group:*"}
    assert post(admin_client, "/security/quotas/remove", entity="user:vera").status_code == 302
    assert api(admin_client, "delete", "/quotas/group:*").status_code == 204
    assert root.list_quotas() == []
    assert audited(admin_client, "set_quota", "user:vera") == ["admin"]


def test_ip_rules_are_added_listed_and_removed(admin_client, root):
    rule = {"network": "10.9.8.0/24", "effect": "deny", "scope": "topic", "name": "sec-",
            "pattern": "prefix"}
    assert post(admin_client, "/security/ip-rules", **rule).status_code == 302
    assert "10.9.8.0/24" in admin_client.get("/security/ip-rules").text
    again = api(admin_client, "post", "/ip-rules", json=rule)
    assert again.status_code == 200 and again.json["added"] is False
    # an allow list without the portal's own address would shut it (and the admin) out
    lockout = post(admin_client, "/security/ip-rules", network="10.0.0.0/8", effect="allow")
    assert lockout.status_code == 400 and "would refuse your own address" in lockout.text
    assert post(admin_client, "/security/ip-rules/remove", **rule).status_code == 302
    assert root.list_ip_rules() == []
    by_api = api(admin_client, "post", "/ip-rules", json={"network": "192.0.2.7",
                                                          "effect": "deny"})
    assert by_api.status_code == 201 and by_api.json["rule"]["network"] == "192.0.2.7/32"
    assert api(admin_client, "delete",
               "/ip-rules?network=192.0.2.7&effect=deny").status_code == 204
    assert root.list_ip_rules() == []
    assert audited(admin_client, "add_ip_rule", "10.9.8.0") == ["admin", "admin"]  # and again


def test_acls_filter_by_principal_resource_and_name(admin_client):
    for name in ("sec-a", "sec-b"):
        assert api(admin_client, "post", "/acls", json={
            "principal": "role:viewer", "operation": "consume", "resource": "group",
            "name": name}).status_code == 201
    found = api(admin_client, "get", "/acls?principal=role:viewer&resource=group&name=sec-")
    assert [(a["name"], a["operation"]) for a in found.json["items"]] == \
        [("sec-a", "consume"), ("sec-b", "consume")]
    assert api(admin_client, "get", "/acls?resource=cluster").json["total"] == 1
    removed = api(admin_client, "delete", "/acls?principal=role:viewer&operation=consume"
                  "&resource=group&name=sec-a")
    assert removed.status_code == 204
    assert api(admin_client, "get", "/acls?name=sec-").json["total"] == 1
    missing = api(admin_client, "delete", "/acls?principal=role:viewer&operation=consume"
                  "&resource=group&name=sec-a")
    assert missing.status_code == 400 and "no ACL entry" in missing.json["error"]["message"]

