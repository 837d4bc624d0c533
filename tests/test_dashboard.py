"""The dashboard through Flask's test client: sign-in, CSRF, org scoping,
the runs list (filters, keyset pages, the HTMX partial) and a run's page.
(Issue 6 adds the live log, Telemetry, volumes, spend and Chromium.)"""
from __future__ import annotations

import functools
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import pytest
from werkzeug.security import generate_password_hash

from divergent.app.extensions import db
from divergent.app.models import Project, Run, User
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.accounts.passwords import set_password

PASSWORD = "correct horse battery"


# scrypt costs a tenth of a second a time, by design: the fixture's users
# get PASSWORD hashed once for the whole module (sign-in still checks it).
hash_once = functools.cache(generate_password_hash)


@pytest.fixture
def app(app):
    """Two orgs, one with 60 runs; yielded outside the app context."""
    with app.app_context():
        for org_name, username, runs in (("acme", "alice", 60), ("other", "bob", 1)):
            org = get_or_create_org(org_name)
            user = get_or_create_user(org, username)
            with mock.patch("divergent.app.services.accounts.passwords.generate_password_hash", hash_once):
                set_password(user, PASSWORD)
            project = Project(org_id=org.id, name=f"{org_name}-proj")
            db.session.add(project)
            db.session.flush()
            start = datetime(2026, 11, 1, tzinfo=UTC)
            for i in range(runs):
                db.session.add(Run(org_id=org.id, project_id=project.id, user_id=user.id,
                                   name=f"{username}-{i:03d}", gpu_type="h100" if i % 2 else "cpu",
                                   gpus=1, cpus=1, memory_gib=8, image="img", command="true",
                                   status="succeeded" if i % 3 else "failed",
                                   env={"LR": "3e-4"}, checks=[{"check": "exit_code==0",
                                                                "verdict": "passed", "value": 0}],
                                   rate_micros_per_hour=4_800_000, cost_micros=80_000,
                                   created_at=start + timedelta(minutes=i)))
        db.session.commit()
    return app


def csrf_token(client, path="/login") -> str:
    page = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)


def sign_in(client, username="alice", password=PASSWORD, next_path=""):
    token = csrf_token(client)
    return client.post(f"/login{next_path}", data={"username": username, "password": password,
                                                  "csrf_token": token})


def test_pages_need_a_signed_in_user(app):
    client = app.test_client()
    answer = client.get("/runs/alice-001")
    assert answer.status_code == 302 and answer.location.endswith("/login?next=/runs/alice-001")


def test_a_wrong_password_is_refused(app):
    answer = sign_in(app.test_client(), password="wrong password!")
    assert answer.status_code == 401 and "Wrong username or password" in answer.get_data(as_text=True)
    assert sign_in(app.test_client(), username="nobody").status_code == 401


def test_forms_without_the_csrf_token_are_refused(app):
    client = app.test_client()
    answer = client.post("/login", data={"username": "alice", "password": PASSWORD})
    assert answer.status_code == 400
    sign_in(client)
    assert client.post("/logout").status_code == 400          # no token: still signed in
    assert client.get("/").status_code == 200
    token = csrf_token(client, "/")
    assert client.post("/logout", headers={"X-CSRFToken": token}).status_code == 302
    assert client.get("/").status_code == 302


def test_sign_in_sets_a_safe_cookie_and_never_redirects_off_site(app):
    client = app.test_client()
    answer = sign_in(client, next_path="?next=//evil.example/x")
    assert answer.status_code == 302 and answer.location == "/"
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie


def test_the_runs_page_shows_the_orgs_runs_newest_first_in_keyset_pages(app):
    client = app.test_client()
    sign_in(client)
    first = client.get("/").get_data(as_text=True)
    names = re.findall(r'href="/runs/([\w-]+)"', first)
    assert names[:2] == ["alice-059", "alice-058"] and len(names) == 50
    assert "bob-" not in first
    more = re.search(r'href="(/\?before=\d+)"', first).group(1)
    second = re.findall(r'href="/runs/([\w-]+)"', client.get(more).get_data(as_text=True))
    assert second == [f"alice-{i:03d}" for i in range(9, -1, -1)]
    failed = client.get("/?status=failed&gpu=cpu").get_data(as_text=True)
    assert set(re.findall(r'href="/runs/([\w-]+)"', failed)) == {
        f"alice-{i:03d}" for i in range(60) if i % 3 == 0 and i % 2 == 0}
    # Status as a word and a mark, not colour alone.
    assert "✓ succeeded" in first and "✗ failed" in first


def test_a_run_page_names_its_mounts_and_why_it_never_started(app):
    """A run whose bucket copy failed: its mounts, each linked to the copy's
    own page, and the last line saying why it did not start."""
    with app.app_context():
        run = db.session.execute(db.select(Run).filter_by(name="alice-005")).scalar_one()
        copy = db.session.execute(db.select(Run).filter_by(name="alice-003")).scalar_one()
        run.status, run.started_at, copy.status = "canceled", None, "failed"
        run.mounts = [{"url": "s3://datasets/eval", "path": "/mnt/evalset", "copy": "alice-003"}]
        db.session.commit()
    client = app.test_client()
    sign_in(client)
    page = client.get("/runs/alice-005").get_data(as_text=True)
    assert "<code>/mnt/evalset</code>" in page and "<code>s3://datasets/eval</code>" in page
    assert '<a href="/runs/alice-003">alice-003</a>' in page
    assert ("alice-005 did not start: the copy of s3://datasets/eval into /mnt/evalset "
            "(alice-003) did not succeed, and spent $0.08") in page


def test_htmx_polling_gets_the_table_alone(app):
    client = app.test_client()
    sign_in(client)
    partial = client.get("/", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert partial.lstrip().startswith('<div id="runs-table"') and "<html" not in partial


def test_a_run_page_and_another_orgs_run_is_a_404(app):
    client = app.test_client()
    sign_in(client)
    page = client.get("/runs/alice-003").get_data(as_text=True)
    assert "alice-003 H100 $4.80/h no spend limit" in page
    assert "3e-4" in page and "exit_code==0" in page and "passed" in page
    missing = client.get("/runs/bob-000")
    assert missing.status_code == 404 and "no run named" in missing.get_data(as_text=True)


def test_the_vendored_scripts_are_served_locally(app):
    client = app.test_client()
    page = client.get("/login").get_data(as_text=True)
    for src in re.findall(r'src="([^"]+)"', page):
        assert src.startswith("/static/") and client.get(src).status_code == 200


def write_log(app, name: str, stdout: bytes, stderr: bytes) -> None:
    folder = Path(app.config["DIV_DATA_DIR"]) / "runs" / "acme" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout").write_bytes(stdout)
    (folder / "stderr").write_bytes(stderr)


def test_the_run_page_shows_the_logs_tail_with_stderr_marked(app):
    lines = b"".join(b"line %06d\n" % i for i in range(20_000))   # 220 KB
    write_log(app, "alice-004", lines, b"warning <b>\n")
    client = app.test_client()
    sign_in(client)
    page = client.get("/runs/alice-004").get_data(as_text=True)
    shown = re.search(r'<span class="log-stdout" >(.*?)</span>', page, re.S).group(1)
    assert shown.startswith("line ") and shown.endswith("line 019999\n")   # a whole first line
    assert len(shown) <= 64 * 1024
    assert '<span class="log-stderr" title="stderr">warning &lt;b&gt;\n</span>' in page
    assert 'id="log-poller"' not in page          # an ended run: nothing to follow


def test_a_long_log_pages_backwards_from_the_tail(app):
    lines = b"".join(b"line %06d\n" % i for i in range(20_000))   # 240 KB, 12 bytes a line
    write_log(app, "alice-006", lines, b"")
    client = app.test_client()
    sign_in(client)
    page = client.get("/runs/alice-006").get_data(as_text=True)
    link = re.search(r'id="log-earlier" class="button" href="([^"]+)"', page).group(1)
    seen = [re.search(r'<span class="log-stdout" >(.*?)</span>', page, re.S).group(1)]
    while link:
        swap = client.get(link.replace("&amp;", "&"), headers={"HX-Request": "true"})
        text = swap.get_data(as_text=True)
        seen.insert(0, re.search(r'hx-swap-oob="afterbegin:#log"><span class="log-stdout" >'
                                 r'(.*?)</span>', text, re.S).group(1))
        found = re.search(r'id="log-earlier" class="button" href="([^"]+)"', text)
        link = found.group(1) if found else None
    assert "".join(seen).encode() == lines            # every line once, in order
    assert len(seen) == 4
    # With JavaScript off the same link is a page of its own.
    plain = client.get("/runs/alice-006/log/earlier?stdout=120000&stderr=0").get_data(as_text=True)
    assert "<title>alice-006 earlier output" in plain and "line 009999\n</span>" in plain
    assert "line 010000" not in plain
    assert client.get("/runs/bob-000/log/earlier?stdout=5").status_code == 404


def test_the_log_poll_appends_what_is_new_from_the_offsets_shown(app):
    write_log(app, "alice-005", b"one\ntwo\n", b"")
    with app.app_context():
        run = db.session.execute(db.select(Run).filter_by(name="alice-005")).scalar_one()
        run.status = "running"
        db.session.commit()
    client = app.test_client()
    sign_in(client)
    page = client.get("/runs/alice-005").get_data(as_text=True)
    assert "/runs/alice-005/log?stdout=8&amp;stderr=0" in page
    write_log(app, "alice-005", b"one\ntwo\nthree\n", b"oops\n")
    poll = client.get("/runs/alice-005/log?stdout=8&stderr=0",
                      headers={"HX-Request": "true"}).get_data(as_text=True)
    assert '<pre hx-swap-oob="beforeend:#log"><span class="log-stdout" >three\n</span>' in poll
    assert "oops" in poll and "stdout=14&amp;stderr=5" in poll
    assert client.get("/runs/bob-000/log").status_code == 404


def test_the_telemetry_tab_charts_metrics_by_layout_or_one_per_metric(app):
    folder = Path(app.config["DIV_DATA_DIR"]) / "runs" / "acme" / "alice-007"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(
        '{"step": 0, "loss": 1.0, "acc": 0.5}\nbad\n{"step": 1, "loss": 0.5, "acc": 0.7}\n')
    client = app.test_client()
    sign_in(client)
    data = client.get("/runs/alice-007/telemetry.json").get_json()
    assert [(c["title"], c["data"]) for c in data["charts"]] == [
        ("loss", [[0, 1], [1.0, 0.5]]), ("acc", [[0, 1], [0.5, 0.7]])]
    page = client.get("/runs/alice-007/telemetry").get_data(as_text=True)
    assert "uplot-1.6.32.min.js" in page and page.count('<figure class="chart"') == 2
    with app.app_context():
        run = db.session.execute(db.select(Run).filter_by(name="alice-007")).scalar_one()
        run.telemetry = '[[chart]]\ntitle = "Both"\nmetrics = ["loss", "acc"]\n'
        db.session.commit()
    data = client.get("/runs/alice-007/telemetry.json").get_json()
    assert [(c["title"], c["data"]) for c in data["charts"]] == [
        ("Both", [[0, 1], [1.0, 0.5], [0.5, 0.7]])]
    with app.app_context():
        run = db.session.execute(db.select(Run).filter_by(name="alice-007")).scalar_one()
        run.telemetry = "[[chart]\nbroken"
        db.session.commit()
    bad = client.get("/runs/alice-007/telemetry")
    assert bad.status_code == 200 and "telemetry.toml is not valid TOML" in bad.get_data(as_text=True)
    assert client.get("/runs/bob-000/telemetry").status_code == 404


def test_stop_asks_first_and_needs_the_csrf_token(app):
    client = app.test_client()
    sign_in(client)
    confirm = client.get("/runs/alice-001/stop").get_data(as_text=True)
    assert "has already ended (succeeded)" in confirm
    assert client.post("/runs/alice-001/stop").status_code == 400
    token = csrf_token(client, "/runs/alice-001/stop")
    done = client.post("/runs/alice-001/stop", data={"csrf_token": token}, follow_redirects=True)
    assert "alice-001 has already ended (succeeded)." in done.get_data(as_text=True)
    assert client.get("/runs/bob-000/stop").status_code == 404


def test_volumes_can_be_browsed_and_files_downloaded_in_the_org_only(app):
    from divergent.app.services.files.volumes import ensure_volume
    with app.app_context():
        org = get_or_create_org("acme")
        root = Path(ensure_volume(org, "checkpoints"))
        db.session.commit()
    (root / "lora-v1").mkdir()
    (root / "lora-v1" / "final.bin").write_bytes(b"weights")
    client = app.test_client()
    sign_in(client)
    listing = client.get("/volumes").get_data(as_text=True)
    assert "checkpoints" in listing and ">7 B<" in listing
    folder = client.get("/volumes/checkpoints?path=lora-v1").get_data(as_text=True)
    assert "final.bin" in folder and "/mnt/checkpoints/lora-v1" in folder
    download = client.get("/volumes/checkpoints?path=lora-v1/final.bin")
    assert download.data == b"weights" and "attachment" in download.headers["Content-Disposition"]
    assert client.get("/volumes/checkpoints?path=../x").status_code == 400
    bob = app.test_client()
    sign_in(bob, username="bob")
    assert bob.get("/volumes/checkpoints").status_code == 404
    assert "checkpoints" not in bob.get("/volumes").get_data(as_text=True)


def test_the_spend_page_shows_the_month_by_project_and_gpu(app):
    client = app.test_client()
    sign_in(client)
    page = client.get("/spend?month=2026-11").get_data(as_text=True)
    assert '<span class="money" title="$4.80">$4.80</span> spent' in page   # 60 runs x $0.08
    assert "no monthly limit" in page
    assert "acme-proj" in page and "other-proj" not in page
    # Every day of the month, one run a minute from Nov 1 00:00: all on the 1st.
    days = json.loads(re.search(r'id="by-day-data">(.*?)</script>', page, re.S).group(1))
    assert len(days) == 30 and days[0] == ["2026-11-01", 4_800_000]
    assert all(micros == 0 for _, micros in days[1:])
    assert '<tr><td>2026-11-01</td><td><span class="money" title="$4.80">$4.80</span></td></tr>' in page
    # Months before and after; an empty one says so instead of empty tables.
    assert 'href="/spend?month=2026-10" rel="prev"' in page
    assert 'href="/spend?month=2026-12" rel="next"' in page
    empty = client.get("/spend?month=2026-10").get_data(as_text=True)
    assert "No runs in 2026-10: nothing was spent." in empty and "by-day-data" not in empty
    assert 'rel="next"' not in client.get("/spend").get_data(as_text=True)    # this month
    first = client.get("/spend?month=0001-01")
    assert first.status_code == 200 and 'rel="prev"' not in first.get_data(as_text=True)


def test_a_file_time_past_any_calendar_is_shown_as_it_is(app):
    from divergent.app.dashboard.formats import when_filter
    assert when_filter(1e12) == "1000000000000.0" and when_filter(float("inf")) == "inf"
    assert "2026-11-01 00:00 UTC" in when_filter(datetime(2026, 11, 1, tzinfo=UTC).timestamp())


def test_settings_create_a_key_once_revoke_it_and_list_members(app):
    from divergent.app.services.accounts.keys import user_for_key
    client = app.test_client()
    sign_in(client)
    token = csrf_token(client, "/settings")
    page = client.post("/settings/keys", data={"csrf_token": token, "name": "laptop"})
    key = re.search(r'<pre id="new-key">(div_[\w-]+)</pre>', page.get_data(as_text=True)).group(1)
    with app.app_context():
        assert user_for_key(key).username == "alice"
    listing = client.get("/settings").get_data(as_text=True)
    assert key not in listing and "laptop" in listing and "alice" in listing
    assert "bob" not in listing
    prefix = key[: key.index("_", 4)]
    assert client.post(f"/settings/keys/{prefix}/revoke").status_code == 400   # no CSRF token
    revoked = client.post(f"/settings/keys/{prefix}/revoke", data={"csrf_token": token},
                          follow_redirects=True)
    assert "revoked" in revoked.get_data(as_text=True)
    with app.app_context():
        assert user_for_key(key) is None
    bob = app.test_client()
    sign_in(bob, username="bob")
    assert bob.post(f"/settings/keys/{prefix}/revoke",
                    data={"csrf_token": csrf_token(bob, "/settings")}).status_code == 404


def test_the_cluster_page_is_for_site_admins_and_shows_slurms_gpus(app, slurm_cluster):
    client = app.test_client()
    sign_in(client)
    assert client.get("/cluster").status_code == 403
    assert 'href="/cluster"' not in client.get("/").get_data(as_text=True)
    with app.app_context():
        admin = db.session.execute(db.select(User).filter_by(username="bob")).scalar_one()
        admin.role = "site_admin"
        alice_run = db.session.execute(db.select(Run).filter_by(name="alice-011")).scalar_one()
        alice_run.status, alice_run.pending_reason, alice_run.gpus = "queued", "Resources", 2
        db.session.commit()
    client = app.test_client()
    sign_in(client, username="bob")
    page = client.get("/cluster").get_data(as_text=True)
    # The dev cluster: 4 nodes with 8 of each GPU type, as sinfo says.
    assert re.search(r"<tr><td>H100</td><td>\d+</td><td>\d+</td><td>0</td><td>32</td>", page)
    assert "node1" in page and "node2" in page
    # Every org's waiting runs: a site admin's page spans orgs.
    assert "<tr><td>alice-011</td>\n  <td>acme</td><td>2 x H100</td><td>waiting for 2 x H100</td>" in page
    assert "Queued runs (1)" in page
    assert "<tr><td>H100</td><td>$4.80</td></tr>" in page
    assert "Slurm on this host" in page and "<td><code>h100</code></td>" in page


def test_the_cluster_page_asks_slurm_once_however_many_watch(app):
    """Nodes by name with their partitions in order; a queued run of the
    admin's own org links to its page; sinfo once per DIV_CLUSTER_CACHE_SECONDS."""
    from divergent.app.services.site import slurm_access
    from divergent.slurm.records import NodeRecord

    class CountedSinfo:
        asked = 0

        def nodes(self):
            CountedSinfo.asked += 1
            return {name: NodeRecord(name, "idle", 0, 8, parts, {"": 8}, {})
                    for name, parts in (("node10", ["b", "a"]), ("node2", ["z", "gpu"]))}

    with app.app_context():
        bob = db.session.execute(db.select(User).filter_by(username="bob")).scalar_one()
        bob.role = "site_admin"
        for name in ("bob-000", "alice-011"):
            db.session.execute(db.select(Run).filter_by(name=name)).scalar_one().status = "queued"
        db.session.commit()
    app.config["DIV_CLUSTER_CACHE_SECONDS"] = 60
    client = app.test_client()
    sign_in(client, username="bob")
    with slurm_access.standing_in(CountedSinfo()):
        pages = [client.get("/cluster").get_data(as_text=True) for _ in range(5)]
    assert CountedSinfo.asked == 1
    page = pages[-1]
    assert page.index("<td>node2</td>") < page.index("<td>node10</td>")
    assert "<td>gpu, z</td>" in page and "<td>a, b</td>" in page
    assert '<a href="/runs/bob-000">bob-000</a>' in page
    assert "<tr><td>alice-011</td>" in page         # another org's: no page of bob's to link


def test_the_run_page_says_when_where_who_and_what_it_cost(app):
    with app.app_context():
        run = db.session.execute(db.select(Run).filter_by(name="alice-005")).scalar_one()
        run.started_at = run.created_at + timedelta(seconds=30)
        run.ended_at = run.started_at + timedelta(minutes=12)
        run.nodes, run.slurm_job_id, run.cost_micros = "gpu-[1-2]", "4242", 138_333
        run.status, run.exit_code, run.slurm_state, run.memory_gib = "failed", 9, "OUT_OF_MEMORY", 8
        db.session.commit()
    client = app.test_client()
    sign_in(client)
    page = client.get("/runs/alice-005").get_data(as_text=True)
    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd>(.*?)</dd>", page, re.S))
    assert facts["Project"] == "acme-proj" and facts["User"] == "alice"
    assert facts["Nodes"] == "gpu-[1-2]" and facts["Slurm job"] == "4242"
    assert facts["Hardware"] == "H100"
    assert facts["Rate"] == '<span class="money" title="$4.80">$4.80</span>/h'
    assert facts["Cost"] == '<span class="money" title="$0.138333">$0.14</span>'
    assert "Cost so far" not in facts
    assert facts["Started"] == ('<time datetime="2026-11-01T00:05:30Z" title="2026-11-01T00:05:30Z">'
                                "2026-11-01 00:05 UTC</time>")
    assert "2026-11-01 00:17 UTC" in facts["Ended"]
    assert "used more than its 8 GiB of\n    memory: exit code 9 is that kill" in page
    assert "div run --memory 16G" in page
    assert "alice-005 ran out of memory (8 GiB)" in page


def test_the_runs_list_has_users_local_times_and_says_when_a_filter_matches_nothing(app):
    client = app.test_client()
    sign_in(client)
    page = client.get("/").get_data(as_text=True)
    assert '<th class="optional">User</th>' in page and '<td class="optional">alice</td>' in page
    assert '<span class="money" title="$0.08">$0.08</span>' in page
    nothing = client.get("/?project=nope").get_data(as_text=True)
    assert "No runs match these filters." in nothing and "No runs yet" not in nothing
    assert client.get("/favicon.ico").status_code == 200
    assert client.get("/favicon.ico").mimetype in ("image/vnd.microsoft.icon", "image/x-icon")


def test_wrong_passwords_are_slowed_per_user_and_address(app):
    def attempt(password, address, username="alice"):
        client = app.test_client()
        client.environ_base["REMOTE_ADDR"] = address
        return sign_in(client, username=username, password=password)

    for n in range(10):
        assert attempt(f"guess number {n}", "10.1.0.66").status_code == 401
    # The guesser's address waits for that user, even with the password...
    refused = attempt(PASSWORD, "10.1.0.66")
    assert refused.status_code == 429 and "too many failed attempts" in refused.get_data(as_text=True)
    assert int(refused.headers["Retry-After"]) > 200
    # ...and nobody else does: the user elsewhere, another user there.
    assert attempt(PASSWORD, "10.1.0.99").status_code == 302
    assert attempt(PASSWORD, "10.1.0.66", username="bob").status_code == 302


def test_a_guesser_at_the_users_address_never_locks_out_the_users_own_browser(app):
    users_browser = app.test_client()
    users_browser.environ_base["REMOTE_ADDR"] = "10.1.0.7"
    assert sign_in(users_browser).status_code == 302          # signed in here before
    users_browser.post("/logout", data={"csrf_token": csrf_token(users_browser, "/")})
    guesser = app.test_client()
    guesser.environ_base["REMOTE_ADDR"] = "10.1.0.7"          # the same login node
    for n in range(10):
        assert sign_in(guesser, password=f"guess number {n}").status_code == 401
    assert sign_in(guesser).status_code == 429                # an unknown browser waits
    assert sign_in(users_browser).status_code == 302          # the user's own does not
    forged = app.test_client()
    forged.environ_base["REMOTE_ADDR"] = "10.1.0.7"
    forged.set_cookie("div_device", "WyJhbGljZSIsICIwMCJd.forged")
    assert sign_in(forged).status_code == 429                 # a cookie not ours is none


def test_site_admins_make_orgs_and_users_and_set_limits_and_prices(app, tmp_path):
    app.config["DIV_PRICES_FILE"] = str(tmp_path / "prices.toml")
    client = app.test_client()
    sign_in(client)
    token = csrf_token(client, "/")
    assert client.get("/admin").status_code == 403
    assert client.post("/admin/orgs", data={"name": "sneaky", "csrf_token": token}).status_code == 403
    with app.app_context():
        db.session.execute(db.select(User).filter_by(username="alice")).scalar_one().role = "site_admin"
        db.session.commit()
    assert client.post("/admin/orgs", data={"name": "vision-lab"}).status_code == 400   # no token
    made = client.post("/admin/orgs", data={"name": "vision-lab", "csrf_token": token},
                       follow_redirects=True).get_data(as_text=True)
    assert "Org vision-lab is there (Slurm account vision-lab)." in made
    client.post("/admin/users", data={"username": "vera", "org": "vision-lab", "role": "org_admin",
                                      "csrf_token": token})
    client.post("/admin/orgs/vision-lab/limit", data={"limit": "$250", "csrf_token": token})
    bad = client.post("/admin/prices", data={"price_h100": "4.8.0", "csrf_token": token})
    assert bad.status_code == 400 and "not an amount in dollars" in bad.get_data(as_text=True)
    client.post("/admin/prices", data={"price_h100": "5.10", "price_extra_gib": "0.04",
                                       "csrf_token": token})
    page = client.get("/admin").get_data(as_text=True)
    assert "<tr><td>vera</td><td>vision-lab</td><td>org_admin</td>" in page
    assert 'value="250.00"' in page and 'name="price_h100" size="6" value="5.10"' in page
    with app.app_context():
        from divergent.app.models import Org
        from divergent.app.services.money.pricing import load_prices
        org = db.session.execute(db.select(Org).filter_by(name="vision-lab")).scalar_one()
        assert org.monthly_limit_micros == 250_000_000
        prices = load_prices(app.config["DIV_PRICES_FILE"])
        assert (prices.per_unit_hour["h100"], prices.extra_gib_hour) == (5_100_000, 40_000)
    bad_user = client.post("/admin/users", data={"username": "<b>", "org": "vision-lab",
                                                 "role": "member", "csrf_token": token})
    assert bad_user.status_code == 400


def test_the_runs_list_searches_names_and_filters_by_user(app):
    with app.app_context():
        org = get_or_create_org("acme")
        carol = get_or_create_user(org, "carol")
        run = db.session.execute(db.select(Run).filter_by(name="alice-007")).scalar_one()
        run.user_id = carol.id
        db.session.commit()
    client = app.test_client()
    sign_in(client)
    named = client.get("/?q=-05").get_data(as_text=True)
    assert set(re.findall(r'href="/runs/([\w-]+)"', named)) == {f"alice-05{i}" for i in range(10)}
    # % and _ are letters to the search, never SQL's wildcards.
    assert "No runs match these filters" in client.get("/?q=%25").get_data(as_text=True)
    by_carol = client.get("/?user=carol").get_data(as_text=True)
    assert re.findall(r'href="/runs/([\w-]+)"', by_carol) == ["alice-007"]
    assert '<option selected>carol</option>' in by_carol
    assert client.get("/?user=bob").status_code == 404        # another org's user


def test_a_sweep_page_sorts_by_any_column_and_charts_its_first_metric(app):
    from divergent.app.models import Sweep
    with app.app_context():
        org = get_or_create_org("acme")
        sweep = Sweep(org_id=org.id, user_id=get_or_create_user(org, "alice").id,
                      name="sweep-ab12", size=4, axes={"LR": ["1", "2", "3", "4"]})
        db.session.add(sweep)
        db.session.flush()
        for i, (status, accuracy) in enumerate([("succeeded", 0.7999999999999999),
                                                ("failed", None), ("succeeded", 0.91),
                                                ("succeeded", 0.85)]):
            run = db.session.execute(db.select(Run).filter_by(name=f"alice-00{i}")).scalar_one()
            run.sweep_id, run.sweep_index, run.sweep_values = sweep.id, i, {"LR": str(i + 1)}
            run.status, run.metrics = status, {"accuracy": accuracy} if accuracy else {}
        db.session.commit()
    client = app.test_client()
    sign_in(client)
    page = client.get("/sweeps/sweep-ab12").get_data(as_text=True)
    assert "3 of 4 succeeded" in page and "sweep-ab12 failed" not in page
    assert '<span title="0.7999999999999999">0.8</span>' in page
    by_accuracy = client.get("/sweeps/sweep-ab12?sort=metric:accuracy&desc=1").get_data(as_text=True)
    order = re.findall(r'href="/runs/(alice-00\d)"', by_accuracy)
    assert order == ["alice-002", "alice-003", "alice-000", "alice-001"]   # no value: last
    assert 'aria-sort="descending"' in by_accuracy
    charts = json.loads(re.search(r'id="chart-data">(.*?)</script>', page, re.S).group(1))
    assert charts[0]["data"] == [[0, 2, 3], [0.7999999999999999, 0.91, 0.85]]
    listed = client.get("/sweeps").get_data(as_text=True)
    assert 'href="/sweeps/sweep-ab12"' in listed and "3 of 4 succeeded" in listed


def test_a_run_page_lists_its_metrics_the_cli_command_and_downloads_its_log(app):
    from divergent.app.services.accounts.secrets import seal
    with app.app_context():
        run = db.session.execute(db.select(Run).filter_by(name="alice-008")).scalar_one()
        run.metrics, run.metrics_points = {"loss": 0.12345678, "step": 99}, 100
        run.secret_names = ["TOKEN"]
        run.secrets_sealed = seal(json.dumps({"TOKEN": "s3cr3t-value"}))
        db.session.commit()
    # More than one read's worth, a secret across the read boundary.
    stdout = b"x" * ((1 << 20) - 5) + b"s3cr3t-value and more\n"
    write_log(app, "alice-008", stdout, b"err\n")
    client = app.test_client()
    sign_in(client)
    page = client.get("/runs/alice-008").get_data(as_text=True)
    assert '<th>loss</th><td class="num"><span title="0.12345678">0.123457</span></td>' in page
    assert ("div run --gpu cpu --memory 8G --project acme-proj --image img --env LR=3e-4 "
            "--secret TOKEN --check exit_code==0 --no-upload -- true") in page
    download = client.get("/runs/alice-008/stdout.txt")
    assert download.status_code == 200 and "attachment" in download.headers["Content-Disposition"]
    assert download.data == b"x" * ((1 << 20) - 5) + b"*** and more\n"
    assert client.get("/runs/bob-000/stdout.txt").status_code == 404     # another org's


def test_the_spend_page_breaks_the_month_down_by_user(app):
    client = app.test_client()
    sign_in(client)
    page = client.get("/spend?month=2026-11").get_data(as_text=True)
    by_user = re.search(r'<table class="by-user">(.*?)</table>', page, re.S).group(1)
    assert ('<td><a href="/?user=alice">alice</a></td><td>60</td><td><span class="money" '
            'title="$4.80">$4.80</span></td>') in by_user and "bob" not in by_user
