"""Secrets without the cluster: encryption at rest and key rotation, the
masker's edges, and the throttle's counting, on SQLite."""
from __future__ import annotations

import json
import logging

import pytest
from cryptography.fernet import Fernet, InvalidToken

from divergent.app.extensions import db
from divergent.app.models import AuthFailure, Run, Secret
from divergent.app.services.accounts import throttle
from divergent.app.services.accounts.masking import Masker
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.accounts.secrets import (
    log_masker,
    remove_secrets_file,
    rotate,
    seal,
    set_secret,
    site_keys,
    values_for_run,
    write_secrets_file,
)
from divergent.app.services.errors import Invalid, Unavailable


@pytest.fixture
def app(app_context):
    """Every test here calls the services directly."""
    return app_context


def test_values_are_sealed_and_survive_a_key_rotation(app):
    user = get_or_create_user(get_or_create_org("acme"), "alice")
    row = set_secret(user, "HF_TOKEN", "hf_abcdef123456")
    assert "hf_abcdef" not in row.sealed_value
    first_key = site_keys()
    assert len(first_key) == 1
    run = Run(org_id=user.org_id, project_id=1, user_id=user.id, name="r", gpu_type="cpu",
              gpus=1, cpus=1, memory_gib=2, image="i", command="c", rate_micros_per_hour=1,
              secrets_sealed=seal(json.dumps({"HF_TOKEN": "hf_abcdef123456"})))
    db.session.add(run)
    db.session.commit()

    assert rotate(new_key=True) == 2
    assert site_keys() != first_key and len(site_keys()) == 1
    with pytest.raises(InvalidToken):     # the old key alone opens nothing now
        Fernet(first_key[0]).decrypt(db.session.get(Secret, row.id).sealed_value.encode())
    assert values_for_run(user.org, ["HF_TOKEN"]) == {"HF_TOKEN": "hf_abcdef123456"}
    assert log_masker(run).mask(b"got hf_abcdef123456\n", final=True)[0] == b"got ***\n"


def test_keys_from_the_environment_rotate_by_putting_a_new_one_first(app):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    app.config["DIV_SECRETS_KEYS"] = old
    user = get_or_create_user(get_or_create_org("acme"), "alice")
    set_secret(user, "TOKEN", "value-1")
    with pytest.raises(Invalid, match="put a new key first"):
        rotate(new_key=True)
    app.config["DIV_SECRETS_KEYS"] = f"{new},{old}"
    assert rotate(new_key=False) == 1
    app.config["DIV_SECRETS_KEYS"] = new            # the old key can go now
    assert values_for_run(user.org, ["TOKEN"]) == {"TOKEN": "value-1"}
    app.config["DIV_SECRETS_KEYS"] = Fernet.generate_key().decode()
    with pytest.raises(Unavailable, match="cannot be decrypted"):
        values_for_run(user.org, ["TOKEN"])


@pytest.mark.parametrize("name", ["DIV_RUN", "div_command", "SLURM_JOB_ID", "BASH_ENV", "ENV",
                                  "BASH_FUNC_f", "MASTER_PORT", "1ABC", "A-B", ""])
def test_names_that_would_reach_into_the_script_are_refused(app, name):
    user = get_or_create_user(get_or_create_org("acme"), "alice")
    with pytest.raises(Invalid):
        set_secret(user, name, "x")


def test_the_masker_holds_back_what_may_be_a_secrets_start():
    masker = Masker(["s3cret-value", "ab"])          # too short to mask: "ab"
    shown, used = masker.mask(b"one s3cret-value two s3cr", final=False)
    assert (shown, used) == (b"one *** two ", 21)     # "s3cr" waits for the next read
    shown, used = masker.mask(b"s3cret-value!\n", final=False)
    assert (shown, used) == (b"***!\n", 14)
    assert masker.mask(b"tail s3cr", final=True) == (b"tail s3cr", 9)   # the end: all of it
    assert masker.mask(b"ab ab", final=False) == (b"ab ab", 5)


def test_the_throttle_counts_per_subject_and_forgets_after_the_window(app, caplog):
    app.config.update(DIV_AUTH_MAX_FAILURES=3, DIV_AUTH_WINDOW=60)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            throttle.check(["address 10.0.0.1"])
            throttle.record_failure("address 10.0.0.1", "a wrong API key", "10.0.0.1")
    with pytest.raises(throttle.Throttled) as refused:
        throttle.check(["address 10.0.0.1", "user alice"])
    assert 50 <= int(refused.value.headers["Retry-After"]) <= 61
    throttle.check(["address 10.0.0.2"])                          # another address: fine
    assert "a wrong API key from address 10.0.0.1 (address 10.0.0.1: 3 in the window)" \
        in caplog.text
    row = db.session.get(AuthFailure, "address 10.0.0.1")
    row.window_start = row.window_start.replace(year=2020)        # the window has passed
    db.session.commit()
    throttle.check(["address 10.0.0.1"])
    throttle.record_failure("address 10.0.0.1", "a wrong API key", "10.0.0.1")
    assert db.session.get(AuthFailure, "address 10.0.0.1").failures == 1


def test_the_secrets_file_appears_whole_and_goes_with_any_partial_copy(tmp_path):
    write_secrets_file(str(tmp_path), {"TOKEN": "s3cr3t"})
    assert (tmp_path / "secrets.env").read_text() == "div_secrets=(TOKEN=s3cr3t)\n"
    # The group class may read: under an org's ACLs, the org's group alone
    # (its job's user); no one else.
    assert (tmp_path / "secrets.env").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secrets.env"]   # no partial left
    (tmp_path / "secrets.env.0123abcd").write_text("left by a crash")
    remove_secrets_file(str(tmp_path))
    assert list(tmp_path.iterdir()) == []
