"""The portal's login and JSON API against what an attacker sends (issue 49, item 6), over a
real cluster through Flask's test client: a login's ``next`` never leaves the site, junk JSON
is a 400 (never a 500) on every route that takes JSON, a made-up credential is a 401 on every
route, and ``whoami`` names the caller."""
from __future__ import annotations

import re

import pytest

from lib.admin import AdminClient
from lib.auth.credentials import b64url
from tests.portal.conftest import VIEWER, log_in

HOSTILE_NEXT = [
    "/\t/evil.example", "/\n/evil.example", "/\r\n/evil.example", "//evil.example",
    "/\\evil.example", "\\\\evil.example", "/%2F/evil.example", "/%2f%2fevil.example",
    "/%5Cevil.example", "/%252F/evil.example", "/%09/evil.example", "https://evil.example/",
    "javascript:alert(1)", " //evil.example", "evil.example", "/\x00/evil.example",
    "/" + "a" * 3000,
]
NOT_OBJECTS = ['"admin"', "5", "true", "[1]", "null", "1.5"]
DEEP = ["[" * 3000 + "]" * 3000, '{"a":' * 3000 + "1" + "}" * 3000,
        '{"name": ' + "[" * 40 + "]" * 40 + "}"]


def _next_of(app, target: str) -> str:
    """Where a successful login with ``next=target`` sends the browser."""
    client = app.test_client()
    page = client.get("/login")
    token = re.search(r'name="login_token" value="([^"]+)"', page.text).group(1)
    done = client.post("/login", data={"user": VIEWER[0], "password": VIEWER[1],
                                       "login_token": token, "next": target})
    assert done.status_code == 302, (target, done.status_code, done.text[:300])
    return done.headers["Location"]


def test_regression_login_next_never_redirects_off_the_site(app):
    """`next=/<TAB>/evil.example` answered `Location: //evil.example` (the browser drops the
    tab), and a newline in `next` gave a 500 page."""
    for target in HOSTILE_NEXT:
        assert _next_of(app, target) == "/", target
    for target in ("/topics?q=ord&sort=-name", "/topics/orders/messages?mode=newest&limit=20",
                   "/groups/a-b.c_d", "/"):
        assert _next_of(app, target) == target


def test_a_page_behind_the_login_comes_back_after_it(app):
    client = app.test_client()
    first = client.get("/topics?q=x")
    assert first.headers["Location"].startswith("/login?next=")
    assert log_in(client, *VIEWER).headers["Location"] == "/"  # no next: the dashboard
    client = app.test_client()
    page = client.get(first.headers["Location"])
    token = re.search(r'name="login_token" value="([^"]+)"', page.text).group(1)
    nxt = re.search(r'name="next" value="([^"]*)"', page.text).group(1)
    done = client.post("/login", data={"user": VIEWER[0], "password": VIEWER[1],
                                       "login_token": token, "next": nxt})
    assert done.headers["Location"] == "/topics?q=x"


@pytest.fixture(scope="module")
def admin_token(cluster) -> str:
    creds = cluster.admin_credentials()
    with AdminClient(cluster.master_addresses) as public:
        return public.login(user=creds.user, password=creds.password).token


def _json_routes(app) -> list[tuple[str, str]]:
    """(method, path) of every API operation the OpenAPI document gives a request body."""
    spec = app.test_client().get("/api/v1/openapi.json").json
    filled = {"name": "nothing-here", "broker_id": "999999", "entity": "user:nobody",
              "key_id": "nokey", "partition": "0", "offset": "0"}
    routes = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if "requestBody" in op:
                concrete = re.sub(r"\{(\w+)\}", lambda m: filled[m.group(1)], path)
                routes.append((method.upper(), "/api/v1" + concrete))
    return routes


def test_regression_junk_json_is_a_400_on_every_route_that_takes_json(app, admin_token):
    """A body nested 3,000 deep was a 500 (RecursionError) everywhere, /api/v1/login
    included; a JSON value that is not an object ("admin", 5, true, [1]) was a 500 too."""
    client = app.test_client()
    auth = {"Authorization": f"Bearer {admin_token}"}
    routes = _json_routes(app)
    assert ("POST", "/api/v1/login") in routes and ("POST", "/api/v1/topics") in routes
    assert len(routes) >= 10
    for method, path in routes:
        for body in NOT_OBJECTS + DEEP + ["{", "\xff", ""]:
            got = client.open(path, method=method, data=body.encode("latin-1"), headers=auth,
                              content_type="application/json")
            assert got.status_code == 400, (method, path, body[:20], got.status_code)
            message = got.json["error"]["message"]
            assert message.startswith("the request body must be a JSON object"), message
    deep = client.post("/api/v1/login", data=DEEP[0], content_type="application/json")
    assert "nested more than 32 levels deep" in deep.json["error"]["message"]
    scalar = client.post("/api/v1/login", data="5", content_type="application/json")
    assert scalar.json["error"]["message"].endswith("got a JSON number")
    odd = client.post("/api/v1/login", json={"user": ["admin"], "password": "x"})
    assert odd.status_code == 400 and "user must be a string" in odd.json["error"]["message"]


def test_regression_a_body_over_the_size_limit_is_a_413_that_says_so(app, admin_token):
    client = app.test_client()
    huge = b'{"name": "' + b"x" * (2 << 20) + b'"}'
    for path in ("/api/v1/login", "/api/v1/topics"):
        got = client.post(path, data=huge, content_type="application/json",
                          headers={"Authorization": f"Bearer {admin_token}"})
        assert got.status_code == 413, (path, got.status_code)
        assert "larger than the 1048576 bytes" in got.json["error"]["message"]


def _forged(token: str, **changes) -> str:
    """``token`` with its claims changed and its signature kept (so it no longer matches)."""
    import json

    from lib.auth.credentials import unb64url

    head, claims, signature = token.split(".")
    body = {**json.loads(unb64url(claims)), **changes}
    return f"{head}.{b64url(json.dumps(body).encode())}.{signature}"


def _get_routes(app) -> list[str]:
    fill = {"name": "nothing-here", "broker_id": "1", "partition": "0", "offset": "0"}
    paths = []
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/v1/") and "GET" in rule.methods and \
                rule.endpoint not in ("api.openapi",):
            paths.append(re.sub(r"<(?:\w+:)?(\w+)>", lambda m: fill[m.group(1)], rule.rule))
    return paths


def test_regression_a_made_up_credential_is_a_401_on_every_route(app, admin_token):
    """`Bearer whatever` (or a junk ApiKey) was taken on /whoami, /masters and /overview:
    they answered 200 with the cluster's masters."""
    client = app.test_client()
    made_up = ["Bearer whatever", "Bearer tq1.e30.AAAA", "ApiKey whatever",
               "ApiKey tqk_0123abcd_made-up-secret", f"Bearer {_forged(admin_token, sub='eve')}",
               f"Bearer {admin_token}x", "Basic YWRtaW46YWRtaW4="]
    routes = _get_routes(app)
    assert {"/api/v1/whoami", "/api/v1/masters", "/api/v1/overview"} <= set(routes)
    for header in made_up:
        for path in routes:
            got = client.get(path, headers={"Authorization": header})
            assert got.status_code == 401, (header[:30], path, got.status_code)
            assert got.json["error"]["code"] == "UNAUTHENTICATED"
    for path in routes:  # and still with no credential at all
        assert client.get(path).status_code == 401, path


def test_regression_whoami_names_the_caller_of_a_token_or_an_api_key(app, cluster, admin_token):
    """`/api/v1/whoami` with a valid token answered `principal: null`."""
    client = app.test_client()
    me = client.get("/api/v1/whoami", headers={"Authorization": f"Bearer {admin_token}"})
    assert me.status_code == 200, me.json
    assert me.json["principal"] == "admin" and "admin" in me.json["roles"]
    assert me.json["via"] == "token" and me.json["expires_ms"] > 0
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as root:
        key = root.create_api_key(VIEWER[0], description="whoami test")[1]
    by_key = client.get("/api/v1/whoami", headers={"Authorization": f"ApiKey {key}"})
    assert by_key.status_code == 200, by_key.json
    assert by_key.json["principal"] == VIEWER[0] and by_key.json["roles"] == ["viewer"]
    assert by_key.json["via"] == "api key"
    masters = client.get("/api/v1/masters", headers={"Authorization": f"ApiKey {key}"})
    assert masters.status_code == 200 and masters.json[0]["role"] == "leader"
    session = app.test_client()
    log_in(session, *VIEWER)
    assert session.get("/api/v1/whoami").json["principal"] == VIEWER[0]


def test_regression_an_error_page_back_link_is_a_real_link_to_the_page_before(admin_client):
    """The Back link was `javascript:history.back()`, which the portal's own CSP blocks."""
    page = admin_client.get("/topics/no-such-topic",
                            headers={"Referer": "http://localhost/topics?q=no"})
    assert page.status_code == 404 and "javascript:" not in page.text
    assert re.search(r'<a id="back" href="/topics\?q=no">Back</a>', page.text), page.text
    elsewhere = admin_client.get("/topics/no-such-topic",
                                 headers={"Referer": "http://evil.example/x"})
    assert '<a id="back" href="/">Back</a>' in elsewhere.text
    assert '<a id="back" href="/">Back</a>' in admin_client.get("/topics/no-such-topic").text
