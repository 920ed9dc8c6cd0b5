"""The message browser over a real cluster: records produced with lib.Producer come back by
offset range, from a time and newest first, filtered by key, tag and value, rendered as JSON,
text or hex, downloadable byte for byte; the test produce form needs the CSRF token and the
produce ACL; bad input is a 400/404 naming the field; hostile keys and values are escaped; the
reader acts as the logged-in user."""
from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from html import unescape

import pytest

from lib import MessageReader, Producer
from lib.admin import AdminClient
from lib.errors import OffsetOutOfRange, PermissionDenied, UnknownPartition
from tests.portal.conftest import VIEWER, csrf_of

TOPIC = "browse"
HOSTILE = "<script>alert(1)</script>"
BINARY = b"\x00\x01\xfe\xff\x7fbin"
BULK = 20  # records 4..23 of partition 0


@pytest.fixture(scope="module")
def seeded(cluster):
    """Topic ``browse`` (2 partitions). Partition 0: a JSON value, a text one, a binary one
    without key, a hostile one with a header, then BULK records tagged ``bulk``; partition 1:
    three records. Timestamps are set: T0 + offset seconds (partition 1: T0 + 100.5 s + i s)."""
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as root:
        root.create_topic(TOPIC, partitions=2)
    t0 = (int(time.time()) - 3600) * 1000
    rows = [(b"order-1", "created", b'{"id": 1, "item": "book"}', None),
            (b"order-2", "paid", b"plain text payment", None),
            (None, None, BINARY, None),
            (HOSTILE.encode(), "x", HOSTILE.encode(), {"trace": b"abc"})]
    rows += [(b"bulk-%d" % i, "bulk", b"bulk value %d" % i, None) for i in range(BULK)]
    with Producer(cluster.master_addresses, linger_ms=0) as producer:
        for i, (key, tag, value, headers) in enumerate(rows):
            meta = producer.send_sync(TOPIC, value, key=key, tag=tag, headers=headers,
                                      partition=0, timestamp=t0 + i * 1000, timeout=30)
            assert (meta.partition, meta.offset) == (0, i)
        for i in range(3):
            producer.send_sync(TOPIC, b"other %d" % i, key=b"order-p1-%d" % i, tag="created",
                               partition=1, timestamp=t0 + 100_500 + i * 1000, timeout=30)
    return t0


def browse(client, **args):
    response = client.get(f"/api/v1/topics/{TOPIC}/messages", query_string=args)
    assert response.status_code == 200, response.json
    return response.json


def where(view) -> list[tuple[int, int]]:
    return [(r["partition"], r["offset"]) for r in view["records"]]


def error_of(client, path: str, **args) -> tuple[int, str]:
    response = client.get(path, query_string=args)
    return response.status_code, response.json["error"]["message"]


def test_newest_n_of_a_partition_come_newest_first(admin_client, seeded):
    view = browse(admin_client, partition=0, limit=3)
    assert where(view) == [(0, 23), (0, 22), (0, 21)]
    assert view["records"][0]["value"]["text"] == "bulk value 19"
    assert view["next"] == "0:21" and view["scan"]["offsets"] == 3
    older = browse(admin_client, partition=0, limit=3, cursor=view["next"])
    assert where(older) == [(0, 20), (0, 19), (0, 18)] and older["next"] == "0:18"
    assert view["partitions"] == [{"partition": 0, "earliest": 0, "latest": 24, "messages": 24},
                                  {"partition": 1, "earliest": 0, "latest": 3, "messages": 3}]


def test_newest_across_partitions_are_ordered_by_time(admin_client, seeded):
    view = browse(admin_client, limit=4)
    # partition 0's last records are at T0+20..23 s, partition 1's at T0+100.5..102.5 s
    assert where(view) == [(1, 2), (1, 1), (1, 0), (0, 23)]
    times = [r["timestamp"] for r in view["records"]]
    assert times == sorted(times, reverse=True) and times[0] == seeded + 102_500


def test_an_offset_range_is_read_from_to(admin_client, seeded):
    view = browse(admin_client, mode="range", partition=0, **{"from": 1, "to": 3})
    assert where(view) == [(0, 1), (0, 2)]
    assert view["next"] is None and "everything in the range" in view["scan"]["message"]
    default_end = browse(admin_client, mode="range", partition=1)
    assert where(default_end) == [(1, 0), (1, 1), (1, 2)]


def test_from_a_time_starts_at_the_first_record_at_or_after_it(admin_client, seeded):
    view = browse(admin_client, mode="time", partition=0, time=seeded + 5_500, limit=2)
    assert where(view) == [(0, 6), (0, 7)] and view["time_ms"] == seeded + 5_500
    iso = datetime.fromtimestamp((seeded + 21_000) / 1000, UTC).isoformat()
    everywhere = browse(admin_client, mode="time", time=iso)
    assert where(everywhere) == [(0, 21), (0, 22), (0, 23), (1, 0), (1, 1), (1, 2)]


def test_filters_by_key_tag_and_value(admin_client, seeded):
    exact = browse(admin_client, mode="range", partition=0, key="order-2")
    assert where(exact) == [(0, 1)] and exact["scan"]["offsets"] == 24
    contains = browse(admin_client, mode="time", time=0, key="order", key_match="substring")
    assert where(contains) == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    tagged = browse(admin_client, mode="time", time=0, tag="created")
    assert where(tagged) == [(0, 0), (1, 0), (1, 1), (1, 2)]
    assert where(browse(admin_client, mode="time", time=0, value="payment")) == [(0, 1)]
    none = browse(admin_client, mode="time", time=0, tag="bulk", value="order")
    assert none["records"] == [] and none["scan"]["matched"] == 0


def test_an_exact_key_is_looked_up_in_the_key_index_and_pages_as_a_scan_would(admin_client,
                                                                              cluster):
    topic = "browse-keys"
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as root:
        root.create_topic(topic, partitions=2)
    with Producer(cluster.master_addresses, linger_ms=0) as producer:
        for i in range(40):
            producer.send_sync(topic, b"v%d" % i, key=b"k-a" if i % 3 == 0 else b"k-b",
                               partition=i % 2, timestamp=1_700_000_000_000 + i, timeout=30)

    def pages(**args) -> list[list[tuple[int, int]]]:
        out, cursor = [], None
        while True:
            response = admin_client.get(f"/api/v1/topics/{topic}/messages", query_string={
                **args, "limit": 4, **({"cursor": cursor} if cursor else {})})
            assert response.status_code == 200, response.json
            view = response.json
            assert view["scan"]["key_index"] == (args.get("key_match") != "substring")
            out.append(where(view))
            cursor = view["next"]
            if not cursor:
                return out

    for mode in ({}, {"mode": "time", "time": 0}, {"mode": "range", "partition": 1}):
        by_index = pages(key="k-a", **mode)
        by_scan = pages(key="k-a", key_match="substring", **mode)
        assert by_index == by_scan and sum(map(len, by_index)) >= 7, mode
    view = admin_client.get(f"/api/v1/topics/{topic}/messages?key=k-a&limit=50").json
    assert len(view["records"]) == 14 and "key index" in view["scan"]["message"]
    assert {r["key"]["text"] for r in view["records"]} == {"k-a"}


def test_values_render_as_json_text_or_hex(admin_client, seeded):
    records = browse(admin_client, mode="range", partition=0, to=4)["records"]
    as_json, as_text, as_hex, hostile = (r["value"] for r in records)
    assert as_json["format"] == "json" and json.loads(as_json["text"]) == {"id": 1,
                                                                           "item": "book"}
    assert as_json["text"].startswith('{\n  "id": 1')
    assert as_text == {"format": "text", "text": "plain text payment", "size": 18,
                       "truncated": False, "note": ""}
    assert as_hex["format"] == "hex" and "00 01 fe ff 7f 62 69 6e" in as_hex["text"]
    assert records[2]["key"]["format"] == "none" and records[2]["tag"] is None
    assert records[3]["headers"] == [{"name": "trace", "value": {
        "format": "text", "text": "abc", "size": 3, "truncated": False, "note": ""}}]
    forced = browse(admin_client, mode="range", partition=0, to=3, format="hex")["records"]
    assert [r["value"]["format"] for r in forced] == ["hex", "hex", "hex"]
    assert forced[0]["value"]["text"].startswith("00000000  7b 22 69 64")
    texts = browse(admin_client, mode="range", partition=0, to=3, format="text")["records"]
    assert texts[0]["value"]["text"] == '{"id": 1, "item": "book"}'
    assert texts[2]["value"]["note"].startswith("not UTF-8")
    not_json = browse(admin_client, mode="range", partition=0, **{"from": 1, "to": 2},
                      format="json")["records"][0]["value"]
    assert not_json["format"] == "text" and not_json["note"] == "not JSON"


def test_the_raw_download_is_the_value_byte_for_byte(admin_client, seeded):
    for path in (f"/api/v1/topics/{TOPIC}/messages/0/2/raw",
                 f"/topics/{TOPIC}/messages/0/2/raw"):
        got = admin_client.get(path)
        assert got.status_code == 200 and got.data == BINARY
        assert got.mimetype == "application/octet-stream"
        assert got.headers["Content-Disposition"] == f'attachment; filename="{TOPIC}-0-2.bin"'
    assert admin_client.get(f"/api/v1/topics/{TOPIC}/messages/0/3/raw").data == \
        HOSTILE.encode()
    cases = [("0/x", 400, "offset must be an integer"),
             ("7/0", 400, "partition must be between 0 and 1, got 7"),
             ("0/24", 404, "has no message at offset 24"),
             ("0/99", 400, "out of range")]
    for tail, status, why in cases:
        code, message = error_of(admin_client, f"/api/v1/topics/{TOPIC}/messages/{tail}/raw")
        assert code == status and why in message, (tail, code, message)


def test_a_scan_stops_at_the_record_limit_and_next_goes_on(admin_client, seeded):
    first = browse(admin_client, mode="range", partition=0, limit=5, **{"from": 4})
    assert where(first) == [(0, o) for o in range(4, 9)]
    assert first["next"] == "0:9" and first["scan"]["stopped"] == ["limit"]
    assert "the limit of 5 records per page" in first["scan"]["message"]
    second = browse(admin_client, mode="range", partition=0, limit=5, cursor=first["next"],
                    **{"from": 4})
    assert where(second) == [(0, o) for o in range(9, 14)]
    page = admin_client.get(f"/topics/{TOPIC}/messages?mode=range&partition=0&limit=5&from=4")
    link = unescape(re.search(r'id="next" href="([^"]+)"', page.text).group(1))
    assert 'id="m-0-9"' in admin_client.get(f"/topics/{TOPIC}/messages{link}").text


def test_a_scan_across_partitions_pages_on_from_the_first_record_not_shown(admin_client,
                                                                            seeded):
    first = browse(admin_client, mode="time", time=seeded + 22_000, limit=3)
    assert where(first) == [(0, 22), (0, 23), (1, 0)] and first["next"] == "1:1"
    rest = browse(admin_client, mode="time", time=seeded + 22_000, limit=3,
                  cursor=first["next"])
    assert where(rest) == [(1, 1), (1, 2)] and rest["next"] is None


def test_a_scan_stops_at_its_byte_budget_and_says_so(admin_client, seeded):
    view = browse(admin_client, mode="range", partition=0, value="nowhere", scan_bytes=1024)
    assert view["records"] == [] and view["scan"]["stopped"] == ["bytes"]
    assert 0 < view["scan"]["offsets"] < 24 and view["scan"]["bytes"] >= 1024
    assert view["next"] == f"0:{view['scan']['offsets']}"
    assert "the scan limit of 1024 bytes per request" in view["scan"]["message"]
    rest = browse(admin_client, mode="range", partition=0, value="nowhere", cursor=view["next"])
    assert rest["scan"]["offsets"] == 24 - view["scan"]["offsets"] and rest["next"] is None


def test_bad_input_is_a_400_or_404_naming_the_field_and_its_limits(admin_client, seeded):
    path = f"/api/v1/topics/{TOPIC}/messages"
    cases = [({"mode": "sideways"}, 400, "mode must be one of newest, range, time"),
             ({"partition": "one"}, 400, "partition must be an integer"),
             ({"partition": 2}, 400, "partition must be between 0 and 1, got 2"),
             ({"mode": "range"}, 400, "partition is required in range mode (0..1)"),
             ({"mode": "range", "partition": 0, "from": 5, "to": 2}, 400,
              "to (2) must be greater than from (5)"),
             ({"mode": "range", "partition": 0, "from": 25}, 400,
              "from must be between 0 and 24, got 25"),
             ({"mode": "range", "partition": 0, "from": "x"}, 400, "from must be an integer"),
             ({"limit": 501}, 400, "limit must be between 1 and 500"),
             ({"scan_bytes": 10}, 400, "scan_bytes must be between 1024 and 8388608"),
             ({"mode": "time"}, 400, "time is required in time mode"),
             ({"mode": "time", "time": "yesterday"}, 400, "time must be epoch milliseconds"),
             ({"format": "xml"}, 400, "format must be one of auto, text, json, hex"),
             ({"key_match": "regex"}, 400, "key_match must be one of exact, substring"),
             ({"cursor": "0-4"}, 400, "cursor must be partition:offset pairs"),
             ({"cursor": "0:99"}, 400, "cursor offset 99 of partition 0 must be between 0 "
              "and its latest offset 24"),
             ({"key": "k" * 1001}, 400, "key must be at most 1000 characters")]
    for args, status, why in cases:
        code, message = error_of(admin_client, path, **args)
        assert code == status and why in message, (args, code, message)
    code, message = error_of(admin_client, "/api/v1/topics/no-such-topic/messages")
    assert code == 404 and "no-such-topic" in message
    page = admin_client.get(f"/topics/{TOPIC}/messages?mode=range&partition=0&from=5&to=2")
    assert page.status_code == 400 and "must be greater than from" in page.text
    assert 'id="browse"' in page.text and 'name="to" type="number" min="0" value="2"' in page.text


def test_hostile_keys_values_and_inputs_are_escaped(admin_client, seeded):
    page = admin_client.get(f"/topics/{TOPIC}/messages",
                            query_string={"mode": "range", "partition": 0, "key": HOSTILE})
    assert page.status_code == 200 and 'id="m-0-3"' in page.text
    assert HOSTILE not in page.text
    assert page.text.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3  # key, value, input
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]


def test_the_page_shows_records_formats_and_download_links(admin_client, seeded):
    page = admin_client.get(f"/topics/{TOPIC}/messages?mode=range&partition=0&to=3").text
    assert 'id="m-0-0"' in page and 'id="m-0-2"' in page and 'id="m-0-3"' not in page
    assert "&#34;item&#34;: &#34;book&#34;" in page and "plain text payment" in page
    assert "00 01 fe ff 7f 62 69 6e" in page
    assert f'href="/topics/{TOPIC}/messages/0/2/raw"' in page
    assert "format=hex" in page and "<script" not in page
    topic_page = admin_client.get(f"/topics/{TOPIC}").text
    assert f'href="/topics/{TOPIC}/messages"' in topic_page
    picker = admin_client.get("/messages")
    assert picker.status_code == 200 and f"<option>{TOPIC}</option>" in picker.text
    jump = admin_client.get(f"/messages?topic={TOPIC}")
    assert jump.status_code == 302 and jump.headers["Location"] == f"/topics/{TOPIC}/messages"


def test_the_produce_form_needs_csrf_and_shows_the_new_message(admin_client, seeded):
    form = {"key": "form-key", "tag": "manual", "value": '{"made": "by hand"}',
            "partition": "1"}
    refused = admin_client.post(f"/topics/{TOPIC}/messages", data=form)
    assert refused.status_code == 403 and "CSRF" in refused.text
    sent = admin_client.post(f"/topics/{TOPIC}/messages",
                             data={**form, "csrf_token": csrf_of(admin_client)})
    assert sent.status_code == 302
    location = sent.headers["Location"]
    offset = int(re.search(r"produced=(\d+)", location).group(1))
    assert offset >= 3 and "partition=1" in location and f"from={offset}" in location
    page = admin_client.get(location).text
    assert f'id="m-1-{offset}"' in page and 'id="produced"' in page
    assert "&#34;made&#34;: &#34;by hand&#34;" in page and "manual" in page
    view = browse(admin_client, mode="range", partition=1, **{"from": offset})
    assert view["records"][0]["key"]["text"] == "form-key"


def test_the_api_produces_text_and_base64_values(admin_client, seeded):
    csrf = {"X-CSRF-Token": csrf_of(admin_client)}
    made = admin_client.post(f"/api/v1/topics/{TOPIC}/messages", headers=csrf,
                             json={"value_base64": "AAH+/w==", "key": "api", "partition": 1})
    assert made.status_code == 201 and made.json["partition"] == 1
    offset = made.json["offset"]
    raw = admin_client.get(f"/api/v1/topics/{TOPIC}/messages/1/{offset}/raw")
    assert raw.data == b"\x00\x01\xfe\xff"
    bad = admin_client.post(f"/api/v1/topics/{TOPIC}/messages", headers=csrf,
                            json={"value_base64": "not base64!"})
    assert bad.status_code == 400 and "value_base64" in bad.json["error"]["message"]
    no_such = admin_client.post(f"/api/v1/topics/{TOPIC}/messages", headers=csrf,
                                json={"value": "x", "partition": 9})
    assert no_such.status_code == 404 and "no partition 9" in no_such.json["error"]["message"]
    unsent = admin_client.post(f"/api/v1/topics/{TOPIC}/messages", json={"value": "x"})
    assert unsent.status_code == 403 and unsent.json["error"]["code"] == "CSRF"


def test_a_viewer_may_neither_read_nor_produce_messages(viewer_client, seeded):
    code, message = error_of(viewer_client, f"/api/v1/topics/{TOPIC}/messages")
    assert code == 403 and "consume" in message and "vera" in message
    page = viewer_client.get(f"/topics/{TOPIC}/messages")
    assert page.status_code == 403 and "consume" in page.text
    sent = viewer_client.post(f"/topics/{TOPIC}/messages",
                              data={"value": "x", "csrf_token": csrf_of(viewer_client)})
    assert sent.status_code == 403 and "produce" in sent.text
    assert viewer_client.get(f"/api/v1/topics/{TOPIC}/messages/0/0/raw").status_code == 403


def test_an_api_token_or_key_browses_as_its_user(app, cluster, seeded):
    client = app.test_client()
    creds = cluster.admin_credentials()
    token = client.post("/api/v1/login", json={"user": creds.user,
                                               "password": creds.password}).json["token"]
    got = client.get(f"/api/v1/topics/{TOPIC}/messages?partition=1&limit=1",
                     headers={"Authorization": f"Bearer {token}"})
    assert got.status_code == 200 and len(got.json["records"]) == 1
    vera = client.post("/api/v1/login", json={"user": VIEWER[0],
                                              "password": VIEWER[1]}).json["token"]
    denied = client.get(f"/api/v1/topics/{TOPIC}/messages",
                        headers={"Authorization": f"Bearer {vera}"})
    assert denied.status_code == 403  # the portal's environment (the admin) never leaks in
    with AdminClient(cluster.master_addresses, credentials=creds) as root:
        _, vera_key = root.create_api_key(VIEWER[0], "browser test")
    by_key = client.get(f"/api/v1/topics/{TOPIC}/messages",
                        headers={"Authorization": f"ApiKey {vera_key}"})
    assert by_key.status_code == 403 and "vera" in by_key.json["error"]["message"]


def test_the_message_reader_reads_offsets_and_records_as_its_user(cluster, seeded):
    from lib.auth.client import Credentials

    with MessageReader(cluster.master_addresses,
                       credentials=cluster.admin_credentials()) as reader:
        bounds = reader.offsets(TOPIC, [0], timestamp_ms=seeded + 3_000)
        assert (bounds[0].earliest, bounds[0].latest, bounds[0].for_time) == (0, 24, 3)
        got = reader.read(TOPIC, 0, 0, 2)
        assert [r.key for r in got.records] == [b"order-1", b"order-2"]
        assert got.next_offset == 2 and got.nbytes > 0
        small = reader.read(TOPIC, 0, 4, max_bytes=1)  # at least one record
        assert [r.offset for r in small.records] == [4]
        with pytest.raises(OffsetOutOfRange) as out:
            reader.read(TOPIC, 0, 99)
        assert out.value.latest == 24
        with pytest.raises(UnknownPartition):
            reader.read(TOPIC, 5, 0)
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as root:
        token = root.login(user=VIEWER[0], password=VIEWER[1]).token
    with MessageReader(cluster.master_addresses, credentials=Credentials(token=token)) as vera:
        assert vera.offsets(TOPIC)[0].latest == 24  # describe is enough for offsets
        with pytest.raises(PermissionDenied):
            vera.read(TOPIC, 0, 0)


WALKED = "newest-walk"


@pytest.fixture(scope="module")
def fifty(cluster):
    """Topic newest-walk: 50 records over 3 partitions (record i in partition i % 3, at
    T0 + i s, value "odd" or "even")."""
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as root:
        root.create_topic(WALKED, partitions=3)
    t0 = (int(time.time()) - 600) * 1000
    with Producer(cluster.master_addresses, linger_ms=0) as producer:
        for i in range(50):
            producer.send_sync(WALKED, b"%s record %d" % (b"odd" if i % 2 else b"even", i),
                               partition=i % 3, timestamp=t0 + i * 1000, timeout=30)
    return [(i % 3, i // 3) for i in range(50)]  # (partition, offset) of record i


def walk(client, **args) -> list[list[tuple[int, int]]]:
    """Every page of a browse, following "next" to the end."""
    pages, cursor = [], ""
    for _ in range(200):
        view = client.get(f"/api/v1/topics/{WALKED}/messages",
                          query_string={**args, **({"cursor": cursor} if cursor else {})}).json
        pages.append(where(view))
        cursor = view["next"]
        if not cursor:
            return pages
    raise AssertionError(f"no end after 200 pages: {pages[-3:]}")


def test_regression_newest_first_pages_walk_back_through_every_record(admin_client, fifty):
    """`?mode=newest&limit=20` over 3 partitions holding 50 records showed 20 rows and no next
    link ("That is everything in the range"): the other 30 could not be reached."""
    pages = walk(admin_client, mode="newest", limit=20)
    assert [len(p) for p in pages] == [20, 20, 10]
    assert [r for page in pages for r in page] == list(reversed(fifty))  # newest first, all
    odd = [r for i, r in enumerate(fifty) if i % 2]
    for budget in ({"scan_bytes": 1024}, {}):  # a small byte budget stops scans mid-way
        pages = walk(admin_client, mode="newest", limit=7, value="odd", **budget)
        seen = [r for page in pages for r in page]
        assert sorted(seen) == sorted(odd) and len(seen) == len(set(seen)), budget
    one = walk(admin_client, mode="newest", partition=1, limit=4)
    assert [r for page in one for r in page] == [(1, o) for o in range(16, -1, -1)]


def test_regression_the_newest_first_page_links_to_the_older_records(admin_client, fifty):
    path, rows = f"/topics/{WALKED}/messages?mode=newest&limit=20", []
    for _ in range(10):
        page = admin_client.get(path)
        assert page.status_code == 200
        rows += re.findall(r'id="m-(\d+)-(\d+)"', page.text)
        link = re.search(r'id="next" href="([^"]+)"', page.text)
        if link is None:
            break
        path = f"/topics/{WALKED}/messages" + unescape(link.group(1))
    assert [(int(p), int(o)) for p, o in rows] == list(reversed(fifty))
