"""The org's notification channels: add (a webhook or an email address, the
events it hears of, optionally one schedule's runs alone), list (with each
one's last delivery and error), remove."""
from __future__ import annotations

from flask import g, jsonify, request

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.services.errors import Invalid
from divergent.app.services.notify.notices import add_channel, channel_json, channels_of, remove_channel


@bp.get("/notifications")
@token_required
def notifications_list():
    return jsonify(channels=[channel_json(row) for row in channels_of(g.user.org)])


@bp.post("/notifications")
@token_required
def notifications_add():
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise Invalid('send {"webhook": "https://..."} or {"email": "..."}, '
                      'with "on": [...] if not the default events')
    row = add_channel(g.user, webhook=body.get("webhook"), email=body.get("email"),
                      events=body.get("on"), schedule=body.get("schedule"))
    return jsonify(channel=channel_json(row)), 201


@bp.delete("/notifications/<channel_id>")
@token_required
def notifications_remove(channel_id: str):
    remove_channel(g.user.org, channel_id)
    return jsonify(deleted=channel_id)
