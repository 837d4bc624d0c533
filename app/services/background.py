"""Work a long-running process does on a thread of its own, a pass every
few seconds, so that what may take long (a receiver that hangs, an org's
schedules, measuring storage) never holds up anything else: each pass in
the app's context, with a session of its own, its failures logged and the
next pass tried anyway."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from divergent.app.extensions import db

log = logging.getLogger("divergent.background")


def run_every(app, name: str, every: float, work: Callable[[], object],
              stop: threading.Event) -> threading.Thread:
    def loop():
        with app.app_context():
            while not stop.is_set():
                try:
                    work()
                except Exception:   # the database gone, say: the next pass tries again
                    db.session.rollback()
                    log.exception("%s: a pass failed", name)
                finally:
                    db.session.remove()
                stop.wait(every)
    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread
