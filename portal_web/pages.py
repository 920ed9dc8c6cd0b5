"""The operations pages: server-rendered, usable without JavaScript."""
from __future__ import annotations

from flask import Blueprint, redirect, render_template, request, url_for

from portal_web import views
from portal_web.context import client, page_sizes, portal

bp = Blueprint("pages", __name__)


@bp.get("/")
def dashboard():
    return render_template("dashboard.html", view=views.overview(portal().public, client(),
                                                                 portal().sampler),
                           rates=views.rates(portal().sampler))


@bp.get("/topics")
def topics():
    return render_template("topics.html", view=views.topics(client(), request.args, *page_sizes()))


@bp.get("/topics/new")
def topic_new():
    return render_template("topic_new.html", form={}, error="")


@bp.post("/topics/new")
def topic_create():
    created = views.create_topic(client(), request.form)
    return redirect(url_for("pages.topic", name=created["name"]))


@bp.get("/topics/<name>")
def topic(name: str):
    return render_template("topic.html", topic=views.topic(client(), name, portal().sampler))


@bp.post("/topics/<name>/alter")
def topic_alter(name: str):
    views.alter_topic(client(), name, request.form)
    return redirect(url_for("pages.topic", name=name))


@bp.post("/topics/<name>/delete")
def topic_delete(name: str):
    views.delete_topic(client(), name, request.form.get("confirm", ""))
    return redirect(url_for("pages.topics"))


@bp.get("/brokers")
def brokers():
    return render_template("brokers.html", brokers=[views.plain(b)
                                                    for b in client().list_brokers()])


@bp.get("/groups")
def groups():
    return render_template("groups.html", view=views.paginate(client().list_groups(),
                                                              request.args, *page_sizes()))


@bp.get("/groups/<name>")
def group(name: str):
    return render_template("group.html", group=views.group(client(), name),
                           lag_history=views.lag_history(portal().sampler, name),
                           sampling=views.rates(portal().sampler)["sampling"])


@bp.post("/groups/<name>/reset/preview")
def group_reset_preview(name: str):
    return render_template("group_reset.html",
                           reset=views.reset_offsets(client(), name, request.form, True))


@bp.post("/groups/<name>/reset")
def group_reset(name: str):
    views.reset_offsets(client(), name, request.form, False)
    return redirect(url_for("pages.group", name=name))


@bp.get("/transactions")
def transactions():
    return render_template("transactions.html", view=views.transactions(client(), request.args))


@bp.post("/transactions/<tid>/abort")
def transaction_abort(tid: str):
    client().abort_transaction(tid)
    return redirect(url_for("pages.transactions"))


@bp.get("/audit")
def audit():
    return render_template("audit.html", view=views.audit(client(), request.args))
