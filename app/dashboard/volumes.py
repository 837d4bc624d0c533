"""The Volumes pages: the org's volumes with size and file count, folders
to browse, files to download."""
from __future__ import annotations

from flask import g, render_template

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import login_required
from divergent.app.services.files.quota import usage_json
from divergent.app.services.files.storage import list_path, volume_summaries
from divergent.app.services.files.volumes import check_volume_name
from divergent.app.services.site.request_slots import TRANSFER
from divergent.app.web.byte_paths import path_arg
from divergent.app.web.downloads import send_volume_file
from divergent.app.web.slots import holding_slot


@bp.get("/volumes")
@login_required
def volumes():
    return render_template("volumes.html", volumes=volume_summaries(g.user.org),
                           storage=usage_json(g.user.org))


@bp.get("/volumes/<volume>")
@login_required
@holding_slot(TRANSFER)
def volume_folder(volume: str):
    path = path_arg()
    top, entries = list_path(g.user.org, check_volume_name(volume), path)
    if top.type == "file":
        return send_volume_file(g.user.org, volume, path, as_attachment=True)
    crumbs, so_far = [], []
    for part in filter(None, top.path.split("/")):
        so_far.append(part)
        crumbs.append((part, "/".join(so_far)))
    return render_template("volume.html", volume=volume, top=top, entries=entries, crumbs=crumbs)
