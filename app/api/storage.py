"""Volumes and their files: list, plan an upload, upload (one file, or many
small ones in a tar bundle), download (with Range), delete."""
from __future__ import annotations

from flask import g, jsonify, request

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.services.errors import Invalid
from divergent.app.services.files.quota import usage_json
from divergent.app.services.files.storage import (
    MAX_FILE_SECONDS,
    delete,
    delete_volume,
    files_to_send,
    list_path,
    store_bundle,
    store_file,
    volume_summaries,
)
from divergent.app.services.files.volumes import check_volume_name
from divergent.app.services.site.request_slots import TRANSFER
from divergent.app.web.byte_paths import path_arg
from divergent.app.web.downloads import send_volume_file
from divergent.app.web.request_args import STREAMED, json_object
from divergent.app.web.slots import holding_slot
from divergent.app.web.upload_body import bounded_stream, upload_body


@bp.get("/volumes")
@token_required
def volumes_list():
    return jsonify(volumes=volume_summaries(g.user.org), storage=usage_json(g.user.org))


@bp.delete("/volumes/<volume>")
@token_required
def volumes_delete(volume: str):
    delete_volume(g.user.org, volume)
    return jsonify(deleted=volume)


@bp.get("/volumes/<volume>/ls")
@token_required
def volumes_ls(volume: str):
    top, entries = list_path(g.user.org, check_volume_name(volume), path_arg(),
                             recursive=request.args.get("recursive") == "1")
    return jsonify(entry=top.as_json(), entries=[e.as_json() for e in entries])


@bp.post("/volumes/<volume>/plan")
@token_required
def volumes_plan(volume: str):
    """Which of these files ({path, size, sha256}) to send: the others are
    there already. Creates the volume."""
    body = json_object()
    return jsonify(send=files_to_send(g.user.org, volume, body.get("files")))


@bp.put("/volumes/<volume>/files")
@token_required
@holding_slot(TRANSFER)
def volumes_put_file(volume: str):
    request.max_content_length = STREAMED   # read within the storage limits
    sha = request.headers.get("X-Div-Sha256", "")
    if request.content_length is None:
        raise Invalid("send the file with a Content-Length")
    store_file(g.user.org, check_volume_name(volume), path_arg(),
               upload_body(request, MAX_FILE_SECONDS), request.content_length, sha)
    return jsonify(stored=path_arg()), 201


@bp.post("/volumes/<volume>/bundle")
@token_required
@holding_slot(TRANSFER)
def volumes_put_bundle(volume: str):
    request.max_content_length = STREAMED   # read within MAX_BUNDLE_BYTES
    stored = store_bundle(g.user.org, check_volume_name(volume),
                          bounded_stream(request, MAX_FILE_SECONDS), request.content_length)
    return jsonify(stored=stored), 201


@bp.get("/volumes/<volume>/files")
@token_required
@holding_slot(TRANSFER)
def volumes_get_file(volume: str):
    return send_volume_file(g.user.org, check_volume_name(volume), path_arg())


@bp.delete("/volumes/<volume>/files")
@token_required
def volumes_delete_file(volume: str):
    delete(g.user.org, check_volume_name(volume), path_arg())
    return jsonify(deleted=path_arg())
