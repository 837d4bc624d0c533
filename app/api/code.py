"""Code upload: a manifest in, the missing blobs named, the blobs sent."""
from __future__ import annotations

from flask import g, jsonify, request

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.services.errors import Invalid
from divergent.app.services.files.code import MissingBlobs, lay_out_tree, parse_manifest, store_blob
from divergent.app.services.files.storage import MAX_FILE_SECONDS
from divergent.app.services.files.volumes import check_volume_name
from divergent.app.services.site.request_slots import TRANSFER
from divergent.app.web.request_args import STREAMED, json_object
from divergent.app.web.slots import holding_slot
from divergent.app.web.upload_body import upload_body


@bp.post("/code/trees")
@token_required
def code_tree():
    """Lays out the manifest's tree in the volume, or names the blobs to send first."""
    body = json_object()
    volume = check_volume_name(body.get("volume"))
    entries = parse_manifest(body.get("files"))
    try:
        tree = lay_out_tree(g.user.org, volume, entries)
    except MissingBlobs as exc:
        return jsonify(missing=exc.missing)
    return jsonify(ref=tree.ref, files=tree.files, bytes=tree.bytes)


@bp.put("/code/blobs/<sha>")
@token_required
@holding_slot(TRANSFER)
def code_blob(sha: str):
    request.max_content_length = STREAMED   # read within the storage limits
    if request.content_length is None:
        raise Invalid("send the blob with a Content-Length")
    store_blob(g.user.org, sha, upload_body(request, MAX_FILE_SECONDS), request.content_length)
    return jsonify(stored=sha), 201
