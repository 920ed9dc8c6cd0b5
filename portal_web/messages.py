"""The message browser: pages and /api/v1 routes (data in portal_web/browse.py), the raw
download of a value, and a form to produce a test message.

Reads and produces act as the caller: each request makes a :class:`MessageReader` (or a
:class:`Producer`) with the caller's own credentials, so the brokers check that user's ACLs
(``consume`` to browse, ``produce`` to send) and charge their quotas, never the portal's.
"""
from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from flask import (
    Blueprint,
    Flask,
    Response,
    current_app,
    jsonify,
    redirect,
    render_template,
    request,
    url_for,
)

from lib.auth.client import Credentials
from lib.consumer.reader import MessageReader
from lib.errors import TubeqError
from lib.producer.producer import Producer
from lib.tls import Tls
from portal_web import browse, message_query
from portal_web.config import PortalConfig
from portal_web.context import client, credentials, json_body
from portal_web.errors import PortalError, describe
from portal_web.render import FORMATS
from portal_web.views import integer

pages = Blueprint("messages", __name__)
api = Blueprint("messages_api", __name__, url_prefix="/api/v1")
EXTENSION = "tubeq.messages"


class UserClients:
    """Makes readers and producers for one request, with the caller's credentials.

    Made per request and closed when it ends, not cached per session: browsing and test
    messages are rare, a producer holds a sender thread and channels, and a cache per session
    would keep up to ``max_sessions`` of them alive (or need its own eviction racing requests
    still using an evicted client). A request pays for a channel or two and, for an API key, a
    login; with a token (every browser session) no login at all.
    """

    def __init__(self, config: PortalConfig, tls: Tls | None) -> None:
        self.config, self.tls = config, tls

    def reader(self, creds: Credentials) -> MessageReader:
        return MessageReader(self.config.masters, credentials=creds, tls=self.tls,
                             rpc_timeout_s=self.config.master_timeout_s)

    def producer(self, creds: Credentials) -> Producer:
        timeout_ms = int(self.config.master_timeout_s * 1000)
        return Producer(self.config.masters, credentials=creds, tls=self.tls, linger_ms=0,
                        retries=2, request_timeout_ms=timeout_ms, max_block_ms=timeout_ms,
                        client_id="tubeq-portal")


def init_app(app: Flask, config: PortalConfig, tls: Tls | None) -> None:
    app.extensions[EXTENSION] = UserClients(config, tls)
    app.register_blueprint(pages)
    app.register_blueprint(api)


def _clients() -> UserClients:
    return current_app.extensions[EXTENSION]


def _reader() -> MessageReader:
    return _clients().reader(credentials())


def produce(topic: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Send one test message (``value`` as text or ``value_base64``; optional ``key``,
    ``tag``, ``partition``) as the caller; where it was stored."""
    if body.get("value_base64"):
        try:
            value = base64.b64decode(str(body["value_base64"]), validate=True)
        except (binascii.Error, ValueError):
            raise message_query.bad("value_base64 must be base64 (RFC 4648)") from None
    else:
        value = str(body.get("value") or "").encode()
    key = message_query.text_arg(body, "key")
    partition = integer(body, "partition", None, 0, 1_000_000)
    clients = _clients()
    timeout = clients.config.master_timeout_s
    producer = clients.producer(credentials())
    try:
        sent = producer.send_sync(topic, value, key=None if key is None else key.encode(),
                                  tag=message_query.text_arg(body, "tag"), partition=partition,
                                  timeout=2 * timeout)
    finally:
        producer.close(timeout)  # bounded: a record still unacknowledged fails, never hangs
    return {"topic": sent.topic, "partition": sent.partition, "offset": sent.offset,
            "timestamp": sent.timestamp}


def _download(name: str, partition: str, offset: str) -> Response:
    with _reader() as reader:
        value = browse.raw(reader, name, partition, offset)
    response = Response(value, mimetype="application/octet-stream")
    # The topic name allows letters, digits, '.', '_' and '-' only: safe in the header.
    response.headers["Content-Disposition"] = \
        f'attachment; filename="{name}-{int(partition)}-{int(offset)}.bin"'
    return response


# ------------------------------------------------------------------ pages


@pages.get("/messages")
def pick():
    """Choose a topic to browse (``?topic=`` goes straight to it)."""
    if request.args.get("topic"):
        return redirect(url_for("messages.browse_page", name=request.args["topic"]))
    return render_template("messages_pick.html", topics=[t.name for t in client().list_topics()])


@pages.get("/topics/<name>/messages")
def browse_page(name: str):
    with _reader() as reader:
        try:
            view = browse.messages(reader, name, request.args)
        except (PortalError, TubeqError) as err:
            status, _code, message = describe(err)
            if status != 400:
                raise
            bounds = reader.offsets(name)
            view = {"topic": name, "partitions": browse.partitions_view(bounds),
                    "records": [], "next": None, "scan": None}
            return _page(view, message), 400
    return _page(view, "")


def _page(view: dict[str, Any], error: str) -> str:
    return render_template("messages.html", view=view, error=error, args=request.args,
                           formats=FORMATS, max_records=message_query.MAX_RECORDS)


@pages.post("/topics/<name>/messages")
def produce_page(name: str):
    sent = produce(name, request.form)
    return redirect(url_for("messages.browse_page", name=name, mode="range",
                            partition=sent["partition"], produced=sent["offset"],
                            **{"from": sent["offset"]}))


@pages.get("/topics/<name>/messages/<partition>/<offset>/raw")
def raw_page(name: str, partition: str, offset: str):
    return _download(name, partition, offset)


# ------------------------------------------------------------------ API


@api.get("/topics/<name>/messages")
def browse_api(name: str):
    with _reader() as reader:
        return jsonify(browse.messages(reader, name, request.args))


@api.post("/topics/<name>/messages")
def produce_api(name: str):
    return jsonify(produce(name, json_body())), 201


@api.get("/topics/<name>/messages/<partition>/<offset>/raw")
def raw_api(name: str, partition: str, offset: str):
    return _download(name, partition, offset)
