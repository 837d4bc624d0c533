"""Whether `div run`'s entrypoint is there, before anything is uploaded or
started: a missing file.py, or a function file.py plainly does not define,
would otherwise cost a run (and its nodes) to find out. The file is read,
never run: its top-level names come from its syntax tree. What this
Python cannot read (syntax newer than its own) is the image's to judge."""
from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

import click

from divergent.cli.flags import python_entrypoint

# Scopes of their own: what they bind is not the module's.
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
          ast.SetComp, ast.DictComp, ast.GeneratorExp)


def check_entrypoint(words: tuple[str, ...], after_dashes: bool, root: Path,
                     uploaded: Collection[str]) -> None:
    """Exit 2 (a usage error) when the entrypoint's file is not among the
    files to upload, or surely does not define the function."""
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
    except (SyntaxError, ValueError) as exc:
        click.echo(f"note: could not check that {file} defines {function} ({exc}); the run "
                   "will say", err=True)
        return
    names = module_names(tree)
    if function not in names and not names & {"*", "__getattr__"}:
        raise click.UsageError(f"{file} defines no {function} at its top level; nothing was "
                               "uploaded or started")


def module_names(tree: ast.Module) -> set[str]:
    """Every name the module's own code binds, wherever in it (under if,
    try, for, with, match), with "*" for a star import, whose names cannot
    be known without running it."""
    names: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        if not isinstance(node, SCOPES):
            pending.extend(ast.iter_child_nodes(node))
    return names
