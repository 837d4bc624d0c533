"""A real OpenID Connect provider on 127.0.0.1 for the single sign-on
tests: tests/oidc/provider.mjs (node-oidc-provider, which `make test`
installs in /var/cache/divergent/oidc-provider) with its users' groups."""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.sshd import free_port, wait_for_port

INSTALLED = Path(os.environ.get("DIV_OIDC_PROVIDER", "/var/cache/divergent/oidc-provider"))
SCRIPT = Path(__file__).resolve().parent / "oidc" / "provider.mjs"


@dataclass
class Provider:
    issuer: str
    client_id: str
    client_secret: str

    def settings(self, name: str = "Example SSO") -> dict[str, str]:
        """The server's settings for it (the env file's, on a site)."""
        return {"DIV_OIDC_ISSUER": self.issuer, "DIV_OIDC_CLIENT_ID": self.client_id,
                "DIV_OIDC_CLIENT_SECRET": self.client_secret, "DIV_OIDC_NAME": name}


@contextlib.contextmanager
def running_provider(users: dict[str, list[str]], redirect_uris: list[str]) -> Iterator[Provider]:
    """The provider with `users` (login: their groups), for this client's
    redirect URIs; stopped when the block ends."""
    assert (INSTALLED / "node_modules" / "oidc-provider").is_dir(), \
        f"no node-oidc-provider in {INSTALLED}: make test-tools installs it"
    # ESM resolves packages from the script's folder: it runs beside them.
    script = INSTALLED / f"provider-{os.getpid()}.mjs"
    shutil.copy(SCRIPT, script)
    port, secret = free_port(), secrets.token_urlsafe(24)
    env = {**os.environ, "PORT": str(port), "OIDC_USERS": json.dumps(users),
           "CLIENT_ID": "divergent", "CLIENT_SECRET": secret,
           "REDIRECT_URIS": json.dumps(redirect_uris), "NODE_ENV": "development"}
    log = open(INSTALLED / f"provider-{os.getpid()}.log", "w")
    proc = subprocess.Popen(["node", str(script)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port)
        yield Provider(f"http://127.0.0.1:{port}", "divergent", secret)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        script.unlink(missing_ok=True)
        Path(log.name).unlink(missing_ok=True)
