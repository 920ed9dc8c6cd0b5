"""The pages show figures as people read them (issue 49, item 9): retention as "7 days, no size
limit", a broker's last heartbeat as "0.4 s ago", sizes in KiB/MiB; the exact figure stays in
the tooltip (title) and the JSON API keeps machine figures."""
from __future__ import annotations

import re
from html import unescape

from lib import Producer
from lib.admin import AdminClient
from tests.portal.conftest import csrf_of

EPOCH_MS = re.compile(r">[^<]*\b1\d{12}\b[^<]*<")  # a 13-digit epoch in ms shown as text


def _cell(html: str, element_id: str) -> tuple[str, str]:
    """(title, text) of the element with ``element_id``."""
    found = re.search(rf'id="{element_id}"[^>]*?title="([^"]*)"[^>]*>(.*?)</', html, re.S)
    assert found, f"no #{element_id} with a title in the page"
    return unescape(found.group(1)), unescape(found.group(2)).strip()


def test_regression_pages_show_human_figures_with_the_exact_ones_in_tooltips(admin_client,
                                                                             cluster):
    """The topic page said "604800000 ms, -1 bytes" and the brokers' last heartbeat was an
    epoch in ms."""
    csrf = {"X-CSRF-Token": csrf_of(admin_client)}
    assert admin_client.post("/api/v1/topics", json={"name": "human", "partitions": 1},
                             headers=csrf).status_code == 201
    with Producer(cluster.master_addresses, linger_ms=0) as producer:
        producer.send_sync("human", b"x" * 1500, partition=0, timeout=30)
    topic = admin_client.get("/topics/human").text
    title, text = _cell(topic, "retention")
    assert text == "7 days, no size limit" and "604800000" in title and "-1" in title
    assert "604800000 ms" not in re.sub(r'title="[^"]*"|placeholder="[^"]*"', "", topic)
    title, text = _cell(topic, "message-limit")
    assert text == "1.0 MiB" and title == "1048576 bytes"
    api = admin_client.get("/api/v1/topics/human").json  # the API keeps machine figures
    assert api["retention_ms"] == 604_800_000 and api["retention_bytes"] == -1

    brokers = admin_client.get("/brokers").text
    heartbeat = re.search(r'class="heartbeat" title="([^"]*)">([^<]*)<', brokers)
    assert re.fullmatch(r"(\d+(\.\d)? s|\d+ min( \d+ s)?) ago|just now", heartbeat.group(2))
    assert re.search(r"\b1\d{12} ms since the epoch", heartbeat.group(1))
    assert not EPOCH_MS.search(brokers), "an epoch in ms shown as text"
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as root:
        raw = root.list_brokers()[0].last_heartbeat_ms
    assert admin_client.get("/api/v1/brokers").json[0]["last_heartbeat_ms"] >= raw

    broker = admin_client.get("/brokers/1").text
    assert re.fullmatch(r"[\d.]+ s ago|just now|\d+ min( \d+ s)? ago", _cell(broker,
                                                                             "heartbeat")[1])
    free = re.search(r'<dt>Disk free</dt><dd><span title="(\d+) bytes">([^<]*)<', broker)
    assert re.fullmatch(r"[\d.]+ (KiB|MiB|GiB|TiB)", free.group(2)), free.group(2)

    shown = admin_client.get("/topics/human/messages?mode=newest").text
    assert '<span title="1500 bytes">1.5 KiB</span>' in shown
