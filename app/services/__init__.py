"""Plain functions over the models: no request objects, every query scoped
by org. One package per domain, each importing only the ones listed before
it (tests/test_layers.py holds the order):

  images/    container images: names as Docker writes them, the site's
             registries and mirror, a name resolved to its digest
  site/      the site's settings, how every process reaches its Slurm, and
             the gauges and request slots all server processes share
  money/     prices, the catalog the site sells, spend per month, bills
  files/     volumes, their quota, uploaded code, files in and out
  accounts/  orgs, users, keys, passwords, secrets, offboarding
  notify/    notifications: what is sent to whom, the outbox, delivery
  cluster/   the cluster as admins see it, `flask doctor`, /metrics
  runs/      runs from request to settlement: submit, list, stop, logs,
             metrics, checks, sweeps, schedules, S3 transfers, the image
             each run is resolved to

Beside them, the few modules every domain uses: errors, rows, durable,
instance_files, background and leases. What a user did wrong is a
ServiceError subclass (errors.py), which app/web/errors.py answers as JSON
or a page and app/admin/ as one line; ValueError stays inside slurm/ and
the parsers that call it."""
