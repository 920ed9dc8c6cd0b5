"""Issue 49, item 2: the token signing keys in a master's state are sealed with the cluster
secret, so a copy of the state (a backup, a copied volume) signs no token that a master or a
broker accepts. Over real processes: the attacker reads the keys out of a copy of
``meta/data.mdb`` with LMDB, as the issue's reproduction did."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import lmdb

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.auth.settings import cluster_header
from lib.auth.tokens import Claims, sign
from lib.errors import Unauthenticated
from lib.proto import broker_pb2, master_pb2, master_pb2_grpc
from lib.rpc import channel, invoke
from master.sealing import is_sealed
from tests.cluster import Cluster
from tests.integration.test_cluster_auth import broker_call
from tests.integration.test_consumer_common import wait_for


def stored_keys(meta: Path) -> dict[str, str]:
    """key id -> the secret as the state at ``meta`` stores it, read with LMDB as anyone who
    can read the files would ({} while the master has not written one)."""
    try:
        env = lmdb.open(str(meta), readonly=True, lock=False, max_dbs=16)
    except lmdb.Error:
        return {}
    try:
        with env.begin() as txn:
            raw = txn.get(b"signing_keys", db=env.open_db(b"meta", txn=txn, create=False))
    finally:
        env.close()
    return {} if raw is None else {k["key_id"]: k["secret"] for k in json.loads(bytes(raw))}


def thief_key(stored: str) -> bytes:
    """What a thief holding only the state signs with: a plain key's secret, or the blob of
    a sealed one (``sealed1:<hex>``: there is nothing better to try without the secret)."""
    return bytes.fromhex(stored.split(":", 1)[-1])


def forge(key_id: str, secret: bytes) -> str:
    now = int(time.time() * 1000)
    return sign(Claims("mallory", ("admin",), "user", key_id, now, now + 600_000), secret)


def clear_keys(cluster) -> dict[str, bytes]:
    """The keyring as a broker gets it (heartbeat with the cluster credential)."""
    ch = channel(cluster.masters[0].address)
    try:
        res = invoke(master_pb2_grpc.MasterStub(ch).BrokerHeartbeat,
                     master_pb2.BrokerHeartbeatRequest(broker_id=1, acl_version=-1,
                                                       quota_version=-1, ip_version=-1),
                     5, cluster_header(cluster.cluster_secret))
    finally:
        ch.close()
    return {k.key_id: k.secret for k in res.signing_keys}


def accepted(cluster, token: str) -> bool:
    """Whether the master and the broker take ``token`` (both must agree)."""
    answers = []
    with AdminClient(cluster.master_addresses, credentials=Credentials(token=token)) as client:
        try:
            client.list_users()
            answers.append(True)
        except Unauthenticated as err:
            assert "signature does not match" in err.message, err.message
            answers.append(False)
    fetch = broker_pb2.FetchRequest(topic="nothing-here", partitions=[
        broker_pb2.PartitionFetch(partition=0, offset=0)])
    try:
        broker_call(cluster.brokers[1].address, "Fetch", fetch, f"Bearer {token}")
        answers.append(True)
    except Unauthenticated:
        answers.append(False)
    except Exception:  # noqa: BLE001 - past authentication: the topic is unknown
        answers.append(True)
    assert len(set(answers)) == 1, answers
    return answers[0]


def _backup(master_dir: Path, to: Path) -> Path:
    for part in ("meta", "raft"):
        shutil.copytree(master_dir / part, to / part)
    return to


def test_a_token_signed_with_a_key_from_a_backup_of_the_state_is_refused(cluster_factory,
                                                                          tmp_path):
    cluster = cluster_factory(1)
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as a:
        a.rotate_signing_key()  # one more key, through the Raft log
    keyring = wait_for(lambda: (lambda k: k if len(k) == 2 else None)(clear_keys(cluster)),
                       15, "both keys")
    backup = _backup(cluster.masters[0].data_dir, tmp_path / "backup")

    leaks = [(str(path.relative_to(backup)), key_id)  # the clear keys: nowhere in the copy
             for path in backup.rglob("*") if path.is_file()
             for key_id, secret in keyring.items()
             if secret in path.read_bytes() or secret.hex().encode() in path.read_bytes()]
    assert not leaks
    stolen = stored_keys(backup / "meta")
    assert set(stolen) == set(keyring)
    for key_id, stored in stolen.items():
        assert not accepted(cluster, forge(key_id, thief_key(stored))), key_id
    # what the stolen keys would have been worth in clear: the forgery itself is sound
    key_id, secret = next(iter(keyring.items()))
    assert accepted(cluster, forge(key_id, secret))


def test_keys_of_a_state_from_before_sealing_still_verify_and_get_sealed(tmp_path):
    """A state whose keys are stored plain (as every master wrote them before sealing; here a
    master with no cluster secret, as ``auth = "none"`` allows) keeps its keys: tokens they
    signed still pass once the master runs with a cluster secret, and it seals them."""
    conf = tmp_path / "master.toml"
    conf.write_text('[master]\nauth = "none"\n')
    cluster = Cluster(tmp_path / "c", master_args=["--config", str(conf)])
    try:
        master = cluster.master_process(0)
        meta = master.data_dir / "meta"
        master.env["TUBEQ_CLUSTER_SECRET"] = ""  # nothing to seal with
        master.start()
        plain = wait_for(lambda: stored_keys(meta), 15, "the first key")
        assert not any(is_sealed(s) for s in plain.values())
        master.stop()

        master.env["TUBEQ_CLUSTER_SECRET"] = cluster.cluster_secret
        conf.write_text('[master]\nauth = "token"\n')
        master.start()
        cluster.start_broker(1)
        cluster.wait_brokers_registered()
        for key_id, stored in plain.items():  # a token signed before still passes
            assert accepted(cluster, forge(key_id, bytes.fromhex(stored)))
        sealed = wait_for(lambda: (lambda k: k if k and all(map(is_sealed, k.values()))
                                   else None)(stored_keys(meta)), 15, "the keys sealed")
        assert set(sealed) == set(plain)
        for key_id, stored in sealed.items():  # what a backup holds from now on
            assert not accepted(cluster, forge(key_id, thief_key(stored)))
            assert accepted(cluster, forge(key_id, bytes.fromhex(plain[key_id])))
    finally:
        cluster.stop_all()
