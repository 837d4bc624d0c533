"""Configuration from the environment, in one place."""
from __future__ import annotations

import os


def _database_url() -> str | None:
    url = os.environ.get("DATABASE_URL")
    # SQLAlchemy wants the driver named; psycopg 3 is ours.
    if url and url.startswith(("postgres://", "postgresql://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


# A worker's threads (gunicorn_conf.py): long requests of one kind take a quarter at most.
_QUARTER_OF_THREADS = str(max(1, int(os.environ.get("DIV_THREADS", "128")) // 4))

class Config:
    # None: made once and kept in instance/secret_key (create_app).
    SECRET_KEY = os.environ.get("SECRET_KEY")
    # None: SQLite under instance/, decided in create_app once the path is known.
    SQLALCHEMY_DATABASE_URI = _database_url()
    SQLALCHEMY_ENGINE_OPTIONS = {"pool_pre_ping": True}
    # The dashboard's session cookie: never readable by scripts, not sent on
    # cross-site requests, and HTTPS-only where the site is served over TLS.
    SESSION_COOKIE_HTTPONLY = True
    SESSION_COOKIE_SAMESITE = "Lax"
    SESSION_COOKIE_SECURE = os.environ.get("DIV_SECURE_COOKIES", "0") == "1"
    WTF_CSRF_TIME_LIMIT = None   # valid for the session, not an hour
    # Where bytes live (None: instance/data): share/<org>/<volume> holds the
    # volumes, runs/<org>/<run> each run's state folder, blobs/<org> the
    # uploaded code by hash. Every node of the cluster must see the same path.
    DIV_DATA_DIR = os.environ.get("DIV_DATA_DIR")
    # The site's price table (TOML; `flask prices`); None: instance/prices.toml.
    # Without the file, the docs' prices.
    DIV_PRICES_FILE = os.environ.get("DIV_PRICES_FILE")
    # The site's Slurm settings (TOML; `flask site`); None: instance/site.toml.
    # Without the file, the dev cluster's names and Slurm on this host.
    DIV_SITE_FILE = os.environ.get("DIV_SITE_FILE")
    # Seconds between the reconciler's Slurm queries.
    DIV_RECONCILE_INTERVAL = float(os.environ.get("DIV_RECONCILE_INTERVAL", "1.0"))
    # How long after a run is recorded the reconciler waits for its job to
    # show in Slurm before it settles the run as never submitted: longer than
    # any sbatch can take (the transports give up after 60 s; SSH connects
    # within 10 s more). A site with a slower login node raises it.
    DIV_SUBMIT_GRACE = float(os.environ.get("DIV_SUBMIT_GRACE", "120"))
    # How long a partition's MaxTime, read with sinfo, is taken as known.
    DIV_PARTITION_CACHE_SECONDS = float(os.environ.get("DIV_PARTITION_CACHE_SECONDS", "60"))
    # The image S3 transfer runs use where runs are containers (pyxis,
    # apptainer): one with Python and boto3. None: the docs' default image.
    DIV_TRANSFER_IMAGE = os.environ.get("DIV_TRANSFER_IMAGE")
    # Keys that encrypt secrets at rest (Fernet, comma-separated; the first
    # encrypts, all decrypt, so a key can be rotated: `flask rotate-secrets`).
    # None: made once and kept in instance/secrets_key.
    DIV_SECRETS_KEYS = os.environ.get("DIV_SECRETS_KEYS")
    # Brute force: this many failed keys or passwords from one address (or for
    # one username) within the window (seconds) answer 429 until it passes.
    DIV_AUTH_MAX_FAILURES = int(os.environ.get("DIV_AUTH_MAX_FAILURES", "10"))
    DIV_AUTH_WINDOW = int(os.environ.get("DIV_AUTH_WINDOW", "300"))
    # Log followers are held by one thread a worker (app/web/follow_hub.py),
    # at most this many a worker (each is an open connection: a descriptor)
    # and this many of one org's; transfers (uploads, downloads, plain log
    # reads) hold a worker thread each for as long as their client takes, at
    # most 1/4 of DIV_THREADS (128) a worker, so other requests and other
    # orgs always find threads (app/services/site/request_slots.py).
    DIV_FOLLOWERS_PER_WORKER = int(os.environ.get("DIV_FOLLOWERS_PER_WORKER", "512"))
    DIV_FOLLOWERS_PER_ORG = int(os.environ.get("DIV_FOLLOWERS_PER_ORG", "32"))
    DIV_TRANSFERS_PER_WORKER = int(os.environ.get("DIV_TRANSFERS_PER_WORKER", _QUARTER_OF_THREADS))
    DIV_TRANSFERS_PER_ORG = int(os.environ.get("DIV_TRANSFERS_PER_ORG", "12"))
    # Interactive runs' terminals and notebook requests (app/web/run_proxy.py):
    # a thread each while open, a quarter of a worker's at most.
    DIV_INTERACTIVE_PER_WORKER = int(os.environ.get("DIV_INTERACTIVE_PER_WORKER", _QUARTER_OF_THREADS))
    DIV_INTERACTIVE_PER_ORG = int(os.environ.get("DIV_INTERACTIVE_PER_ORG", "16"))
    # A client connection that sends or takes nothing for this long is
    # closed, whatever it was doing (app/web/gunicorn_conf.py, upload_body.py).
    DIV_CLIENT_IDLE_SECONDS = float(os.environ.get("DIV_CLIENT_IDLE_SECONDS", "60"))
    # A JSON body (a manifest of 100,000 files is about 13 MB) is read whole;
    # files and bundles stream, with their own limits (app/services/files/storage.py).
    MAX_CONTENT_LENGTH = int(os.environ.get("DIV_MAX_JSON_BYTES", str(16 * 1024 * 1024)))
    # Runs of one org queued or running at once, at most (a sweep counts each
    # member): every live run is followed each reconciler cycle, for every org.
    DIV_MAX_LIVE_RUNS_PER_ORG = int(os.environ.get("DIV_MAX_LIVE_RUNS_PER_ORG", "2000"))
    # Each org's storage (volumes, code trees and blobs), at most, unless an
    # admin sets the org's own (flask org-quota): 500GB, 2TB, or none.
    DIV_STORAGE_QUOTA = os.environ.get("DIV_STORAGE_QUOTA", "none")
    # How often the reconciler measures each org's storage, at most.
    DIV_STORAGE_MEASURE_SECONDS = float(os.environ.get("DIV_STORAGE_MEASURE_SECONDS", "300"))
    # Schedules of one org, at most (each may fire every minute).
    DIV_MAX_SCHEDULES_PER_ORG = int(os.environ.get("DIV_MAX_SCHEDULES_PER_ORG", "50"))
    # Runs one org may start within Slurm's MinJobAge (300 s: a finished job
    # stays in the cluster's one job table that long, MaxJobCount for all).
    DIV_SUBMIT_WINDOW_SECONDS = int(os.environ.get("DIV_SUBMIT_WINDOW_SECONDS", "300"))
    DIV_MAX_SUBMITS_PER_WINDOW = int(os.environ.get("DIV_MAX_SUBMITS_PER_WINDOW", "2000"))
    # Prometheus scrapes /metrics with this as its bearer token (or a site
    # admin's API key); empty: site admins only.
    DIV_METRICS_TOKEN = os.environ.get("DIV_METRICS_TOKEN", "")
    # How long the Cluster page's view of Slurm is kept: one sinfo and one
    # squeue per worker this often, however many admins watch.
    DIV_CLUSTER_CACHE_SECONDS = float(os.environ.get("DIV_CLUSTER_CACHE_SECONDS", "5"))
    # The dashboard's address as users reach it: notifications link runs there.
    DIV_PUBLIC_URL = os.environ.get("DIV_PUBLIC_URL", "http://127.0.0.1:8000")
    # Email notifications go through the site's SMTP server (none: no email).
    DIV_SMTP_HOST = os.environ.get("DIV_SMTP_HOST", "")
    DIV_SMTP_PORT = int(os.environ.get("DIV_SMTP_PORT", "25"))
    DIV_SMTP_FROM = os.environ.get("DIV_SMTP_FROM", "divergent@localhost")
    DIV_SMTP_USER = os.environ.get("DIV_SMTP_USER", "")
    DIV_SMTP_PASSWORD = os.environ.get("DIV_SMTP_PASSWORD", "")
    DIV_SMTP_STARTTLS = os.environ.get("DIV_SMTP_STARTTLS", "0") == "1"
    # Webhooks reach public addresses only, and these networks (CIDRs,
    # comma-separated) besides: a site's own chat server, say.
    DIV_WEBHOOK_ALLOWED_NETWORKS = os.environ.get("DIV_WEBHOOK_ALLOWED_NETWORKS", "")
    # A failed delivery is tried again after 1, 2, 4, ... times this many
    # seconds, at most this many times in all.
    DIV_NOTIFY_RETRY_SECONDS = float(os.environ.get("DIV_NOTIFY_RETRY_SECONDS", "30"))
    DIV_NOTIFY_MAX_ATTEMPTS = int(os.environ.get("DIV_NOTIFY_MAX_ATTEMPTS", "8"))
    # Behind this many reverse proxies, the client's address is taken from
    # X-Forwarded-For (0: the connection's own address).
    DIV_PROXY_HOPS = int(os.environ.get("DIV_PROXY_HOPS", "0"))
    # Single sign-on through the site's OpenID Connect provider
    # (docs/admins/sso.md): off without an issuer. Its client's secret, like
    # the SMTP password, comes from the env file (root:divergent, 0640).
    DIV_OIDC_ISSUER = os.environ.get("DIV_OIDC_ISSUER", "")
    DIV_OIDC_CLIENT_ID = os.environ.get("DIV_OIDC_CLIENT_ID", "divergent")
    DIV_OIDC_CLIENT_SECRET = os.environ.get("DIV_OIDC_CLIENT_SECRET", "")
    DIV_OIDC_NAME = os.environ.get("DIV_OIDC_NAME", "single sign-on")
    # The claim whose values name a user's org and role: PREFIX<org> for a
    # member, PREFIX<org>:org_admin for an org's admin.
    DIV_OIDC_CLAIM = os.environ.get("DIV_OIDC_CLAIM", "groups")
    DIV_OIDC_GROUP_PREFIX = os.environ.get("DIV_OIDC_GROUP_PREFIX", "divergent:")
    # A key that `div login --sso` gets stops working after this many days.
    DIV_OIDC_KEY_DAYS = int(os.environ.get("DIV_OIDC_KEY_DAYS", "30"))
