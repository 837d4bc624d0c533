"""The Volumes pages: the org's volumes with size and file count, folders
to browse, files to download."""
from __future__ import annotations

from flask import g, render_template, request, send_file

from app.dashboard import bp
from app.dashboard.auth import login_required
from app.services.storage import file_for_download, list_path, volume_summaries
from app.services.volumes import check_volume_name


@bp.get("/volumes")
@login_required
def volumes():
    return render_template("volumes.html", volumes=volume_summaries(g.user.org))


@bp.get("/volumes/<volume>")
@login_required
def volume_folder(volume: str):
    path = request.args.get("path", "")
    top, entries = list_path(g.user.org, check_volume_name(volume), path)
    if top.type == "file":
        return send_file(file_for_download(g.user.org, volume, path), as_attachment=True,
                         conditional=True)
    crumbs, so_far = [], []
    for part in filter(None, top.path.split("/")):
        so_far.append(part)
        crumbs.append((part, "/".join(so_far)))
    return render_template("volume.html", volume=volume, top=top, entries=entries, crumbs=crumbs)
