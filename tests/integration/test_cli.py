"""The ``tubeq`` command end to end: ``cluster up`` as a real process tree, then the CLI."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib.process import pid_alive

ROOT = Path(__file__).resolve().parents[2]
TUBEQ = [sys.executable, "-m", "lib.cli"]


@pytest.fixture
def local_cluster(tmp_path, monkeypatch, request):
    """``tubeq cluster up`` on free ports (plus the options a test's ``cluster_up_args``
    marker gives); yields (process, cluster.json); stops it by PID. The session's test
    credentials are dropped: the CLI logs in with the admin password ``cluster up`` made,
    from the credentials file it wrote (as a user would)."""
    marker = request.node.get_closest_marker("cluster_up_args")
    extra = list(marker.args) if marker else []
    for var in ("TUBEQ_USER", "TUBEQ_PASSWORD", "TUBEQ_CLUSTER_SECRET"):
        monkeypatch.delenv(var, raising=False)
    # cluster up writes the user's credentials file: here, not where other tests look
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [*TUBEQ, "cluster", "up", "--data-dir", str(data), "--master-port", "0",
         "--broker-port", "0", "--kafka-port", "0", "--no-portal", *extra], cwd=ROOT,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    summary = data / "cluster.json"
    info: dict = {}
    try:  # whatever fails from here on, the cluster is stopped below
        deadline = time.monotonic() + 60
        while not summary.exists():
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "cluster up did not start in 60 s"
            time.sleep(0.1)
        info = json.loads(summary.read_text())
        monkeypatch.setenv("TUBEQ_CREDENTIALS_FILE", info["credentials_file"])
        yield proc, info
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for child in info.values():  # never leave a child behind, even on failure
            if isinstance(child, dict) and "pid" in child and pid_alive(child["pid"]):
                os.kill(child["pid"], signal.SIGKILL)


def tubeq(masters: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*TUBEQ, "--masters", masters, *args], cwd=ROOT, input=stdin,
                          capture_output=True, timeout=60)


def test_cluster_up_then_produce_and_consume_with_the_cli(local_cluster):
    _, info = local_cluster
    masters = info["masters"]
    assert {"master0", "broker1", "broker2"} <= set(info)
    # the brokers' Kafka listeners, as Kafka clients' bootstrap.servers (docs/kafka.md)
    assert info["kafka_bootstrap"] == f"{info['broker1']['kafka']},{info['broker2']['kafka']}"
    creds = Path(info["credentials_file"])  # the first admin's, for the CLI
    assert creds.stat().st_mode & 0o777 == 0o600
    assert "user = admin" in creds.read_text() and "password = " in creds.read_text()
    users = Path(os.environ["XDG_CONFIG_HOME"]) / "tubeq" / "credentials"  # clients' default
    assert users.read_text().endswith(creds.read_text())

    created = tubeq(masters, "topic", "create", "cli-demo", "--partitions", "3",
                    "--replication-factor", "1", "--min-insync-replicas", "1", "--json")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["partition_count"] == 3
    described = tubeq(masters, "topic", "describe", "cli-demo")
    header, *rows = described.stdout.decode().splitlines()[-4:]
    assert header.lower().split()[:7] == ["partition", "broker_id", "address", "available",
                                          "leader_epoch", "replicas", "isr"], described.stdout
    for row in rows:  # one copy: the leader is the only replica and the ISR
        cells = row.split()
        assert cells[5] == cells[6] == cells[1] and cells[4] == "1", row

    lines = b"".join(b"line-%d\n" % i for i in range(50))
    produced = tubeq(masters, "produce", "cli-demo", stdin=lines)
    assert produced.returncode == 0, produced.stderr
    assert b"produced 50 messages" in produced.stderr

    consumed = tubeq(masters, "consume", "cli-demo", "--from-beginning", "--max", "50")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == sorted(lines.splitlines())

    listed = tubeq(masters, "topic", "list", "--json")
    assert [t["name"] for t in json.loads(listed.stdout)] == ["cli-demo"]
    brokers = json.loads(tubeq(masters, "broker", "list", "--json").stdout)
    assert sorted(b["broker_id"] for b in brokers) == [1, 2]
    assert all(b["alive"] for b in brokers)


@pytest.mark.cluster_up_args("--tls-client-auth", "--masters", "1", "--brokers", "1")
def test_cluster_up_with_mutual_tls(local_cluster, monkeypatch):
    _, info = local_cluster
    masters = info["masters"]
    tls = {f"TUBEQ_{k.upper()}": info[k] for k in ("tls_ca", "tls_cert", "tls_key")}
    assert Path(tls["TUBEQ_TLS_KEY"]).stat().st_mode & 0o777 == 0o600
    plain = tubeq(masters, "--timeout", "2", "topic", "list")
    assert plain.returncode == 1 and b"if it uses TLS, give its CA" in plain.stderr, plain.stderr

    for var, path in tls.items():  # what cluster up prints to export
        monkeypatch.setenv(var, path)
    created = tubeq(masters, "topic", "create", "tls-demo", "--partitions", "1")
    assert created.returncode == 0, created.stderr
    produced = tubeq(masters, "produce", "tls-demo", stdin=b"a\nb\nc\n")
    assert produced.returncode == 0, produced.stderr
    consumed = tubeq(masters, "consume", "tls-demo", "--from-beginning", "--max", "3")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [b"a", b"b", b"c"]

    monkeypatch.delenv("TUBEQ_TLS_CERT")
    monkeypatch.delenv("TUBEQ_TLS_KEY")
    no_cert = tubeq(masters, "--timeout", "2", "topic", "list")
    assert no_cert.returncode == 1 and b"Unavailable" in no_cert.stderr, no_cert.stderr


def test_cluster_up_starts_three_masters_and_master_status_shows_them(local_cluster):
    _, info = local_cluster
    assert {"master0", "master1", "master2"} <= set(info)
    assert len(info["masters"].split(",")) == 3
    deadline = time.monotonic() + 20
    while True:  # cluster up returns once one master leads; the others learn it at once after
        status = tubeq(info["masters"], "master", "status", "--json")
        assert status.returncode == 0, status.stderr
        rows = json.loads(status.stdout)
        if sorted(r["role"] for r in rows) == ["leader", "standby", "standby"] or \
                time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sorted(r["role"] for r in rows) == ["leader", "standby", "standby"]
    leader = next(r["address"] for r in rows if r["role"] == "leader")
    assert all(r["leader"] == leader and r["term"] >= 1 for r in rows)
    table = tubeq(info["masters"], "master", "status")
    assert b"ROLE" in table.stdout and b"leader" in table.stdout
    # only dead masters on the list: a clear error and exit status 1
    gone = tubeq("127.0.0.1:1", "master", "status")
    assert gone.returncode == 1 and b"no master is active" in gone.stderr


def test_cli_errors_are_one_clear_line(local_cluster):
    _, info = local_cluster
    bad = tubeq(info["masters"], "topic", "describe", "no-such-topic")
    assert bad.returncode == 1
    assert b"UnknownTopic" in bad.stderr and b"Traceback" not in bad.stderr
    bad_name = tubeq(info["masters"], "topic", "create", "../etc")
    assert bad_name.returncode == 1 and b"InvalidName" in bad_name.stderr
    copies = tubeq(info["masters"], "topic", "create", "t", "--replication-factor", "3")
    assert copies.returncode == 1 and b"replication_factor 3 needs 3 live brokers" in \
        copies.stderr  # 2 brokers run
    too_many = tubeq(info["masters"], "topic", "create", "t", "--replication-factor", "17")
    assert too_many.returncode == 1 and b"replication_factor=17: must be 1..16" in too_many.stderr


def test_cluster_up_stops_every_child_on_ctrl_c(local_cluster):
    proc, info = local_cluster
    pids = [c["pid"] for c in info.values() if isinstance(c, dict)]
    assert all(pid_alive(p) for p in pids)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in pids)


def test_unreachable_masters_give_a_clear_error_quickly():
    start = time.monotonic()
    res = subprocess.run([*TUBEQ, "--masters", "127.0.0.1:1", "--timeout", "2", "topic", "list"],
                         cwd=ROOT, capture_output=True, timeout=60)
    assert res.returncode == 1
    assert b"Unavailable" in res.stderr and b"127.0.0.1:1" in res.stderr
    assert time.monotonic() - start < 30


def test_bench_latency_and_bulk_produce_report_figures_for_people_and_scripts(cluster):
    masters = cluster.master_addresses
    latency = tubeq(masters, "bench", "latency", "--messages", "100", "--size", "16",
                    "--partitions", "1", "--json", "--no-ceilings")
    assert latency.returncode == 0, latency.stderr
    got = json.loads(latency.stdout)["latency"]
    assert got["messages"] == 100
    for part in ("send_sync", "grpc_unary_round_trip"):
        assert 0 < got[part]["p50_ms"] <= got[part]["p99_ms"] <= got[part]["max_ms"]
    assert got["ratio"]["p50_ms"] > 0
    bulk = tubeq(masters, "bench", "produce", "--messages", "20000", "--size", "100", "--bulk",
                 "5000", "--topic", "bulk", "--no-ceilings")
    assert bulk.returncode == 0, bulk.stderr
    text = bulk.stdout.decode()
    assert "produce\n" in text and "msgs_per_s" in text and "20,000" in text  # a table
    assert "{" not in text  # not a Python dict
    # Per-record sends in chunks of latency_every(4099) = 2: the odd last one is sent too.
    single = tubeq(masters, "bench", "produce", "--messages", "4099", "--size", "10", "--topic",
                   "per-record", "--json", "--no-ceilings")
    assert single.returncode == 0, single.stderr
    produced = json.loads(single.stdout)["produce"]
    assert produced["messages"] == 4099 and produced["failures"] == 0
    assert 0 < produced["ack_latency"]["p50_ms"] <= produced["ack_latency"]["max_ms"]
    stored, deadline = -1, time.monotonic() + 20
    while stored != 4099 + 1 and time.monotonic() < deadline:  # + the warm-up record
        time.sleep(0.5)  # describe's offsets come with the broker's next heartbeat
        described = json.loads(tubeq(masters, "topic", "describe", "per-record",
                                     "--json").stdout)
        stored = sum(p["latest"] for p in described["partitions"])
    assert stored == 4099 + 1


def test_users_api_keys_and_acls_with_the_cli(local_cluster):
    _, info = local_cluster
    masters = info["masters"]
    added = tubeq(masters, "user", "add", "ops", "--role", "viewer", "--password-stdin",
                  stdin=b"a long enough password\n")
    assert added.returncode == 0, added.stderr
    short = tubeq(masters, "user", "add", "bob", "--password-stdin", stdin=b"short\n")
    assert short.returncode == 1
    assert b"InvalidArgument: a password must be 10 to 1024 characters" in short.stderr
    assert tubeq(masters, "user", "add", "etl", "--service").returncode == 0
    listed = json.loads(tubeq(masters, "user", "list", "--json").stdout)
    assert [(u["name"], u["kind"], u["roles"]) for u in listed] == [
        ("admin", "user", ["admin"]), ("etl", "service", []), ("ops", "user", ["viewer"])]
    created = tubeq(masters, "apikey", "create", "etl", "--description", "loader")
    assert created.returncode == 0, created.stderr
    key_id = created.stdout.split()[2].decode()
    assert b"api key tqk_" + key_id.encode() in created.stdout
    keys = json.loads(tubeq(masters, "apikey", "list", "--json").stdout)
    assert [(k["key_id"], k["principal"]) for k in keys] == [(key_id, "etl")]
    assert b"tqk_" not in tubeq(masters, "apikey", "list").stdout
    assert tubeq(masters, "apikey", "revoke", key_id).returncode == 0

    grant = ("user:etl", "produce", "topic", "loads-", "--prefix")
    assert b"added: allow user:etl produce on topic loads-*" in tubeq(
        masters, "acl", "add", *grant).stdout
    assert b"already there" in tubeq(masters, "acl", "add", *grant).stdout
    assert json.loads(tubeq(masters, "acl", "list", "--json").stdout) == [
        {"principal": "user:etl", "resource": "topic", "name": "loads-",
         "operation": "produce", "effect": "allow", "pattern": "prefix"}]
    assert tubeq(masters, "acl", "list").stdout.split()[5:] == [
        b"allow", b"user:etl", b"produce", b"topic", b"loads-*"]
    unnamed = tubeq(masters, "acl", "add", "user:etl", "produce", "topic")
    assert unnamed.returncode == 2 and b"name the topic" in unnamed.stderr
    assert tubeq(masters, "acl", "remove", *grant).returncode == 0
    assert json.loads(tubeq(masters, "acl", "list", "--json").stdout) == []
    assert tubeq(masters, "user", "delete", "ops").returncode == 0
    gone = tubeq(masters, "user", "passwd", "ops", "--password-stdin",
                 stdin=b"another long password\n")
    assert gone.returncode == 1 and b"unknown user 'ops'" in gone.stderr


@pytest.mark.cluster_up_args("--tls", "--masters", "1", "--brokers", "1")
def test_cluster_up_with_tls_serves_kafka_clients_over_tls(local_cluster):
    """The brokers' Kafka ports speak TLS with the cluster's certificate (docs/kafka.md)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    _, info = local_cluster
    masters = info["masters"]
    password = Path(info["credentials_file"]).read_text().split("password = ")[1].strip()
    conf = {"bootstrap.servers": info["kafka_bootstrap"], "security.protocol": "SASL_SSL",
            "ssl.ca.location": info["tls_ca"], "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "admin", "sasl.password": password}
    created = subprocess.run([*TUBEQ, "--masters", masters, "--tls-ca", info["tls_ca"], "topic",
                              "create", "k-tls", "--partitions", "1"], cwd=ROOT,
                             capture_output=True, timeout=60)
    assert created.returncode == 0, created.stderr
    producer = Producer(conf)
    producer.produce("k-tls", b"over tls")
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": "tls"})
    consumer.assign([TopicPartition("k-tls", 0, 0)])
    got = None
    for _ in range(40):
        got = consumer.poll(0.5)
        if got is not None and got.error() is None:
            break
    consumer.close()
    assert got is not None and got.value() == b"over tls"
    plain = Producer({**conf, "security.protocol": "SASL_PLAINTEXT",
                      "message.timeout.ms": 3000})
    failed = []
    plain.produce("k-tls", b"in clear", on_delivery=lambda err, msg: failed.append(err))
    plain.flush(10)
    assert failed and failed[0] is not None  # a clear-text client never reaches the data
