"""The package as it installs: one importable name (divergent), the server's
templates, static files and migrations inside it, and a bare install that
is the `div` CLI alone, with none of the server's dependencies (div run
starts with click alone; div shell needs wsproto)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(ROOT)], check=True, capture_output=True)
    return next(out.glob("divergent-*.whl"))


def test_everything_installs_under_divergent_with_the_servers_files(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"divergent", wheel.name.split("-py")[0]
                                                      + ".dist-info"}
    for wanted in ("divergent/app/__init__.py", "divergent/cli/main.py", "divergent/terms.py",
                   "divergent/slurm/script.py", "divergent/slurm/batch/node.sh", "divergent/s3/transfer.py",
                   "divergent/templates/base.html", "divergent/app/static/vendor/htmx-2.0.11.min.js",
                   "divergent/migrations/env.py", "divergent/migrations/alembic.ini"):
        assert wanted in names
    assert any(name.startswith("divergent/migrations/versions/") for name in names)
    assert not any(name.startswith(("divergent/tests", "tests/", "bench/")) for name in names)


def test_the_bare_install_needs_click_and_wsproto_alone_and_the_server_is_an_extra(wheel):
    metadata = zipfile.ZipFile(wheel).read(
        next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA"))).decode()
    requires = [line.split(": ", 1)[1] for line in metadata.splitlines()
                if line.startswith("Requires-Dist: ")]
    # wsproto for div shell's terminal, imported by that command alone.
    assert [r for r in requires if "extra ==" not in r] == ["click<9,>=8.1", "wsproto<2,>=1.2"]
    assert any(r.startswith("flask") and 'extra == "server"' in r for r in requires)


def test_div_runs_from_the_wheel_where_no_server_dependency_is_installed(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # click is the one dependency: copied in, as pip would fetch it.
    shutil.copytree(Path(click.__file__).parent, Path(site) / "click")
    assert Path(sysconfig.get_path("purelib")) != Path(site)
    for module in ("flask", "sqlalchemy", "boto3", "paramiko", "gunicorn"):
        missing = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True)
        assert missing.returncode == 1, module
    shown = subprocess.run([str(venv / "bin" / "div"), "run", "--help"], capture_output=True,
                           text=True, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "--max-spend" in shown.stdout
    refused = subprocess.run([str(venv / "bin" / "div"), "run", "--gpu", "h100", "--env", "SLURM_X=1",
                              "--", "true"], capture_output=True, text=True, cwd=tmp_path,
                             env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                  "DIV_API_URL": "http://127.0.0.1:9"})
    assert refused.returncode == 2 and "reserved" in refused.stderr
