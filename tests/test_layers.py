"""The arrows of the architecture (docs/developers/architecture.md): cli -> (HTTP) -> app/api
and app/dashboard -> app/web -> app/services -> slurm, each side taking the
shared terms from divergent.terms; and everything of ours imported as
divergent.*, the one name the package installs. Read from the source's
import statements, so a wrong arrow fails here, not in a review."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("app", "cli", "slurm", "s3")
# The service domains from the bottom up, as app/services/__init__.py lists them.
DOMAINS = ("images", "site", "money", "files", "accounts", "notify", "cluster", "runs")


def imported(path: Path) -> set[str]:
    """The modules (and names in them) `path` imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def imports_of(folder: str) -> dict[str, set[str]]:
    """Each module under `folder` and the modules of ours it imports, named
    without the leading divergent."""
    return {str(path.relative_to(ROOT)): {name.removeprefix("divergent.")
                                          for name in imported(path)
                                          if name.startswith("divergent.")}
            for path in (ROOT / folder).rglob("*.py")}


def wrong_arrows(folder: str, allowed: tuple[str, ...]) -> list[str]:
    return sorted(f"{module} imports {name}" for module, names in imports_of(folder).items()
                  for name in names if not name.startswith(allowed))


@pytest.mark.parametrize("folder, allowed", [
    ("divergent", ("terms",)),
    ("cli", ("cli", "terms")),
    ("slurm", ("slurm", "terms")),
    ("s3", ("s3",)),
    ("app", ("app", "slurm", "s3", "terms")),
    ("app/services", ("app.services", "app.models", "app.extensions", "app.config", "slurm",
                      "s3", "terms")),
    ("app/web", ("app.web", "app.services", "app.models", "app.extensions", "app.config",
                 "terms")),
])
def test_each_layer_imports_only_what_is_below_it(folder, allowed):
    assert wrong_arrows(folder, allowed) == []


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


def test_our_code_is_imported_only_as_divergent():
    """A bare `import app` would load a second copy of a module beside
    divergent.app's (two databases, two caches) and breaks once installed."""
    paths = [p for folder in (*FOLDERS, "tests", "bench", "migrations") for p in
             (ROOT / folder).rglob("*.py")] + [ROOT / "wsgi.py"]
    bare = sorted(f"{path.relative_to(ROOT)} imports {name}" for path in paths
                  for name in imported(path) if name.split(".")[0] in FOLDERS)
    assert bare == []


def test_a_wrong_arrow_is_seen(tmp_path, monkeypatch):
    """The check reads what it should: a module that imports the CLI from
    the server is named."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "bad.py").write_text("from divergent.cli.output import table\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert wrong_arrows("app", ("app",)) == ["app/bad.py imports cli.output",
                                              "app/bad.py imports cli.output.table"]


def test_the_domain_order_is_the_one_app_services_documents():
    """The order above is the one app/services/__init__.py tells a reader."""
    from divergent.app import services
    documented = [line.split()[0].rstrip("/") for line in (services.__doc__ or "").splitlines()
                  if line.startswith("  ") and line.split()[0].endswith("/")]
    assert tuple(documented) == DOMAINS
