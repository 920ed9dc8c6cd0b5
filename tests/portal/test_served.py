"""``python -m portal_web`` as its own process (cheroot, not Flask's development server) over
a real cluster: plain HTTP, and HTTPS with a certificate of the cluster's CA, where the session
cookie is Secure and plaintext to the TLS port gets nowhere."""
from __future__ import annotations

import http.client
import http.cookiejar
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request

import pytest

from lib.auth.pki import LocalPki
from tests.cluster import ServerProcess


@pytest.fixture
def served(cluster, tmp_path):
    started: list[ServerProcess] = []

    def serve(*extra: str) -> ServerProcess:
        proc = ServerProcess("portal_web", tmp_path / f"portal{len(started)}", [
            "--data-dir", str(tmp_path / f"portal{len(started)}"), "--masters",
            cluster.master_addresses, "--host", "127.0.0.1", "--port", "0", *extra])
        started.append(proc)
        return proc.start()

    yield serve
    for proc in started:
        assert proc.stop() == 0, proc.log_tail()


def browser(context: ssl.SSLContext | None = None):
    jar = http.cookiejar.CookieJar()
    handlers = [urllib.request.HTTPCookieProcessor(jar)]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers), jar


def log_in(opener, url: str, user: str, password: str) -> str:
    form = opener.open(f"{url}/login", timeout=10).read().decode()
    token = re.search(r'name="login_token" value="([^"]+)"', form).group(1)
    data = urllib.parse.urlencode({"user": user, "password": password,
                                   "login_token": token}).encode()
    return opener.open(f"{url}/login", data=data, timeout=10).read().decode()


def test_the_portal_process_serves_pages_after_a_login(served, cluster):
    proc = served()
    assert proc.info["url"].startswith("http://127.0.0.1:")
    opener, jar = browser()
    creds = cluster.admin_credentials()
    dashboard = log_in(opener, proc.info["url"], creds.user, creds.password)
    assert "<h1>Dashboard</h1>" in dashboard and "leader" in dashboard
    assert any(c.name == "tubeq_session" and not c.secure for c in jar)
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(f"{proc.info['url']}/api/v1/topics?per_page=0", timeout=10)
    assert refused.value.code == 400


def test_the_portal_serves_https_with_the_clusters_certificate(served, cluster, tmp_path):
    pki = LocalPki(tmp_path / "tls").ensure([])
    proc = served("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    url = proc.info["url"]
    assert url.startswith("https://127.0.0.1:")
    opener, jar = browser(ssl.create_default_context(cafile=str(pki.ca)))
    creds = cluster.admin_credentials()
    assert "<h1>Dashboard</h1>" in log_in(opener, url, creds.user, creds.password)
    assert any(c.name == "tubeq_session" and c.secure for c in jar)
    with pytest.raises(urllib.error.URLError):  # an unknown CA is refused by the client
        urllib.request.urlopen(f"{url}/login", timeout=10)
    plain = url.replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(f"{plain}/login", timeout=10).read()
