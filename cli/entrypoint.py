"""Whether `div run`'s entrypoint is there, before anything is uploaded or
started: a missing file.py, or a function file.py does not define, would
otherwise cost a run (and its nodes) to find out. The file is read, never
run: its top-level names come from its syntax tree."""
from __future__ import annotations

import ast
from pathlib import Path

import click

from cli.flags import python_entrypoint


def check_entrypoint(words: tuple[str, ...], after_dashes: bool, root: Path,
                     uploaded: list[str]) -> None:
    """Exit 2 (a usage error) when the entrypoint's file is not among the
    files to upload, does not parse, or does not define the function."""
    entry = python_entrypoint(words, after_dashes)
    if entry is None:
        return
    file, function = entry
    if file not in uploaded:
        why = "is not there" if not (root / file).exists() else "is not uploaded (git ignores it)"
        raise click.UsageError(f"{file} {why} in {root}; nothing was uploaded or started")
    if not function:
        return
    try:
        tree = ast.parse((root / file).read_bytes(), filename=file)
    except SyntaxError as exc:
        raise click.UsageError(f"{file} is not valid Python: line {exc.lineno}: {exc.msg}; "
                               "nothing was uploaded or started") from None
    except ValueError as exc:      # NUL bytes
        raise click.UsageError(f"{file} is not valid Python: {exc}") from None
    names = top_level_names(tree)
    if function not in names and not names.intersection({"*", "__getattr__"}):
        raise click.UsageError(f"{file} defines no {function} at its top level; nothing was "
                               "uploaded or started")


def top_level_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level (definitions, assignments,
    imports, including under if/try), with "*" for a star import, whose
    names cannot be known without running it."""
    names: set[str] = set()
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _top_level(body: list[ast.stmt]):
    """Statements run at import, descending into if/try/with blocks."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list) and not isinstance(node, (
                    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from _top_level([n for n in inner if isinstance(n, ast.AST)])
