"""The server's way to Slurm: the site's settings and a client over the
configured transport, made once per process. Issue 7 makes the transport and
the site configurable; the defaults are the dev cluster's."""
from __future__ import annotations

import threading

from app.models import Org
from slurm.client import SlurmClient
from slurm.jobspec import SlurmSite

_lock = threading.Lock()
_client: SlurmClient | None = None
_accounts_known: set[str] = set()


def slurm_site() -> SlurmSite:
    return SlurmSite()


def slurm_client() -> SlurmClient:
    global _client
    with _lock:
        if _client is None:
            _client = SlurmClient()
        return _client


def ensure_org_account(org: Org) -> None:
    """Each org submits under its own Slurm account; made on first use, then
    remembered for the life of the process."""
    if org.slurm_account in _accounts_known:
        return
    slurm_client().ensure_account(org.slurm_account)
    _accounts_known.add(org.slurm_account)
