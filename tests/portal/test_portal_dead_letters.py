"""A group's dead letters in the portal over a real cluster: the group page counts its
retries and dead letters, the dead-letter page and API list each with where it came from,
its attempts and its last error, and a replay (page form or API, CSRF-checked) publishes them
again and is audited; a viewer may look at the group but not replay."""
from __future__ import annotations

import json

import pytest

from lib import Producer, PullConsumer, RetryPolicy
from lib.admin import AdminClient
from tests.integration.test_consumer_common import poll_until
from tests.portal.conftest import csrf_of

TOPIC, GROUP, TO = "dlp-in", "dlp-g", "dlp-out"


@pytest.fixture(scope="module")
def dead(cluster):
    """Three records of ``dlp-in`` dead-lettered by group ``dlp-g`` (max_attempts 1)."""
    creds = cluster.admin_credentials()
    with AdminClient(cluster.master_addresses, credentials=creds) as root:
        root.create_topic(TOPIC, partitions=1)
        root.create_topic(TO, partitions=1)
    with Producer(cluster.master_addresses, credentials=creds) as producer:
        for i in range(3):
            producer.send(TOPIC, f"bad-{i}".encode(), key=b"k%d" % i)
        producer.flush()
    with PullConsumer(cluster.master_addresses, credentials=creds, group=GROUP,
                      auto_offset_reset="earliest", retry=RetryPolicy(max_attempts=1)) as c:
        c.subscribe([TOPIC])
        for r in poll_until(c, 3):
            c.nack(r, error=ValueError(f"cannot use {r.value.decode()}"))
        c.commit()
    return creds


def test_the_group_page_and_the_dead_letter_page_show_them(admin_client, dead):
    group = admin_client.get(f"/api/v1/groups/{GROUP}").json
    assert group["retries"] == {"retry_topic": f"{GROUP}.retry", "retry_offsets": 0,
                                "dlq_topic": f"{GROUP}.dlq", "dlq_offsets": 4}  # 3 + a marker
    assert 'id="dead-letters-link"' in admin_client.get(f"/groups/{GROUP}").text
    view = admin_client.get(f"/api/v1/groups/{GROUP}/dead-letters").json
    assert view["topic"] == f"{GROUP}.dlq" and view["records"] == 3
    assert [(d["value"], d["origin_topic"], d["origin_offset"], d["attempts"], d["error"])
            for d in view["items"]] == [
        (f"bad-{i}", TOPIC, i, 1, f"ValueError: cannot use bad-{i}") for i in range(3)]
    page = admin_client.get(f"/groups/{GROUP}/dead-letters").text
    assert "ValueError: cannot use bad-2" in page and 'id="replay-button"' in page
    assert admin_client.get("/api/v1/groups/no-such-group/dead-letters").status_code == 404


def test_a_replay_publishes_them_again_and_is_audited(admin_client, viewer_client, cluster,
                                                      dead):
    assert admin_client.post(f"/groups/{GROUP}/dead-letters/replay",
                             data={"to": TO}).status_code == 403, "no CSRF token"
    refused = viewer_client.post(f"/api/v1/groups/{GROUP}/dead-letters/replay",
                                 json={"to": TO}, headers={"X-CSRF-Token": csrf_of(viewer_client)})
    assert refused.status_code == 403
    bad = admin_client.post(f"/api/v1/groups/{GROUP}/dead-letters/replay",
                            json={"to": "no such topic!"},
                            headers={"X-CSRF-Token": csrf_of(admin_client)})
    assert bad.status_code == 400 and "invalid topic name" in bad.json["error"]["message"]
    done = admin_client.post(f"/api/v1/groups/{GROUP}/dead-letters/replay",
                             json={"to": TO, "limit": 2},
                             headers={"X-CSRF-Token": csrf_of(admin_client)})
    assert done.status_code == 200 and done.json["replayed"] == 2
    with AdminClient(cluster.master_addresses, credentials=dead) as root:
        assert root.describe_topic(TO).partitions[0].latest == 2
        entry = next(e for e in root.audit_log(20) if e.action == "dlq_replay")
    assert entry.target == GROUP and json.loads(entry.details)["to"] == {TO: 2}
