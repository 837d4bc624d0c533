"""Where the CLI finds its API URL and key: the flag, then the environment
(DIV_API_URL, DIV_TOKEN), then ~/.config/div/config.toml, which `div login`
writes with mode 0600."""
from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

NO_KEY = ("no API key: run `div login`, set DIV_TOKEN or pass --token "
          "(an admin creates keys with `flask create-key`; `make up` prints one)")
NO_URL = "no API URL: run `div login`, set DIV_API_URL or pass --api-url"


@dataclass(frozen=True)
class Settings:
    api_url: str
    token: str


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(base) / "div" / "config.toml"


def read_file() -> dict[str, Any]:
    path = config_path()
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (tomllib.TOMLDecodeError, OSError) as exc:
        raise click.UsageError(f"cannot read {path}: {exc}") from None


def write_file(api_url: str, token: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        # JSON strings are TOML basic strings.
        f.write(f"api_url = {json.dumps(api_url)}\ntoken = {json.dumps(token)}\n")
    os.chmod(path, 0o600)
    return path


def resolve(token: str | None, api_url: str | None) -> Settings:
    """Flag > environment > file; exit 2 when either is missing."""
    stored: dict[str, Any] = {}
    if not (token or os.environ.get("DIV_TOKEN")) or not (api_url or os.environ.get("DIV_API_URL")):
        stored = read_file()
    token = token or os.environ.get("DIV_TOKEN") or stored.get("token")
    api_url = api_url or os.environ.get("DIV_API_URL") or stored.get("api_url")
    if not token:
        raise click.UsageError(NO_KEY)
    if not api_url:
        raise click.UsageError(NO_URL)
    return Settings(api_url, token)
