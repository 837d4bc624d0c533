"""The arrows of the architecture (README "Layout"): cli -> (HTTP) -> app/api
and app/dashboard -> app/web -> app/services -> slurm, each side taking the
shared terms from divergent.terms. Read from the source's import statements,
so a wrong arrow fails here, not in a review."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("app", "cli", "divergent", "slurm", "s3")


def imports_of(folder: str) -> dict[str, set[str]]:
    """Each module under `folder` and the modules of ours it imports."""
    found = {}
    for path in (ROOT / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
        found[str(path.relative_to(ROOT))] = {n for n in names if n.split(".")[0] in OURS}
    return found


def wrong_arrows(folder: str, allowed: tuple[str, ...]) -> list[str]:
    return sorted(f"{module} imports {name}" for module, names in imports_of(folder).items()
                  for name in names if not name.startswith(allowed))


@pytest.mark.parametrize("folder, allowed", [
    ("divergent", ("divergent",)),
    ("cli", ("cli", "divergent")),
    ("slurm", ("slurm", "divergent")),
    ("s3", ("s3",)),
    ("app/services", ("app.services", "app.models", "app.extensions", "app.config", "slurm",
                      "s3", "divergent")),
    ("app/web", ("app.web", "app.services", "app.models", "app.extensions", "app.config",
                 "divergent")),
])
def test_each_layer_imports_only_what_is_below_it(folder, allowed):
    assert wrong_arrows(folder, allowed) == []


def test_the_server_never_imports_the_cli():
    assert wrong_arrows("app", ("app", "slurm", "s3", "divergent")) == []


def test_a_wrong_arrow_is_seen(tmp_path, monkeypatch):
    """The check reads what it should: a module that imports the CLI from
    the server is named."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "bad.py").write_text("from cli.output import table\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert wrong_arrows("app", ("app",)) == ["app/bad.py imports cli.output",
                                              "app/bad.py imports cli.output.table"]


# The service domains from the bottom up, as app/services/__init__.py lists them.
DOMAINS = ("site", "money", "files", "accounts", "notify", "cluster", "runs")


def test_each_service_domain_imports_only_the_ones_below_it():
    wrong = []
    for module, names in imports_of("app/services").items():
        parts = module.split("/")
        own = DOMAINS.index(parts[2]) if len(parts) > 3 else -1
        for name in names:
            target = name.split(".")
            if len(target) > 3 and target[2] in DOMAINS and DOMAINS.index(target[2]) > own:
                wrong.append(f"{module} imports {name}")
    assert sorted(wrong) == []
