"""Broker detail and draining: the page ``/brokers/<id>``, the drain and undrain forms, and the
same under ``/api/v1/brokers/<id>`` (the broker list itself is in pages.py and api.py).

A drained broker gets no new partition, and the replicas it holds move to other brokers (they
keep serving meanwhile). Draining needs
``admin`` on the cluster: the master decides (each call is the user's own), and the portal says
plainly what a refusal means. The buttons show for admins only.
"""
from __future__ import annotations

from flask import Blueprint, jsonify, redirect, render_template, request, url_for

from lib.admin import AdminClient
from lib.errors import PermissionDenied, UnknownBroker
from portal_web.context import client, portal
from portal_web.errors import PortalError
from portal_web.sampler import Sampler
from portal_web.views import plain

bp = Blueprint("brokers", __name__)


def broker(admin: AdminClient, broker_id: int, sampler: Sampler | None = None) -> dict:
    """One broker as listed, with the partitions it hosts (of the topics the caller may see),
    their totals and (when sampled) the messages per second into them."""
    found = [b for b in admin.list_brokers() if b.broker_id == broker_id]
    if not found:
        raise UnknownBroker(f"unknown broker {broker_id}: no broker with this id ever "
                            "registered", broker_id=broker_id)
    hosted = [{"topic": t.name, **plain(p)} for t in admin.list_topics() for p in t.partitions
              if p.broker_id == broker_id]
    return {**plain(found[0]), "partitions": hosted, "partition_count": len(hosted),
            "topic_count": len({p["topic"] for p in hosted}),
            "messages": sum(max(0, p["latest"] - max(p["earliest"], 0)) for p in hosted
                            if p["latest"] >= 0),
            "disk_bytes": sum(max(0, p["disk_bytes"]) for p in hosted),
            "rate": _rate(sampler, hosted)}


def _rate(sampler: Sampler | None, hosted: list[dict]) -> float | None:
    if sampler is None:
        return None
    rates = sampler.partition_rates()
    return sum(rates.get((p["topic"], p["partition"]), 0.0) for p in hosted)


def set_draining(admin: AdminClient, broker_id: int, draining: bool) -> dict:
    """Drain or undrain; a refusal says that it takes an admin."""
    try:
        info = admin.drain_broker(broker_id) if draining else admin.undrain_broker(broker_id)
    except PermissionDenied as err:
        what = "drain" if draining else "undrain"
        raise PortalError(403, err.code, f"only an admin (admin on the cluster) may {what} a "
                          f"broker; the master refused: {err.message}") from None
    return plain(info)


# -- pages ---------------------------------------------------------------------------------

@bp.get("/brokers/<int:broker_id>")
def page(broker_id: int):
    return render_template("broker.html", broker=broker(client(), broker_id, portal().sampler))


@bp.post("/brokers/<int:broker_id>/drain")
def drain_form(broker_id: int):
    set_draining(client(), broker_id, True)
    return _back(broker_id)


@bp.post("/brokers/<int:broker_id>/undrain")
def undrain_form(broker_id: int):
    set_draining(client(), broker_id, False)
    return _back(broker_id)


def _back(broker_id: int):
    """To the list when the button was there, else to the broker's page."""
    if request.form.get("back") == "list":
        return redirect(url_for("pages.brokers"))
    return redirect(url_for("brokers.page", broker_id=broker_id))


# -- JSON API ------------------------------------------------------------------------------

@bp.get("/api/v1/brokers/<int:broker_id>")
def api_broker(broker_id: int):
    return jsonify(broker(client(), broker_id, portal().sampler))


@bp.post("/api/v1/brokers/<int:broker_id>/drain")
def api_drain(broker_id: int):
    return jsonify(set_draining(client(), broker_id, True))


@bp.post("/api/v1/brokers/<int:broker_id>/undrain")
def api_undrain(broker_id: int):
    return jsonify(set_draining(client(), broker_id, False))
