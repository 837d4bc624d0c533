"""Headers every answer carries, so the dashboard behaves like a hardened
web app: no framing (clickjacking), no MIME sniffing, and a Content Security
Policy under which only this site's own scripts run. The vendored htmx and
uPlot work under it: htmx's indicator styles are off (base.html's
htmx-config) and no page has an inline script or handler."""
from __future__ import annotations

from flask import Flask, Response

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")

HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def init_app(app: Flask) -> None:
    @app.after_request
    def add_headers(response: Response) -> Response:
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response
