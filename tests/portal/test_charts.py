"""The charts' history: the portal's sampler (its own monitoring identity) over a real
cluster, rates in and out and a group's lag drawn as inline SVG; and the banner every page
shows when a master does not answer."""
from __future__ import annotations

import socket

import pytest

from lib import Producer, PullConsumer
from portal_web import PortalConfig, create_app
from portal_web.charts import line_chart
from tests.integration.test_consumer_common import poll_until, wait_for
from tests.portal.conftest import log_in


@pytest.fixture
def sampled_app(cluster, tmp_path):
    creds = tmp_path / "monitor-credentials"
    cluster.admin_credentials().to_file(creds)
    app = create_app(PortalConfig(masters=cluster.master_addresses, sample_interval_s=0.3,
                                  monitor_credentials_file=str(creds)), testing=True)
    yield app
    app.extensions["tubeq"].close()


def _admin(app, cluster):
    client = app.test_client()
    creds = cluster.admin_credentials()
    assert log_in(client, creds.user, creds.password).status_code == 302
    return client


def test_rates_and_lag_are_sampled_and_drawn(sampled_app, cluster):
    client = _admin(sampled_app, cluster)
    csrf = client.get("/api/v1/whoami").json["csrf_token"]
    assert client.post("/api/v1/topics", json={"name": "charted", "partitions": 1},
                       headers={"X-CSRF-Token": csrf}).status_code == 201
    with Producer(cluster.master_addresses) as producer:
        wait_for(lambda: client.get("/api/v1/topics/charted").json["partitions"][0]["latest"]
                 >= 0, 10, "charted to be hosted")
        for i in range(200):
            producer.send("charted", b"x%d" % i)
        producer.flush()
    wait_for(lambda: sum(v for _, v in client.get("/api/v1/overview").json["rates"]["in"])
             > 0, 15, "a produce rate above 0")
    with PullConsumer(cluster.master_addresses, group="charters",
                      auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["charted"])
        poll_until(consumer, 200)
        consumer.commit()
    wait_for(lambda: sum(v for _, v in client.get("/api/v1/overview").json["rates"]["out"])
             > 0, 15, "a consume rate above 0")
    wait_for(lambda: len(client.get("/api/v1/groups/charters").json["lag_history"]) >= 2, 15,
             "two lag samples of the group")
    assert client.get("/api/v1/groups/charters").json["lag_history"][-1][1] == 0

    dashboard = client.get("/").text
    assert 'id="rates-chart"' in dashboard and dashboard.count('class="series"') == 2
    assert 'id="sampling"' not in dashboard
    assert 'id="lag-chart"' in client.get("/groups/charters").text


def test_without_a_monitoring_identity_the_charts_say_so(admin_client):
    rates = admin_client.get("/api/v1/overview").json["rates"]
    assert rates["in"] == [] and "--monitor-credentials-file" in rates["sampling"]
    assert "--monitor-credentials-file" in admin_client.get("/").text


def test_a_chart_escapes_its_labels_and_needs_two_samples():
    hostile = "<script>alert(1)</script>"
    svg = str(line_chart({hostile: [(0, 1.0), (1000, 3.0)]}, "msg/s", "c"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert svg.count("<polyline") == 1 and svg.startswith("<svg")
    assert "Not enough samples" in str(line_chart({"x": [(0, 1.0)]}, "msg/s", "c"))


def test_every_page_names_a_master_that_does_not_answer(cluster):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    app = create_app(PortalConfig(masters=f"{cluster.master_addresses},{dead}",
                                  master_timeout_s=2), testing=True)
    try:
        client = _admin(app, cluster)
        for path in ("/", "/topics", "/groups", "/brokers", "/audit"):
            page = client.get(path)
            assert page.status_code == 200, (path, page.text)
            assert f"Master {dead} is unreachable" in page.text, path
    finally:
        app.extensions["tubeq"].close()


def test_a_growing_lag_is_an_alert_and_rates_show_per_partition_and_broker(sampled_app,
                                                                          cluster):
    client = _admin(sampled_app, cluster)
    csrf = {"X-CSRF-Token": client.get("/api/v1/whoami").json["csrf_token"]}
    assert client.post("/api/v1/topics", json={"name": "piling", "partitions": 1},
                       headers=csrf).status_code == 201
    wait_for(lambda: client.get("/api/v1/topics/piling").json["partitions"][0]["latest"]
             >= 0, 10, "piling to be hosted")
    assert client.post("/api/v1/groups/idlers/reset", headers=csrf,
                       json={"topic": "piling", "to": "earliest"}).status_code == 200

    def alerted() -> bool:
        producer.send("piling", b"more")
        producer.flush()
        return any("group idlers: its lag grew" in a
                   for a in client.get("/api/v1/overview").json["alerts"])

    def rates_shown() -> bool:
        producer.send("piling", b"more")
        producer.flush()
        topic = client.get("/api/v1/topics/piling").json["partitions"][0]["rate"]
        return topic > 0 and client.get("/api/v1/brokers/1").json["rate"] > 0

    with Producer(cluster.master_addresses) as producer:
        wait_for(alerted, 30, "the growing-lag alert", interval=0.05)
        wait_for(rates_shown, 10, "a partition's and its broker's rate above 0")
    assert "group idlers: its lag grew" in client.get("/").text
