"""The portal in a real headless Chromium, served by its own process over a real cluster: an
operator logs in, creates a topic with the form, sees what a producer wrote, watches a group
consume to lag 0, resets it with a preview and sees the lag again, finds the changes in the
audit log; a viewer gets no buttons; a forged cross-page POST is refused; a login's next cannot
leave the site, an error page's Back link works under the portal's CSP, and newest-first
message pages walk back through every record. Every page visited is saved as a screenshot, best
effort (see browser.save_screenshot)."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest

from lib import Producer, PullConsumer, TopicPartition
from lib.admin import AdminClient
from lib.errors import UnknownTopic
from tests.cluster import ServerProcess
from tests.integration.test_consumer_common import poll_until, wait_for
from tests.portal.browser import save_screenshot, start_browser, stop_browser
from tests.portal.conftest import VIEWER

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def portal_url(cluster, tmp_path_factory):
    data = tmp_path_factory.mktemp("portal-served")
    cluster.admin_credentials().to_file(data / "monitor-credentials")
    (data / "portal.toml").write_text("[portal]\nsample_interval_s = 1.0\n")
    proc = ServerProcess("portal_web", data, [
        "--data-dir", str(data), "--masters", cluster.master_addresses, "--host", "127.0.0.1",
        "--port", "0", "--config", str(data / "portal.toml"),
        "--monitor-credentials-file", str(data / "monitor-credentials")])
    proc.start()
    try:
        yield proc.info["url"]
    finally:
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture(scope="module")
def chrome(tmp_path_factory):
    browser = start_browser(tmp_path_factory.mktemp("chromium") / "profile")
    try:
        yield browser
    finally:
        stop_browser(browser)


class Page:
    """The browser as a test drives it: by element ids, saving a screenshot of each page."""

    def __init__(self, browser, url: str) -> None:
        self.browser, self.url = browser, url

    def go(self, path: str, shot: str | None = None) -> Page:
        self.browser.get(self.url + path)
        return self.shot(shot)

    def shot(self, name: str | None) -> Page:
        if name:
            save_screenshot(self.browser, name)
        return self

    def el(self, css: str):
        from selenium.webdriver.common.by import By

        return self.browser.find_element(By.CSS_SELECTOR, css)

    def has(self, css: str) -> bool:
        from selenium.webdriver.common.by import By

        return bool(self.browser.find_elements(By.CSS_SELECTOR, css))

    def fill(self, **fields: str) -> Page:
        for name, value in fields.items():
            box = self.el(f"[name='{name}']")
            if box.tag_name == "select":
                from selenium.webdriver.support.select import Select

                Select(box).select_by_value(value)
            else:
                box.clear()
                box.send_keys(value)
        return self

    def click(self, css: str, shot: str | None = None) -> Page:
        """Click what loads a new page, and wait until it has replaced this one."""
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.support.wait import WebDriverWait

        old = self.el("html")
        self.el(css).click()

        def replaced(_browser) -> bool:
            try:
                old.is_enabled()
                return False
            except WebDriverException:  # stale, or "does not belong to the document"
                return True

        wait = WebDriverWait(self.browser, 20)
        wait.until(replaced)
        wait.until(lambda b: b.execute_script("return document.readyState") == "complete")
        return self.shot(shot)

    def text(self, css: str) -> str:
        return self.el(css).text

    def log_in(self, user: str, password: str, shot: str | None = None) -> Page:
        self.browser.delete_all_cookies()
        self.go("/login", shot).fill(user=user, password=password)
        return self.click("#login")


@pytest.fixture
def page(chrome, portal_url):
    chrome.delete_all_cookies()
    return Page(chrome, portal_url)


@pytest.fixture
def admin_page(page, cluster):
    creds = cluster.admin_credentials()
    page.log_in(creds.user, creds.password, shot="login")
    assert page.text("h1") == "Dashboard", page.text("main")
    return page


def _hosted(cluster, topic: str) -> bool:
    with AdminClient(cluster.master_addresses) as admin:
        return all(p.available and p.latest >= 0 for p in admin.describe_topic(topic).partitions)


def test_an_operator_creates_a_topic_and_sees_what_was_produced(admin_page, cluster):
    page = admin_page.shot("dashboard")
    assert page.has("#masters") or "leader" in page.text("main")
    page.go("/topics").click("#new-topic", shot="topic-new")
    page.fill(name="orders", partitions="3", durability="sync").click("#create")
    assert page.text("#topic-name") == "orders"
    wait_for(lambda: _hosted(cluster, "orders"), 15, "orders to be hosted")
    with Producer(cluster.master_addresses) as producer:
        for i in range(30):
            producer.send("orders", f'{{"order": {i}}}'.encode(), key=f"customer-{i % 3}".encode(),
                          tag="paid" if i % 2 else "new")
        producer.flush()
    page.go("/topics/orders", shot="topic")
    assert page.text("#messages") == "30"
    rows = page.browser.find_elements("css selector", "#partitions tr")[1:]
    assert len(rows) == 3 and all("yes" in r.text for r in rows)
    for row in rows:  # one copy: the leader is the only replica, and in sync
        replicas = row.find_element("css selector", ".replicas").text
        assert replicas.isdigit() and row.find_element("css selector", ".isr").text == replicas
    assert page.text("#replication").startswith("1 copy")
    page.click("a[href='/topics/orders/messages']")
    page.fill(key="customer-1", tag="paid").click("#go", shot="messages")
    found = page.browser.find_elements("css selector", "#messages tr.message")
    assert len(found) == 5, page.text("main")  # i % 3 == 1 and i % 2 == 1 of 0..29
    for row in found:
        assert "customer-1" in row.find_element("css selector", ".key").text
        assert '"order"' in row.find_element("css selector", ".value").text
        assert "paid" in row.text
    page.go("/topics?q=ord", shot="topics")
    assert "orders" in page.text("#topics")
    wait_for(lambda: page.go("/").has("#rates-chart polyline"), 20, "the rates chart")
    page.shot("dashboard-rates")


def test_a_group_consumes_to_lag_zero_and_a_previewed_reset_brings_the_lag_back(
        admin_page, cluster):
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic("events", partitions=2)
    wait_for(lambda: _hosted(cluster, "events"), 15, "events to be hosted")
    with Producer(cluster.master_addresses) as producer:
        for i in range(20):
            producer.send("events", f"e{i}".encode(), partition=i % 2)
        producer.flush()
    with PullConsumer(cluster.master_addresses, group="auditors",
                      auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["events"])
        assert len(poll_until(consumer, 20)) == 20
        consumer.commit()
    page = admin_page.go("/groups", shot="groups")
    page.click("a[href='/groups/auditors']", shot="group")
    assert page.text("#lag") == "0"

    page.fill(topic="events", to="earliest").click("#preview-reset", shot="group-reset-preview")
    moves = [r.text.split() for r in page.browser.find_elements("css selector", "#moves tr")[1:]]
    assert moves == [["0", "10", "0", "-10"], ["1", "10", "0", "-10"]]
    page.go("/groups/auditors")
    assert page.text("#lag") == "0", "a preview changes nothing"

    page.fill(topic="events", to="earliest").click("#preview-reset")
    page.click("#confirm", shot="group-after-reset")
    assert page.text("h1") == "Group auditors" and page.text("#lag") == "20"

    page.go("/audit?action=reset_group_offsets", shot="audit")
    audit = page.text("main")
    assert "auditors" in audit and "admin" in audit
    page.go("/audit?action=create_topic")
    assert "orders" in page.text("main") or "events" in page.text("main")


def test_a_broadcast_group_shows_each_instances_lag(admin_page, cluster):
    masters = cluster.master_addresses
    with AdminClient(masters) as admin:
        admin.create_topic("alerts", partitions=2)
    wait_for(lambda: _hosted(cluster, "alerts"), 15, "alerts to be hosted")
    with Producer(masters) as producer:
        for i in range(20):
            producer.send("alerts", f"a{i}".encode(), partition=i % 2)
        producer.flush()
    settings = {"group": "pagers", "mode": "broadcast", "auto_offset_reset": "earliest"}
    with PullConsumer(masters, instance_id="east", **settings) as east, \
            PullConsumer(masters, instance_id="west", enable_auto_commit=False,
                         **settings) as west:
        east.subscribe(["alerts"])
        west.subscribe(["alerts"])
        assert len(poll_until(east, 20)) == 20
        east.commit()
        west.commit({TopicPartition("alerts", 0): 3, TopicPartition("alerts", 1): 4})
        page = admin_page.go("/groups/pagers", shot="group-broadcast")
        assert page.text("#mode") == "broadcast" and page.text("#lag") == "13"
        rows = [r.text.split() for r in
                page.browser.find_elements("css selector", "#instances tr")[1:]]
        assert rows == [["east", "live", "0"], ["west", "live", "13"]]
        assert "west alerts 1 4 10 6" in page.text("#offsets")
    page.go("/groups/pagers")  # both closed: their offsets stay, and so does their lag
    rows = [r.text.split() for r in page.browser.find_elements("css selector", "#instances tr")]
    assert rows[1:] == [["east", "stopped", "0"], ["west", "stopped", "13"]]


def test_an_admin_drains_and_undrains_a_broker(admin_page):
    page = admin_page.go("/brokers/1", shot="broker")
    assert page.text("#placement").startswith("open")
    page.click("#drain-1 button", shot="broker-draining")
    try:
        assert page.text("#placement").startswith("draining")
    finally:
        page.go("/brokers/1").click("#undrain-1 button")
    assert page.text("#placement").startswith("open")


def test_an_admin_adds_a_user_who_can_then_log_in(admin_page):
    page = admin_page.go("/security/users", shot="security-users")
    page.fill(name="browser-made", password="made-in-a-browser-1",
              password_again="made-in-a-browser-1")
    page.click("#add", shot="security-user-added")
    assert "browser-made" in page.go("/security/users").text("#users")
    for path, name in (("/security/acls", "security-acls"),
                       ("/security/api-keys", "security-api-keys")):
        page.go(path, shot=name)
    page.log_in("browser-made", "made-in-a-browser-1")
    assert page.text("h1") == "Dashboard"
    assert not page.has("a[href='/security']"), "no security pages for a non-admin"


def test_the_other_pages_render(admin_page):
    for path, name in (("/brokers", "brokers"), ("/topics/no-such-topic", "error-404")):
        admin_page.go(path, shot=name)
    assert "no-such-topic" in admin_page.text("main")
    admin_page.go("/brokers")
    assert "127.0.0.1" in admin_page.text("main")


def test_a_viewer_sees_no_buttons(page, cluster):
    page.log_in(*VIEWER)
    assert page.text("h1") == "Dashboard"
    page.go("/topics", shot="viewer-topics")
    assert not page.has("#new-topic")
    with AdminClient(cluster.master_addresses) as admin:
        if "viewed" not in [t.name for t in admin.list_topics()]:
            admin.create_topic("viewed", partitions=1)
    page.go("/topics/viewed", shot="viewer-topic")
    assert page.text("#topic-name") == "viewed" and not page.has("#delete-topic")
    page.go("/groups/auditors")
    assert not page.has("#reset-offsets")


class _Hostile(BaseHTTPRequestHandler):
    """Another site's page with a form aimed at the portal (no CSRF token: it cannot know it)."""

    target = ""

    def do_GET(self):  # noqa: N802
        body = (f'<html><body><form method="post" action="{self.target}/topics/new">'
                '<input name="name" value="forged-topic"><input name="partitions" value="1">'
                '<button id="go" type="submit">Win a prize</button></form></body></html>')
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def hostile_site(portal_url):
    handler = type("Hostile", (_Hostile,), {"target": portal_url})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_forged_post_from_another_page_is_refused(admin_page, hostile_site, cluster):
    admin_page.browser.get(hostile_site)
    admin_page.click("#go", shot="forged-post-refused")
    assert "CSRF" in admin_page.text("main")
    with AdminClient(cluster.master_addresses) as admin, pytest.raises(UnknownTopic):
        admin.describe_topic("forged-topic")


# -- issue 49, item 6 --------------------------------------------------------------------

def _log_in_with_next(page, cluster, target: str) -> str:
    """Log in from ``/login?next=target``; the page the browser lands on. (Chromium refuses to
    follow a form's redirect to another site, under the CSP's form-action, and stays on the
    login page: a plain HTTP client or another browser would go there.)"""
    creds = cluster.admin_credentials()
    page.browser.delete_all_cookies()
    page.go(f"/login?next={quote(target, safe='')}")
    page.fill(user=creds.user, password=creds.password).el("#login").click()
    wait_for(lambda: "/login" not in page.browser.current_url and
             page.browser.execute_script("return document.readyState") == "complete", 20,
             f"the login with next={target!r} to leave the login page")
    return page.browser.current_url


def test_regression_a_login_next_dressed_up_cannot_leave_the_site(page, cluster, hostile_site):
    """`next=/<TAB>/host` was answered `Location: //host`, and Chromium went there."""
    host = hostile_site.removeprefix("http://")
    for target in (f"/\t/{host}/", f"/\n/{host}/", f"/\\{host}/", f"//{host}/",
                   f"/%2F/{host}/", hostile_site + "/"):
        here = _log_in_with_next(page, cluster, target)
        assert here.startswith(page.url + "/") and host not in here.removeprefix(page.url), \
            (target, here)
        assert page.text("h1") == "Dashboard", (target, page.text("main"))
    here = _log_in_with_next(page, cluster, "/topics?q=ord")  # a page of the portal
    assert here == page.url + "/topics?q=ord"


def test_regression_the_back_link_of_an_error_page_goes_back(admin_page):
    """The Back link was `javascript:history.back()`, which the portal's CSP blocks: a click
    did nothing."""
    page = admin_page.go("/topics")
    page.fill(q="x").click(".search button")  # a page with a query string, as the referrer
    came_from = page.browser.current_url
    page.browser.execute_script(  # a link to a missing topic, followed as a user would
        "const a = document.createElement('a'); a.id = 'to-missing';"
        "a.href = '/topics/no-such-topic'; a.textContent = 'missing';"
        "document.body.appendChild(a);")
    page.click("#to-missing", shot="error-back-link")
    assert page.text("h1") == "Error 404"
    page.click("#error + p a")  # the Back link (by place: the old one had no id)
    assert page.browser.current_url == came_from and page.text("h1") == "Topics"


def test_regression_newest_first_next_walks_back_through_all_records(admin_page, cluster):
    """50 records over 3 partitions, 20 a page: the first page had no next link."""
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic("walk-back", partitions=3)
    wait_for(lambda: _hosted(cluster, "walk-back"), 15, "walk-back to be hosted")
    with Producer(cluster.master_addresses, linger_ms=0) as producer:
        for i in range(50):
            producer.send_sync("walk-back", b"record %d" % i, partition=i % 3, timeout=30)
    page = admin_page.go("/topics/walk-back/messages?mode=newest&limit=20", shot="newest-1")
    seen = []
    for n in range(2, 10):
        seen += [r.get_attribute("id") for r in
                 page.browser.find_elements("css selector", "#messages tr.message")]
        if not page.has("#next"):
            break
        page.click("#next", shot=f"newest-{n}")
    assert len(seen) == len(set(seen)) == 50
    assert set(seen) == {f"m-{i % 3}-{i // 3}" for i in range(50)}


def test_an_operator_sees_a_groups_dead_letters_and_replays_them(admin_page, cluster):
    from lib import RetryPolicy

    masters = cluster.master_addresses
    with AdminClient(masters) as admin:
        admin.create_topic("dl-browser-in", partitions=1)
        admin.create_topic("dl-browser-out", partitions=1)
    wait_for(lambda: _hosted(cluster, "dl-browser-in") and _hosted(cluster, "dl-browser-out"),
             15, "the topics to be hosted")
    with Producer(masters) as producer:
        for i in range(3):
            producer.send("dl-browser-in", f"poison-{i}".encode())
        producer.flush()
    with PullConsumer(masters, group="dl-browser", auto_offset_reset="earliest",
                      retry=RetryPolicy(max_attempts=1)) as consumer:
        consumer.subscribe(["dl-browser-in"])
        for r in poll_until(consumer, 3):
            consumer.nack(r, error="schema mismatch")
        consumer.commit()
    page = admin_page.go("/groups/dl-browser", shot="group-retries")
    page.click("#dead-letters-link", shot="dead-letters")
    rows = page.browser.find_elements("css selector", "#dead-letters tr")[1:]
    assert len(rows) == 3 and page.text("#dead-count") == "3"
    assert all(r.find_element("css selector", ".error").text == "schema mismatch"
               for r in rows)
    page.fill(to="dl-browser-out").click("#replay-button", shot="dead-letters-replayed")
    assert page.text("#replayed") == "Replayed 3 dead letters."
    with AdminClient(masters) as admin:
        assert admin.describe_topic("dl-browser-out").partitions[0].latest == 3
