"""`flask reconcile`: the reconciler (app/reconciler.py), as a loop or one
cycle."""
from __future__ import annotations

import logging
import signal
import threading

import click
from flask import current_app

from divergent.app.admin import admin_command


@admin_command("reconcile")
@click.option("--interval", type=float, default=None,
              help="Seconds between cycles (default: DIV_RECONCILE_INTERVAL, 1).")
@click.option("--once", is_flag=True, help="Run one cycle and exit.")
def reconcile(interval: float | None, once: bool) -> None:
    """Follow Slurm and settle runs, and send notifications, until stopped."""
    from divergent.app.reconciler import fire_schedules, measure_storage, reconcile_alone, run_forever
    from divergent.app.services.background import run_every
    from divergent.app.services.notify.outbox import run_sender
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if once:
        changed = reconcile_alone()
        if changed is None:
            raise click.ClickException("another reconciler is acting; nothing done")
        click.echo(f"{changed} runs changed")
        return
    # A plain `kill` (or Ctrl-C) asks the loop to end between steps rather
    # than raising inside a transaction, so it always hands its lease back
    # and a restarted reconciler acts at once instead of after the TTL.
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # Notifications go out, schedules fire and storage is measured on
    # threads of their own: a receiver that hangs or an org with many
    # schedules never holds up a cycle.
    app = current_app._get_current_object()  # type: ignore[attr-defined]  # a LocalProxy, typed as a Flask
    interval = interval or current_app.config["DIV_RECONCILE_INTERVAL"]
    beside = [run_sender(app, stop), run_every(app, "schedules", max(1.0, interval), fire_schedules, stop),
              run_every(app, "storage", 1.0, measure_storage, stop)]
    try:
        run_forever(interval, stop=stop)
    finally:
        stop.set()
        for thread in beside:
            thread.join(timeout=15)


commands = [reconcile]
