"""The Cluster page (site admins): nodes and GPUs per type, used and free,
the runs every org has waiting, the price table and the site's Slurm
settings."""
from __future__ import annotations

from flask import render_template

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import site_admin_required
from divergent.app.services.cluster.capacity import cluster_nodes, gpu_capacity
from divergent.app.services.cluster.gpu_use import by_type, gpus_in_use
from divergent.app.services.errors import Unavailable
from divergent.app.services.money.pricing import current_prices, format_usd
from divergent.app.services.runs.listing import queued_runs
from divergent.app.services.site.slurm_access import current_site


@bp.get("/cluster")
@site_admin_required
def cluster():
    try:
        nodes, slurm_problem = cluster_nodes(), None
    except Unavailable as exc:
        # The queue and the prices are still worth seeing.
        nodes, slurm_problem = [], exc.message
    queued, queued_count = queued_runs()
    site = current_site()
    return render_template("cluster.html", nodes=nodes, gpus=gpu_capacity(nodes, site.slurm),
                           slurm_problem=slurm_problem, queued=queued,
                           queued_count=queued_count, prices=current_prices(),
                           site=site, usd=format_usd, gpu_use=(use := gpus_in_use()),
                           gpu_totals=by_type(use))
