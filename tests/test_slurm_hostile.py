"""Hostile values never run: names are refused by strict patterns, and env
values and commands reach the run exactly as written, evaluated once, by the
run's own shell only."""
from __future__ import annotations

import pytest

from divergent.slurm.jobspec import InvalidJobSpec
from divergent.slurm.script import render_batch_script
from tests.jobs import SITE, spec_for, wait_for_end

HOSTILE_NAMES = ["$(touch pwned)", "a;b", "run\nname", "x' y", "`id`", "../etc", "UPPER", "-lead", ""]


@pytest.mark.parametrize("field", ["run_name", "account", "project"])
@pytest.mark.parametrize("value", HOSTILE_NAMES)
def test_hostile_names_are_refused(job_dirs, field, value):
    with pytest.raises(InvalidJobSpec):
        spec_for(job_dirs, "true", **{field: value})


@pytest.mark.parametrize("key", ["A B", "X;touch pwned", "1ABC", "A=B", "A\nB"])
def test_hostile_env_keys_are_refused(job_dirs, key):
    with pytest.raises(InvalidJobSpec):
        spec_for(job_dirs, "true", env={key: "v"})


def test_hostile_state_folder_and_image_are_refused(job_dirs):
    with pytest.raises(InvalidJobSpec):
        spec_for(job_dirs, "true", state_dir="/tmp/x\n#SBATCH --uid=0")
    with pytest.raises(InvalidJobSpec):
        spec_for(job_dirs, "true", image="img; touch pwned")


def test_hostile_env_values_and_commands_reach_the_run_unchanged(slurm, job_dirs, tmp_path):
    state, _, _ = job_dirs
    marker = tmp_path / "pwned"
    values = {
        "SUBST": f"$(touch {marker})",
        "BACKTICK": f"`touch {marker}`",
        "QUOTES": "it's \"quoted\" \\ and ;semi; && touch " + str(marker),
        "NEWLINE": f"line1\ntouch {marker}\nline3",
    }
    # The command's single quotes keep $(...) literal: evaluated once, it
    # prints them; evaluated twice, it would create the marker.
    command = (f"echo 'literal $(touch {marker})'; "
               "printf '%s\\0' \"$SUBST\" \"$BACKTICK\" \"$QUOTES\" \"$NEWLINE\" > /mnt/data/env.bin")
    spec = spec_for(job_dirs, command, env=values)
    record = wait_for_end(slurm, slurm.submit(render_batch_script(spec, SITE)))

    assert record.state == "COMPLETED", (state / "stderr").read_text()
    assert (state / "stdout").read_text() == f"literal $(touch {marker})\n"
    seen = (job_dirs[1] / "data" / "env.bin").read_bytes().split(b"\0")[:-1]
    assert [v.decode() for v in seen] == list(values.values())
    assert not marker.exists()
