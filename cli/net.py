"""How `div` reaches the API over the network, as every HTTP client does:
TLS verified against the system's CAs, or the bundle in DIV_CA_BUNDLE (then
REQUESTS_CA_BUNDLE, SSL_CERT_FILE); HTTPS_PROXY / HTTP_PROXY for a proxy,
NO_PROXY for the hosts that bypass it. urllib's proxy helpers are imported
only when a proxy variable is set: `div` starts for every run."""
from __future__ import annotations

import os
import ssl
from urllib.parse import urlsplit

CA_VARIABLES = ("DIV_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


def tls_context() -> ssl.SSLContext:
    bundle = next((os.environ[v] for v in CA_VARIABLES if os.environ.get(v)), None)
    return ssl.create_default_context(cafile=bundle)


def proxy_for(scheme: str, host: str) -> tuple[str, int] | None:
    """The proxy's host and port for a request to `host`, or None."""
    if not any(key.lower() in ("https_proxy", "http_proxy", "all_proxy") for key in os.environ):
        return None
    import urllib.request
    proxy = urllib.request.getproxies_environment().get(scheme)
    # Undocumented (urllib.request has it all the same), so typeshed lacks it.
    if not proxy or urllib.request.proxy_bypass_environment(host):  # type: ignore[attr-defined]
        return None
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if not parts.hostname:      # "http://:3128": said as a bad port is, not a TypeError later
        raise ValueError(f"no host in the proxy URL {proxy!r}")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
