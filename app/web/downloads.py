"""A volume's file as an HTTP response, sent from the file storage opened
safely (not from a path the server would open again): with Content-Length,
Last-Modified and Range requests, so an interrupted download resumes, and
the whole file's sha256 (X-Div-Sha256), so the client keeps only what is
whole."""
from __future__ import annotations

import posixpath

from flask import request, send_file

from divergent.app.models import Org
from divergent.app.services.files.storage import open_for_download
from divergent.terms import shown


def send_volume_file(org: Org, volume: str, path: str, as_attachment: bool = False):
    file, info, sha = open_for_download(org, volume, path)
    response = send_file(file, mimetype="application/octet-stream", as_attachment=as_attachment,
                         download_name=shown(posixpath.basename(path.rstrip("/"))) or None,
                         conditional=False, etag=False)
    response.content_length = info.st_size
    response.last_modified = info.st_mtime
    response.headers["X-Div-Sha256"] = sha
    return response.make_conditional(request.environ, accept_ranges=True,
                                     complete_length=info.st_size)
