"""An org's secrets: credentials a run gets as environment variables. Values
are encrypted at rest with Fernet (AES-128-CBC with HMAC-SHA256) under the
site's keys, DIV_SECRETS_KEYS or else instance/secrets_key: the first key
encrypts, every key decrypts, so a key is rotated by putting a new one first
and re-encrypting (`flask rotate-secrets`). No API answer and no page ever
holds a value; a run's log shows *** where a value it was given appears."""
from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable
from typing import cast

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from flask import current_app

from divergent.app.extensions import db
from divergent.app.models import Org, Run, Secret, User, utcnow
from divergent.app.services.accounts.masking import Masker
from divergent.app.services.accounts.orgs import all_named, find_named
from divergent.app.services.errors import Invalid, NotFound, Unavailable
from divergent.app.services.instance_files import instance_secret, replace_file
from divergent.slurm.jobspec import InvalidJobSpec, check_env_name
from divergent.slurm.script import REGISTRY_LOGIN_FILE, SECRETS_FILE, secrets_file_text

MAX_VALUE_BYTES = 64 * 1024
# Ours: a run's identity and Slurm's own variables are not for a secret to set.
# (and div_ in any case: the batch script's own variables).


def _key_file() -> str:
    return os.path.join(current_app.instance_path, "secrets_key")


def site_keys() -> list[str]:
    """The configured keys, first the one that encrypts. Read on every use,
    so a rotation reaches running servers without a restart."""
    text = current_app.config.get("DIV_SECRETS_KEYS") or instance_secret(
        _key_file(), lambda: Fernet.generate_key().decode())
    return [key for key in re.split(r"[\s,]+", text) if key]


def _cipher(keys: list[str] | None = None) -> MultiFernet:
    try:
        return MultiFernet([Fernet(key) for key in keys or site_keys()])
    except ValueError:
        raise Unavailable("DIV_SECRETS_KEYS holds a key that is not a Fernet key "
                          "(32 url-safe base64-encoded bytes)") from None


def seal(text: str) -> str:
    return _cipher().encrypt(text.encode()).decode()


def unseal(token: str) -> str:
    try:
        return _cipher().decrypt(token.encode()).decode()
    except InvalidToken:
        raise Unavailable("a secret cannot be decrypted with the configured keys "
                          "(was a key removed before `flask rotate-secrets`?)") from None


def check_secret_name(name: object) -> str:
    try:
        return check_env_name(name, "secret")
    except InvalidJobSpec as exc:
        raise Invalid(f"{exc} (a secret becomes an environment variable)") from None


def set_secret(user: User, name: str, value: object) -> Secret:
    check_secret_name(name)
    if not isinstance(value, str) or not value:
        raise Invalid("a secret's value is a non-empty string")
    if len(value.encode()) > MAX_VALUE_BYTES or "\0" in value:
        raise Invalid("a secret's value is at most 64 KiB, without NUL bytes")
    row = _find(user.org, name, missing_ok=True) or Secret(org_id=user.org_id, name=name)
    row.sealed_value, row.set_by, row.set_at = seal(value), user, utcnow()
    db.session.add(row)
    db.session.commit()
    return row


def _find(org: Org, name: str, missing_ok: bool = False) -> Secret | None:
    return find_named(Secret, org, name, "secret", missing_ok)


def secrets_of(org: Org) -> list[Secret]:
    return all_named(Secret, org)


def delete_secret(org: Org, name: str) -> None:
    db.session.delete(_find(org, check_secret_name(name)))
    db.session.commit()


def values_for_run(org: Org, names: list[str]) -> dict[str, str]:
    """The values of the secrets a run asks for, by name."""
    values = {}
    for name in names:
        row = _find(org, check_secret_name(name), missing_ok=True)
        if row is None:
            raise NotFound(f"no secret named {name!r}: set it first with `div secrets set {name}`")
        values[name] = unseal(row.sealed_value)
    return values


def write_secrets_file(state_dir: str, values: dict[str, str]) -> None:
    """The values for the batch script to read and delete (made new)."""
    if values:
        write_private_file(state_dir, SECRETS_FILE, secrets_file_text(values))


def write_private_file(state_dir: str, name: str, text: str) -> None:
    """A file of the run's secrets (its values, a registry login) in its
    state folder. Written whole under another name, then linked in: a
    script waiting for the file never reads half of it (FileExistsError if
    it is there)."""
    final = os.path.join(state_dir, name)
    partial = f"{final}.{os.urandom(8).hex()}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        # Readable by the group class: under an org's ACLs that is the
        # org's group alone (its job's user reads and deletes it), never
        # another org's; without them, the server's own group.
        os.fchmod(fd, 0o640)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.link(partial, final)
    finally:
        os.unlink(partial)


def run_secret_values(run: Run) -> dict[str, str]:
    """The values a run was given (as they were when it started), by name."""
    values: dict[str, str] = json.loads(unseal(run.secrets_sealed)) if run.secrets_sealed else {}
    return values


def rewrite_secrets_file(state_dir: str, run: Run) -> None:
    """The values a run started with, again, for its next attempt after a
    node failure (the script read and deleted the first copy)."""
    with contextlib.suppress(FileExistsError):
        # Called only for a run that was given secrets.
        write_secrets_file(state_dir, run_secret_values(run))


def remove_secrets_file(state_dir: str) -> None:
    """For a run that ended before its script read them (canceled queued),
    or that ended (its registry login), and any partial copy a crash left
    between write and link."""
    for name in os.listdir(state_dir) if os.path.isdir(state_dir) else ():
        if name.startswith((SECRETS_FILE, REGISTRY_LOGIN_FILE)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(state_dir, name))


def log_masker(run: Run) -> Masker:
    """Masks the values a run was given (as they were when it started)."""
    return Masker(list(run_secret_values(run).values()))


def masked_metrics(run: Run, metrics: dict) -> dict:
    """A run's metrics with a secret's value in a key or a value as ***, as
    in its log: a run can write what it was given to $DIV_METRICS too."""
    return mask_point(log_masker(run), metrics) if run.secrets_sealed else metrics


def mask_point(masker: Masker, point: dict) -> dict:
    def masked(value):
        text = str(value).encode(errors="replace")
        hidden, _ = masker.mask(text, final=True)
        return value if hidden == text else hidden.decode(errors="replace")
    return {masked(key): masked(value) for key, value in point.items()}


def rotate(new_key: bool) -> int:
    """Re-encrypts every secret (and every run's sealed values) under the
    first key. With `new_key` (keys kept in instance/secrets_key) a fresh key
    is made first and the old ones dropped once nothing needs them. Returns
    how many values were re-encrypted."""
    from_env = bool(current_app.config.get("DIV_SECRETS_KEYS"))
    if new_key and from_env:
        raise Invalid("the keys come from DIV_SECRETS_KEYS: put a new key first there, "
                      "restart, then rotate without --new-key")
    keys = site_keys()
    if new_key:
        keys = [Fernet.generate_key().decode(), *keys]
        _write_keys(keys)
    cipher = _cipher(keys)
    count = 0
    stored: Iterable[Secret] = db.session.execute(db.select(Secret)).scalars()
    for row in stored:
        row.sealed_value = cipher.rotate(row.sealed_value.encode()).decode()
        count += 1
    sealed: Iterable[Run] = db.session.execute(
        db.select(Run).where(Run.secrets_sealed.is_not(None))).scalars()
    for run in sealed:
        # The query took only runs with sealed values.
        run.secrets_sealed = cipher.rotate(cast(str, run.secrets_sealed).encode()).decode()
        count += 1
    db.session.commit()
    if new_key:
        _write_keys(keys[:1])
    return count


def _write_keys(keys: list[str]) -> None:
    replace_file(_key_file(), "\n".join(keys) + "\n", mode=0o600)
