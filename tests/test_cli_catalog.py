"""`div run` checks its flags against the server's catalog before uploading
anything: through a real HTTP server (werkzeug's, in a thread) serving the
app on a site with 4 GPUs a node, which the CLI's own copy does not know."""
from __future__ import annotations

import os
import time

import pytest
from click.testing import CliRunner
from werkzeug.serving import make_server

from divergent.app.services.accounts.keys import create_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.cli.main import cli
from tests.serving import serving


@pytest.fixture
def served(app, tmp_path, monkeypatch):
    """The app over HTTP on a site with 4-GPU nodes, and div's settings for it."""
    site = tmp_path / "site.toml"
    site.write_text("[slurm]\ngpus_per_node = 4\n")
    app.config["DIV_SITE_FILE"] = str(site)
    with app.app_context():
        key = create_key(get_or_create_user(get_or_create_org("acme"), "alice"))
    with serving(make_server("127.0.0.1", 0, app, threaded=True)) as url:
        monkeypatch.setenv("DIV_API_URL", url)
        monkeypatch.setenv("DIV_TOKEN", key)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        monkeypatch.chdir(tmp_path)
        yield site


def div(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_div_run_refuses_what_the_sites_nodes_cannot_hold_before_uploading(served, tmp_path):
    refused = div("run", "--gpu", "h100", "--gpus", "6", "--", "true")
    assert refused.exit_code == 2, refused.output
    assert "more than 4 GPUs come in whole nodes of 4: 8, 12, 16" in refused.output
    assert not (tmp_path / "data" / "share").exists()          # nothing was uploaded
    unknown = div("run", "--gpu", "a100", "--", "true")
    assert unknown.exit_code == 2
    assert "'a100' is not one of 'b300', 'h200', 'h100', 'l40s', 'cpu'" in unknown.output


def test_the_catalog_is_kept_for_a_minute_then_asked_again(served, tmp_path):
    assert "whole nodes of 4" in div("run", "--gpus", "6", "--", "true").output
    served.write_text("[slurm]\ngpus_per_node = 2\n")
    assert "whole nodes of 4" in div("run", "--gpus", "6", "--", "true").output   # kept
    for cached in (tmp_path / "cache" / "div").glob("catalog-*.json"):
        os.utime(cached, (time.time() - 61, time.time() - 61))      # a minute on
    assert "whole nodes of 2" in div("run", "--gpus", "3", "--", "true").output


def test_a_type_the_cache_lacks_is_asked_for_before_it_is_refused(served, tmp_path):
    assert "whole nodes of 4" in div("run", "--gpus", "6", "--", "true").output   # cached
    served.write_text('[slurm]\ngpus_per_node = 4\n[gpu.a100]\npartition = "gpu"\n'
                      'gres = "gpu:a100"\nper_node = 4\n')
    asked = div("run", "--gpu", "a100", "--gpus", "6", "--", "true").output
    assert "is not one of" not in asked and "whole nodes of 4" in asked, asked
    cached = next((tmp_path / "cache" / "div").glob("catalog-*.json")).read_text()
    assert '"a100"' in cached


def test_div_run_help_lists_the_sites_catalog(served):
    served.write_text('[gpu.a100]\npartition = "gpu"\ngres = "gpu:a100"\nper_node = 4\n'
                      '[gpu.cpu]\npartition = "batch"\nmemory = 2\n')
    shown = div("run", "--help")
    assert shown.exit_code == 0 and "GPU type: a100, cpu." in shown.output, shown.output
    assert "'h100' is not one of 'a100', 'cpu'" in div("run", "--gpu", "h100", "--", "true").output


def test_a_ca_bundle_that_is_not_there_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("DIV_API_URL", "https://127.0.0.1:9")
    monkeypatch.setenv("DIV_TOKEN", "div_x_y")
    monkeypatch.setenv("DIV_CA_BUNDLE", str(tmp_path / "missing.pem"))
    done = div("ls")
    assert done.exit_code == 1 and "cannot reach the API at https://127.0.0.1:9" in done.output
    assert not isinstance(done.exception, FileNotFoundError)
