"""The batch script, pinned by golden files: a change to the script is a diff
someone reads. A test that differs fails with the diff; DIV_UPDATE_GOLDEN=1
writes the new file (and still fails, so an update is never a pass)."""
from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

import pytest

from divergent.slurm.client import _slurm_message
from divergent.slurm.jobspec import ArrayMember, GpuType, InvalidJobSpec, JobSpec, SlurmSite, default_catalog
from divergent.slurm.script import render_batch_script, sbatch_directives
from divergent.slurm.transport import CommandResult

GOLDEN = Path(__file__).parent / "golden"


def example_spec(**overrides) -> JobSpec:
    fields = dict(run_name="run-k4t9", account="acme", gpu_type="h100", gpus=1, cpus=8,
                  memory_gib=64, command="python -u -c 'from train import run; run()'",
                  state_dir="/srv/div/runs/acme/run-k4t9", volumes_dir="/srv/div/share/acme",
                  code_dir="/srv/div/trees/acme/classifier-code/9f31c2ab",
                  trees_dir="/srv/div/trees/acme",
                  project="classifier", time_limit_minutes=62, env={"LR": "3e-4"},
                  usage_interval=10)
    fields.update(overrides)
    return JobSpec(**fields)


@pytest.mark.parametrize("runtime", ["none", "pyxis", "apptainer"])
def test_batch_script_matches_golden_file(runtime):
    site = SlurmSite(runtime=runtime, bind_paths=("/opt/conda",))
    image = dict(image_source="10.77.0.1:5000#div/python@sha256:" + "0123456789abcdef" * 4,
                 image_size=65_432_100) if runtime == "pyxis" else {}
    script = render_batch_script(example_spec(**image), site)
    assert_golden(GOLDEN / f"batch-{runtime}.sh", script)


def test_a_sweep_is_one_job_array_whose_members_take_their_values_by_index():
    members = tuple(ArrayMember(f"sweep-k4t9-{i}", f"/srv/div/runs/acme/sweep-k4t9-{i}",
                                {"LR": "3e-4", "SEED": seed}) for i, seed in enumerate(["1", "$(id)"]))
    script = render_batch_script(example_spec(run_name="sweep-k4t9", state_dir=(
        "/srv/div/sweeps/acme/sweep-k4t9"), array=members), SlurmSite(runtime="none"))
    assert_golden(GOLDEN / "batch-sweep.sh", script)


def assert_golden(golden: Path, text: str) -> None:
    expected = golden.read_text() if golden.exists() else ""
    if text == expected:
        return
    diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                        str(golden), "rendered"))
    if os.environ.get("DIV_UPDATE_GOLDEN"):
        golden.write_text(text)
        pytest.fail(f"rewrote {golden.name}: read the diff, then run again without "
                    f"DIV_UPDATE_GOLDEN\n{diff}")
    pytest.fail(f"{golden.name} differs (DIV_UPDATE_GOLDEN=1 rewrites it):\n{diff}")


def test_thirty_two_gpus_are_four_nodes_of_eight():
    lines = sbatch_directives(example_spec(gpus=32, cpus=32, memory_gib=256), SlurmSite())
    assert "#SBATCH --nodes=4" in lines
    assert "#SBATCH --gres=gpu:h100:8" in lines
    assert "#SBATCH --cpus-per-task=8" in lines
    assert "#SBATCH --mem=64G" in lines


def test_cpu_runs_ask_for_no_gres_and_site_names_are_used():
    site = SlurmSite(catalog=default_catalog(partitions={"cpu": "batch", "h100": "gpu-h100"},
                                             gres={"h100": "nvidia_h100"}))
    assert not any("--gres" in line for line in sbatch_directives(example_spec(gpu_type="cpu"), site))
    lines = sbatch_directives(example_spec(), site)
    assert "#SBATCH --partition=gpu-h100" in lines
    assert "#SBATCH --gres=gpu:nvidia_h100:1" in lines


def test_a_run_after_its_copies_waits_for_them_and_ends_if_one_fails():
    lines = sbatch_directives(example_spec(after_jobs=("41", "42")), SlurmSite())
    assert {"#SBATCH --dependency=afterok:41:42", "#SBATCH --kill-on-invalid-dep=yes"} <= set(lines)
    assert not any("dependency" in line for line in sbatch_directives(example_spec(), SlurmSite()))
    for hostile in ("41,afterany:1", "41 --uid=0", "", "1" * 13):
        with pytest.raises(InvalidJobSpec, match="invalid job id"):
            example_spec(after_jobs=(hostile,))


def test_no_time_limit_means_no_time_directive():
    assert not any("--time" in line for line in sbatch_directives(
        example_spec(time_limit_minutes=None), SlurmSite()))


def test_more_than_eight_gpus_must_fill_whole_nodes():
    with pytest.raises(InvalidJobSpec, match="multiple of 8"):
        sbatch_directives(example_spec(gpus=12), SlurmSite())


def test_a_site_type_asks_for_its_partition_gres_feature_and_qos_in_its_nodes():
    site = SlurmSite(catalog={
        "a100": GpuType("a100", "gpu", "gpu:a100", per_node=4, qos="normal"),
        "rtx6000": GpuType("rtx6000", "older", "gpu", per_node=2, constraint="rtx6000")})
    lines = sbatch_directives(example_spec(gpu_type="a100", gpus=8, cpus=16, memory_gib=128), site)
    assert {"#SBATCH --partition=gpu", "#SBATCH --nodes=2", "#SBATCH --gres=gpu:a100:4",
            "#SBATCH --qos=normal", "#SBATCH --cpus-per-task=8"} <= set(lines)
    untyped = sbatch_directives(example_spec(gpu_type="rtx6000", gpus=2), site)
    assert {"#SBATCH --partition=older", "#SBATCH --gres=gpu:2",
            "#SBATCH --constraint=rtx6000"} <= set(untyped)
    with pytest.raises(InvalidJobSpec, match="multiple of 4"):
        sbatch_directives(example_spec(gpu_type="a100", gpus=6), site)
    with pytest.raises(InvalidJobSpec, match="sells no 'h100'"):
        sbatch_directives(example_spec(), site)


@pytest.mark.parametrize("fields, says", [
    ({"partition": "gpu;rm"}, "partition"), ({"gres": "tpu:v5"}, "GRES"),
    ({"qos": "a b"}, "QoS"), ({"per_node": 0}, "GPUs a node"), ({"name": "A100"}, "name")])
def test_catalog_values_that_would_reach_an_sbatch_line_are_plain_names(fields, says):
    values = {"name": "a100", "partition": "gpu", "gres": "gpu:a100", **fields}
    with pytest.raises(InvalidJobSpec, match=says):
        GpuType(**values)


def test_unknown_runtime_is_refused():
    with pytest.raises(InvalidJobSpec, match="runtime"):
        SlurmSite(runtime="docker")


def test_a_golden_file_that_differs_fails_with_the_diff_and_is_rewritten_only_when_asked(
        tmp_path, monkeypatch):
    golden = tmp_path / "g.sh"
    golden.write_text("a\nb\n")
    monkeypatch.delenv("DIV_UPDATE_GOLDEN", raising=False)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)-b\n\+c"):
        assert_golden(golden, "a\nc\n")
    assert golden.read_text() == "a\nb\n"
    monkeypatch.setenv("DIV_UPDATE_GOLDEN", "1")
    with pytest.raises(pytest.fail.Exception, match="rewrote g.sh"):
        assert_golden(golden, "a\nc\n")
    assert golden.read_text() == "a\nc\n"
    assert_golden(golden, "a\nc\n")          # the same text passes


def test_the_sites_qos_is_asked_for_unless_the_type_names_its_own():
    catalog = {**default_catalog(), "a100": GpuType("a100", "gpu", "gpu:a100", qos="a100-qos")}
    site = SlurmSite(catalog=catalog, qos="normal")
    assert "#SBATCH --qos=normal" in sbatch_directives(example_spec(), site)
    assert "#SBATCH --qos=a100-qos" in sbatch_directives(example_spec(gpu_type="a100"), site)
    assert not any("--qos" in line for line in sbatch_directives(example_spec(), SlurmSite()))


@pytest.mark.parametrize("stderr, hint", [
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition "
     "combination specified", "flask org-account ORG ACCOUNT"),
    ("sbatch: error: Batch job submission failed: Invalid qos specification", "flask site --qos"),
    ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job "
     "submit limit, user's size and/or time limits)", "sacctmgr show assoc")])
def test_slurms_refusals_of_a_sites_conventions_say_what_to_do_in_one_line(stderr, hint):
    message = _slurm_message(CommandResult(1, "", stderr + "\n"))
    assert "\n" not in message and hint in message and message.startswith(
        stderr.split("failed: ")[1])


def test_a_run_with_secrets_reads_them_once_and_never_starts_without_them():
    script = render_batch_script(example_spec(has_secrets=True), SlurmSite())
    # Waits for the reconciler's copy after a node failure, then reads and deletes it.
    assert 'for _ in $(seq 60); do [ -e "$div_state/secrets.env" ] && break' in script
    assert 'rm -f "$div_state/secrets.env"' in script
    assert "has no secrets for this attempt: not started" in script
    assert "secrets.env" not in render_batch_script(example_spec(), SlurmSite())
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
