"""The server's way into an interactive run (app/web/run_proxy.py,
app/dashboard/interactive.py) against a real HTTP server standing in for
the run's Jupyter: what the run is sent (its own token, never the user's key
or this site's cookies), what comes back (never a cookie of the run's), who
reaches it (the org's keys; in a browser, its owner alone, from this site's
own pages), and where (the address the site's settings give, never one a
request names). The real notebook and terminal: tests/test_interactive.py."""
from __future__ import annotations

import json
import socket
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

import pytest

from divergent.app.extensions import db
from divergent.app.models import Project, Run
from divergent.app.services.accounts.keys import create_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.accounts.passwords import set_password
from divergent.app.services.accounts.secrets import seal
from divergent.app.services.errors import NotFound
from divergent.app.services.runs.interactive import Upstream, upstream
from divergent.app.services.site.interactive import (
    InteractiveSettings,
    InteractiveSettingsError,
    interactive_settings,
)
from divergent.app.services.site.settings import load_site, save_site
from divergent.slurm.script import INTERACTIVE_TOKEN
from tests.test_dashboard import csrf_token, hash_once

PASSWORD = "correct horse battery"
TOKEN = "the-runs-own-token"


class Recorder(BaseHTTPRequestHandler):
    """Answers every request with the headers it got, and tries to set a cookie."""

    seen: list[dict] = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        Recorder.seen.append({"path": self.path, "headers": dict(self.headers),
                              "body": body.decode()})
        payload = json.dumps({"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "session=from-the-run; Path=/")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def run_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Recorder.seen = []
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture
def keys(app, run_server):
    """acme's alice (who started the notebook) and carol, other's bob; the
    run's upstream is the recorder."""
    with app.app_context():
        made = {}
        for org_name, username in (("acme", "alice"), ("acme", "carol"), ("other", "bob")):
            user = get_or_create_user(get_or_create_org(org_name), username)
            with mock.patch("divergent.app.services.accounts.passwords.generate_password_hash",
                            hash_once):
                set_password(user, PASSWORD)
            made[username] = (user, create_key(user))
        alice = made["alice"][0]
        project = Project(org_id=alice.org_id, name="nb")
        db.session.add(project)
        db.session.flush()
        db.session.add(Run(org_id=alice.org_id, project_id=project.id, user_id=alice.id,
                           name="nb-1", kind="notebook", status="running", nodes="node1",
                           slurm_job_id="4660", gpu_type="cpu", gpus=1, cpus=1, memory_gib=2,
                           image="img", command="jupyter lab", rate_micros_per_hour=1,
                           secrets_sealed=seal(json.dumps({INTERACTIVE_TOKEN: TOKEN}))))
        db.session.commit()
        site = load_site()
        save_site(replace(site, interactive=replace(site.interactive, notebook_host="nb.test")))
    reached = Upstream("127.0.0.1", run_server, TOKEN)
    with mock.patch("divergent.app.web.run_proxy.upstream", lambda run: reached):
        yield {name: key for name, (_, key) in made.items()}


def signed_in(app, username):
    client = app.test_client()
    client.post("/login", data={"username": username, "password": PASSWORD,
                                "csrf_token": csrf_token(client)})
    return client


def test_the_run_gets_its_own_token_and_none_of_the_users_credentials(app, keys):
    client = app.test_client()
    client.set_cookie("session", "the-users-session")
    answer = client.post("/runs/nb-1/notebook/api/contents?type=file", data=b'{"a": 1}',
                         headers={"Authorization": f"Bearer {keys['alice']}",
                                  "X-Forwarded-Host": "evil.example", "Content-Type": "application/json"})
    assert answer.status_code == 200 and answer.get_json() == {"ok": True}
    assert "Set-Cookie" not in answer.headers          # a run never sets this site's cookies
    got = Recorder.seen[-1]
    assert got["path"] == "/runs/nb-1/notebook/api/contents?type=file"
    assert got["body"] == '{"a": 1}'
    headers = {k.lower(): v for k, v in got["headers"].items()}
    assert headers["authorization"] == f"token {TOKEN}"
    assert headers["x-divergent-token"] == TOKEN
    assert "cookie" not in headers and "x-forwarded-host" not in headers
    assert keys["alice"] not in json.dumps(got)


def test_another_orgs_key_and_no_credential_reach_nothing(app, keys):
    client = app.test_client()
    theirs = client.get("/runs/nb-1/notebook/api/kernelspecs",
                        headers={"Authorization": f"Bearer {keys['bob']}"})
    assert theirs.status_code == 404
    assert client.get("/runs/nb-1/notebook/api/kernelspecs",
                      headers={"Authorization": "Bearer div_wrong"}).status_code == 401
    nobody = client.get("/runs/nb-1/notebook/lab")
    assert nobody.status_code == 302 and "/login" in nobody.headers["Location"]
    assert Recorder.seen == []


NB = "http://nb.test"


def test_in_a_browser_a_notebook_opens_for_its_owner_on_the_notebook_host_alone(app, keys):
    owner, member = signed_in(app, "alice"), signed_in(app, "carol")
    # Never on the dashboard's origin: a one-minute ticket to the notebook host.
    sent = owner.get("/runs/nb-1/notebook/lab")
    assert sent.status_code == 302, sent.data
    assert sent.headers["Location"].startswith(f"{NB}/runs/nb-1/notebook-enter?ticket=")
    assert Recorder.seen == []
    # Another member's session never runs the run's pages (their scripts act in it).
    assert member.get("/runs/nb-1/notebook/lab").status_code == 403
    assert owner.post("/runs/nb-1/notebook/api/sessions", data=b"{}",
                      headers={"Origin": "http://localhost"}).status_code == 403
    # The notebook host trades the ticket for a cookie of its own, for this run's path.
    browser = app.test_client()
    entered = browser.get(sent.headers["Location"])
    assert entered.status_code == 302 and entered.headers["Location"] == "/runs/nb-1/notebook/lab"
    cookie = browser.get_cookie("div_notebook", domain="nb.test", path="/runs/nb-1/notebook/")
    assert cookie is not None and cookie.http_only
    assert browser.get("/runs/nb-1/notebook/lab", base_url=NB).status_code == 200
    # From the notebook host's own pages alone.
    assert browser.post("/runs/nb-1/notebook/api/sessions", data=b"{}", base_url=NB,
                        headers={"Origin": NB}).status_code == 200
    for origin in ("http://localhost", "https://evil.example"):
        assert browser.post("/runs/nb-1/notebook/api/sessions", data=b"{}", base_url=NB,
                            headers={"Origin": origin}).status_code == 403
    seen = len(Recorder.seen)
    assert browser.get("/runs/nb-1/notebook/api/kernels/x/channels", base_url=NB, headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Origin": "https://evil.example"}).status_code == 403
    assert len(Recorder.seen) == seen
    # The notebook host serves notebooks and nothing else: no dashboard, no API.
    for path in ("/", "/settings", "/api/v1/whoami", "/runs/nb-1", "/static/dashboard.js"):
        assert browser.get(path, base_url=NB).status_code == 404, path
    # A ticket is its owner's, for its run, for a minute; a cookie likewise.
    stranger = app.test_client()
    assert stranger.get("/runs/nb-1/notebook/lab", base_url=NB).status_code == 401
    assert stranger.get("/runs/nb-1/notebook-enter?ticket=forged", base_url=NB).status_code == 403
    # A member's key reaches it (div, scripts): keys ride on no page.
    assert app.test_client().get("/runs/nb-1/notebook/lab", headers={
        "Authorization": f"Bearer {keys['carol']}"}).status_code == 200


def test_the_address_is_the_sites_for_the_jobs_node_and_never_a_requests(app):
    settings = InteractiveSettings(job_subnets={"node1": "10.81"})
    assert settings.job_address("node1", 0x1234) == "10.81.18.52"
    assert settings.job_address("node9", 0x1234) is None
    with pytest.raises(InteractiveSettingsError):
        interactive_settings({"job_subnets": {"node1": "10.81.0.0/16; rm"}})
    with pytest.raises(InteractiveSettingsError):
        interactive_settings({"port": 22})
    run = Run(name="nb", kind="notebook", status="running", nodes="node9", slurm_job_id="5")
    with app.app_context(), pytest.raises(NotFound):
        upstream(run)
    batch = Run(name="b", kind="batch", status="running", nodes="node1", slurm_job_id="5")
    with app.app_context(), pytest.raises(NotFound):
        upstream(batch)


def test_a_runs_answer_to_the_upgrade_is_made_again_or_refused():
    from divergent.app.web.run_proxy import _answer_head
    for sent, made in (
            (b"HTTP/1.1 101\r\nSet-Cookie: session=planted\r\nUpgrade: websocket\nSet-Cookie: x=y\r\n"
             b"\r\nafter", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nafter"),
            (b"HTTP/1.1 1010 x\r\nSet-Cookie: session=planted\r\n\r\n", None),
            (b"HTTP/1.1 200 OK\r\n\r\n", None)):
        ours, theirs = socket.socketpair()
        theirs.sendall(sent)
        assert _answer_head(ours) == made
        ours.close()
        theirs.close()


def test_sweeps_and_schedules_start_batch_runs_alone(app, keys):
    with app.app_context():
        site = load_site()
        save_site(replace(site, interactive=replace(site.interactive,
                                                    job_subnets={"node1": "10.81"})))
    client = app.test_client()
    headers = {"Authorization": f"Bearer {keys['alice']}"}
    for path, body in (("/api/v1/sweeps/check", {"command": "true", "project": "p", "gpu": "cpu",
                                                   "kind": "notebook", "sweep": {"A": ["1"]}}),
                       ("/api/v1/schedules/check", {"cron": "0 * * * *", "run": {
                           "command": "", "project": "p", "gpu": "cpu", "kind": "shell"}})):
        refused = client.post(path, json=body, headers=headers)
        assert refused.status_code == 400 and "batch runs only" in refused.get_json()["error"]
