"""SCRAM-SHA-256 on the master (master/scram.py) against RFC 7677's own example exchange, and
refusals: a wrong proof, an unknown user (indistinguishable until the proof), a replayed or
expired exchange, malformed messages."""
from __future__ import annotations

import base64

import pytest

from lib.errors import Unauthenticated
from master import scram

# RFC 7677, section 3
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
STORED = {"user": scram.credentials("pencil", SALT)}


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def exchanges(clock=None) -> scram.ScramExchanges:
    return scram.ScramExchanges(clock or Clock(), nonce=lambda: SERVER_NONCE)


def test_rfc_7677s_example_exchange():
    ex = exchanges()
    server_first, exchange = ex.first(CLIENT_FIRST, STORED.get)
    assert server_first == SERVER_FIRST
    assert ex.final(exchange, CLIENT_FINAL) == ("user", SERVER_FINAL)
    with pytest.raises(Unauthenticated, match="unknown or expired"):
        ex.final(exchange, CLIENT_FINAL)  # an exchange is used once


def test_a_wrong_proof_or_an_unknown_user_fails_the_same_way_at_the_end():
    ex = exchanges()
    _, exchange = ex.first(CLIENT_FIRST, STORED.get)
    wrong = CLIENT_FINAL[:-10] + b"AAAAAAAAA="
    with pytest.raises(Unauthenticated, match="wrong user or password"):
        ex.final(exchange, wrong)
    first, exchange = ex.first(b"n,,n=nobody,r=abc", STORED.get)
    assert first.startswith(b"r=abc" + SERVER_NONCE.encode() + b",s=")  # looks the same
    with pytest.raises(Unauthenticated, match="wrong user or password"):
        ex.final(exchange, b"c=biws,r=abc" + SERVER_NONCE.encode() + b",p=AAAA")


def test_expired_exchanges_and_malformed_messages_are_refused_naming_why():
    clock = Clock()
    ex = exchanges(clock)
    _, exchange = ex.first(CLIENT_FIRST, STORED.get)
    clock.now += scram.EXCHANGE_TTL_S + 1
    with pytest.raises(Unauthenticated, match="unknown or expired"):
        ex.final(exchange, CLIENT_FINAL)
    for bad, why in ((b"p=tls-unique,,n=user,r=x", "channel binding"),
                     (b"n,,n=user", "needs n= and r="),
                     (b"n,,garbage", "a=value"),
                     (b"n,,n=us=er,r=x", "bad escape"),
                     (b"n,,n=user,r=x,tokenauth=true", "delegation tokens"),
                     (b"\xff\xfe", "not UTF-8"),
                     (b"n,,n=" + b"u" * 5000 + b",r=x", "over 4096 bytes")):
        with pytest.raises(Unauthenticated, match=why):
            ex.first(bad, STORED.get)
    _, exchange = ex.first(CLIENT_FIRST, STORED.get)
    with pytest.raises(Unauthenticated, match="needs the nonce"):
        ex.final(exchange, b"c=biws,r=other-nonce,p=AAAA")
