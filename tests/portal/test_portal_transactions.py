"""Transactions in the portal over a real cluster: the message browser says what each record
is to transactions (markers, aborted records, records read_committed readers do not see yet),
a topic shows each partition's last stable offset beside its latest, and the transactions page
and API list an open transaction with what it holds, which an admin can abort (a viewer
cannot, and a form without the CSRF token changes nothing)."""
from __future__ import annotations

import pytest

from lib import Producer
from lib.admin import AdminClient
from tests.portal.conftest import csrf_of

TOPIC = "browse-txn"


@pytest.fixture(scope="module")
def open_txn(cluster):
    """Partition 0 of ``browse-txn``: a committed transaction (offsets 0, 1; its marker 2),
    an aborted one (3; marker 4), and an open one (5) whose producer stays alive."""
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as root:
        root.create_topic(TOPIC, partitions=1)
    producer = Producer(cluster.master_addresses, credentials=cluster.admin_credentials(),
                        transactional_id="portal-txn", linger_ms=0)
    try:
        with producer.transaction():
            producer.send(TOPIC, b"committed-0", partition=0)
            producer.send(TOPIC, b"committed-1", partition=0)
        producer.begin()
        producer.send(TOPIC, b"aborted-0", partition=0)
        producer.abort()
        producer.begin()
        producer.send(TOPIC, b"still-open", partition=0)
        producer.flush()
        yield producer
    finally:
        producer.close()


def test_the_browser_and_the_topic_show_what_transactions_did(admin_client, open_txn):
    view = admin_client.get(f"/api/v1/topics/{TOPIC}/messages",
                            query_string={"mode": "range", "partition": 0}).json
    states = {r["offset"]: r["txn"] for r in view["records"]}
    assert states == {0: "", 1: "", 2: "commit marker", 3: "aborted", 4: "abort marker",
                      5: "not yet stable"}
    page = admin_client.get(f"/topics/{TOPIC}/messages?mode=range&partition=0")
    assert "abort marker" in page.text and "not yet stable" in page.text
    part = admin_client.get(f"/api/v1/topics/{TOPIC}").json["partitions"][0]
    assert (part["latest"], part["last_stable"]) == (6, 5)
    assert 'class="last-stable open-txn"' in admin_client.get(f"/topics/{TOPIC}").text


def test_the_transactions_page_lists_an_open_one_and_an_admin_aborts_it(
        admin_client, viewer_client, open_txn):
    listed = admin_client.get("/api/v1/transactions").json["items"]
    mine = next(t for t in listed if t["transactional_id"] == "portal-txn")
    assert mine["state"] == "ONGOING" and mine["partitions"] == [[TOPIC, 0]]
    page = admin_client.get("/transactions")
    assert "portal-txn" in page.text and "Abort" in page.text
    assert "portal-txn" not in viewer_client.get("/api/v1/transactions").text, \
        "a viewer sees only the transactional ids it may describe"
    refused = viewer_client.post("/api/v1/transactions/portal-txn/abort",
                                 headers={"X-CSRF-Token": csrf_of(viewer_client)})
    assert refused.status_code == 403
    no_token = admin_client.post("/transactions/portal-txn/abort")
    assert no_token.status_code == 403
    aborted = admin_client.post("/api/v1/transactions/portal-txn/abort",
                                headers={"X-CSRF-Token": csrf_of(admin_client)})
    assert aborted.status_code == 200 and aborted.json["state"] == "COMPLETE_ABORT"
    every = admin_client.get("/api/v1/transactions?all=1").json["items"]
    assert next(t for t in every if t["transactional_id"] == "portal-txn")["state"] == \
        "COMPLETE_ABORT"
    states = {r["offset"]: r["txn"] for r in admin_client.get(
        f"/api/v1/topics/{TOPIC}/messages",
        query_string={"mode": "range", "partition": 0}).json["records"]}
    assert states[5] == "aborted" and states[6] == "abort marker"
