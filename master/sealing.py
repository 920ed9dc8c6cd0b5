"""Token signing keys sealed with the cluster secret in the replicated state.

Whoever holds a signing key can sign a token for any user with any role, and every master and
broker accepts it. The data dir is the owner's alone (lib/private_files.py), but backups,
copied volumes and a snapshot sent to a new master leave it; so the keys are kept sealed
(AES-256-GCM, the key id as associated data) under a key derived from the cluster secret,
which lives outside the data dir (config or $TUBEQ_CLUSTER_SECRET). The active master seals a
new key before it replicates it: the Raft log, the snapshots and the LMDB state hold only the
sealed form. Masters unseal in memory; brokers still get the keys in clear with their
heartbeats, over the cluster credential (and TLS when it is on).

A stored secret is either ``sealed1:<hex nonce+ciphertext>`` or, from a state written before
sealing (or by a cluster without a cluster secret: ``auth = "none"``), plain hex. Plain keys
still load, and the active master seals them (the ``reseal_signing_keys`` command); what was
in clear before may linger in the Raft log until its next compaction and in LMDB's free pages,
so rotate the signing key after an upgrade. A key sealed under another cluster secret cannot
be unsealed: it is skipped (logged), and with no usable key left the active master adds one.
"""
from __future__ import annotations

import logging
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

log = logging.getLogger(__name__)
PREFIX = "sealed1:"
NONCE_BYTES = 12
KDF_INFO = b"tubeq signing-key seal v1"


class Sealer:
    """Seals and unseals signing keys with a key derived from ``cluster_secret``; without a
    secret it can only read plain keys, and stores new ones plain."""

    def __init__(self, cluster_secret: str = "") -> None:
        self._aead = None
        if cluster_secret:
            # HKDF, not a password hash: the secret is machine-made (at least 16 characters,
            # cluster up makes 43 random ones), and a master derives this once at start.
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                       info=KDF_INFO).derive(cluster_secret.encode())
            self._aead = AESGCM(key)

    @property
    def can_seal(self) -> bool:
        return self._aead is not None

    def seal(self, key_id: str, secret: bytes) -> str:
        """What the state stores for ``secret``."""
        if self._aead is None:
            return secret.hex()
        nonce = os.urandom(NONCE_BYTES)
        return PREFIX + (nonce + self._aead.encrypt(nonce, secret, key_id.encode())).hex()

    def unseal(self, key_id: str, stored: str) -> bytes | None:
        """The secret of key ``key_id`` from what the state stores; None when it was sealed
        under another cluster secret (or is damaged)."""
        if not is_sealed(stored):
            return bytes.fromhex(stored)
        if self._aead is None:
            return None
        try:
            raw = bytes.fromhex(stored[len(PREFIX):])
            return self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], key_id.encode())
        except (ValueError, InvalidTag):
            return None


def is_sealed(stored: str) -> bool:
    return stored.startswith(PREFIX)
