"""Resetting a group's offsets from the portal: a preview computed by the master (nothing
moves), then the confirmed reset, which moves exactly what the preview showed; refusals
(live members, bad targets, viewers) come back as clear errors."""
from __future__ import annotations

import re

from lib import Producer, PullConsumer
from tests.integration.test_consumer_common import poll_until, wait_for
from tests.portal.conftest import csrf_of


def _create(client, csrf: str, name: str, partitions: int) -> None:
    made = client.post("/api/v1/topics", json={"name": name, "partitions": partitions},
                       headers={"X-CSRF-Token": csrf})
    assert made.status_code == 201, made.json
    wait_for(lambda: all(p["available"] and p["latest"] >= 0 for p in
                         client.get(f"/api/v1/topics/{name}").json["partitions"]),
             10, f"{name}'s partitions to be hosted")


def _consume_all(cluster, topic: str, group: str, count: int) -> None:
    with PullConsumer(cluster.master_addresses, group=group,
                      auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        got = poll_until(consumer, count)
        assert len(got) == count
        consumer.commit()


def _rows(page: str) -> list[tuple[str, ...]]:
    table = page.split('id="moves"', 1)[1].split("</table>", 1)[0]
    return [tuple(re.findall(r"<td>([^<]*)</td>", row)) for row in table.split("<tr>")[2:]]


def test_a_reset_is_previewed_then_confirmed(admin_client, cluster):
    csrf = csrf_of(admin_client)
    _create(admin_client, csrf, "resettable", 2)
    with Producer(cluster.master_addresses) as producer:
        for i in range(10):
            producer.send("resettable", f"v{i}".encode(), partition=i % 2)
        producer.flush()
    _consume_all(cluster, "resettable", "resetters", 10)
    group = admin_client.get("/api/v1/groups/resetters").json
    assert group["lag"] == 0 and group["members"] == []

    form = {"csrf_token": csrf, "topic": "resettable", "to": "offset", "value": "2",
            "partitions": "1"}
    preview = admin_client.post("/groups/resetters/reset/preview", data=form)
    assert preview.status_code == 200, preview.text
    assert _rows(preview.text) == [("1", "5", "2", "-3")]
    assert admin_client.get("/api/v1/groups/resetters").json["lag"] == 0, "preview moved"

    done = admin_client.post("/groups/resetters/reset", data=form)
    assert done.status_code == 302 and done.headers["Location"] == "/groups/resetters"
    after = admin_client.get("/api/v1/groups/resetters").json
    assert after["lag"] == 3
    assert {(p["partition"], p["committed"]) for p in after["partitions"]} == {(0, 5), (1, 2)}

    api = admin_client.post("/api/v1/groups/resetters/reset", headers={"X-CSRF-Token": csrf},
                            json={"topic": "resettable", "to": "earliest", "dry_run": True})
    assert api.status_code == 200 and api.json["dry_run"] is True
    assert [(m["partition"], m["from_offset"], m["to_offset"]) for m in api.json["moves"]] \
        == [(0, 5, 0), (1, 2, 0)]
    audit = admin_client.get("/api/v1/audit?action=reset_group_offsets&target=resetters").json
    assert [e["principal"] for e in audit["items"]] == ["admin"], "one reset, the dry runs none"


def test_reset_refusals_name_the_problem(admin_client, viewer_client, cluster):
    csrf = {"X-CSRF-Token": csrf_of(admin_client)}
    _create(admin_client, csrf["X-CSRF-Token"], "busy", 1)

    def reset(client, headers, **body):
        return client.post("/api/v1/groups/busy-group/reset", json=body, headers=headers)

    bad_to = reset(admin_client, csrf, topic="busy", to="yesterday")
    assert bad_to.status_code == 400 and "to must be one of" in bad_to.json["error"]["message"]
    bad_time = reset(admin_client, csrf, topic="busy", to="time", value="soon")
    assert bad_time.status_code == 400 and "YYYY-MM-DD" in bad_time.json["error"]["message"]
    bad_parts = reset(admin_client, csrf, topic="busy", to="latest", partitions="0,x")
    assert bad_parts.status_code == 400 and "partitions" in bad_parts.json["error"]["message"]
    no_such = reset(admin_client, csrf, topic="busy", to="latest", partitions=[3])
    assert no_such.status_code == 404 and "no partition 3" in no_such.json["error"]["message"]
    past_end = reset(admin_client, csrf, topic="busy", to="offset", value=9)
    assert past_end.status_code == 400 and "latest 0" in past_end.json["error"]["message"], \
        past_end.json
    at_time = reset(admin_client, csrf, topic="busy", to="time", value="2026-01-01T00:00",
                    dry_run=True)
    assert at_time.status_code == 200 and at_time.json["moves"][0]["to_offset"] == 0

    with PullConsumer(cluster.master_addresses, group="busy-group") as live:
        live.subscribe(["busy"])
        live.poll(timeout=0.5)
        busy = reset(admin_client, csrf, topic="busy", to="earliest", dry_run=True)
        assert busy.status_code == 409 and "live members" in busy.json["error"]["message"]

    viewer = reset(viewer_client, {"X-CSRF-Token": csrf_of(viewer_client)}, topic="busy",
                   to="earliest")
    assert viewer.status_code == 403
    page = viewer_client.get("/groups/busy-group")
    assert page.status_code == 200 and 'id="reset-offsets"' not in page.text


def test_a_broadcast_instances_offsets_are_reset_alone(admin_client, cluster):
    csrf = csrf_of(admin_client)
    _create(admin_client, csrf, "fanned", 1)
    with Producer(cluster.master_addresses) as producer:
        for i in range(6):
            producer.send("fanned", f"v{i}".encode(), partition=0)
        producer.flush()
    for instance in ("north", "south"):
        with PullConsumer(cluster.master_addresses, group="fanout", mode="broadcast",
                          instance_id=instance, auto_offset_reset="earliest") as consumer:
            consumer.subscribe(["fanned"])
            assert len(poll_until(consumer, 6)) == 6
            consumer.commit()

    form = {"csrf_token": csrf, "topic": "fanned", "to": "offset", "value": "1",
            "instance_id": "south"}
    preview = admin_client.post("/groups/fanout/reset/preview", data=form)
    assert preview.status_code == 200, preview.text
    assert 'id="reset-instance-name">south<' in preview.text
    assert 'name="instance_id" value="south"' in preview.text  # carried to the confirmation
    assert _rows(preview.text) == [("0", "6", "1", "-5")]
    done = admin_client.post("/groups/fanout/reset", data=form)
    assert done.status_code == 302
    group = admin_client.get("/api/v1/groups/fanout").json
    assert [(i["instance_id"], i["lag"]) for i in group["instances"]] == [("north", 0),
                                                                          ("south", 5)]
    bad = admin_client.post("/api/v1/groups/fanout/reset", headers={"X-CSRF-Token": csrf},
                            json={"topic": "fanned", "to": "earliest", "instance_id": "s/1"})
    assert bad.status_code == 400 and "invalid instance id" in bad.json["error"]["message"]
