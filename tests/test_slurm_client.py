"""SlurmClient over a scripted transport (slurm/scripted.py): the argv it
builds, how it reads Slurm's answers, and every way a command can fail,
without a cluster. tests/test_slurm_cluster.py holds the same client to the
real dev cluster through each way in."""
from __future__ import annotations

import pytest

from divergent.slurm import client as client_module
from divergent.slurm.client import (
    SlurmClient,
    SlurmError,
    SlurmUnreachable,
    SubmitNotReceived,
    SubmitRefused,
)
from divergent.slurm.records import SACCT_FIELDS, SQUEUE_FORMAT
from divergent.slurm.scripted import ScriptedTransport
from divergent.slurm.transport import CommandResult, TransportError

SCRIPT = "#!/bin/bash\n#SBATCH --job-name=div-run-a\ntrue\n"


def answering(stdout: str = "", stderr: str = "", returncode: int = 0) -> ScriptedTransport:
    return ScriptedTransport(lambda argv, stdin: CommandResult(returncode, stdout, stderr))


def test_submit_sends_the_script_on_stdin_and_reads_the_parsable_id():
    transport = answering("87;dev\n")
    assert SlurmClient(transport).submit(SCRIPT) == "87"
    [call] = transport.calls
    assert call.argv == ["sbatch", "--parsable"] and call.stdin == SCRIPT
    assert call.env == {"SLURM_TIME_FORMAT": "%s"}     # epoch seconds, never local time


@pytest.mark.parametrize("stderr, raised, said", [
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition "
     "combination specified", SubmitRefused, "flask org-account"),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not "
     "available", SubmitRefused, "Requested node configuration is not available"),
    ("sbatch: error: Unable to contact slurm controller (connect failure)", SubmitNotReceived,
     "does not answer"),
    ("sbatch: error: Socket timed out on send/recv operation", SlurmUnreachable,
     "did not answer in time"),
])
def test_a_failed_submit_says_whether_slurm_refused_never_got_or_may_have_the_job(
        stderr, raised, said):
    with pytest.raises(raised, match=said) as caught:
        SlurmClient(answering(stderr=stderr, returncode=1)).submit(SCRIPT)
    # Only a controller never reached is "not received": the run is forgotten then.
    assert isinstance(caught.value, SubmitNotReceived) == (raised is SubmitNotReceived)


def test_an_answer_that_is_not_a_job_id_is_an_error():
    with pytest.raises(SlurmError, match="unexpected answer 'Submitted batch job 87'"):
        SlurmClient(answering("Submitted batch job 87\n")).submit(SCRIPT)


def test_an_error_printed_with_exit_code_zero_is_still_an_error():
    with pytest.raises(SlurmError, match="scancel: Kill job error on job id 87"):
        SlurmClient(answering(stderr="scancel: error: Kill job error on job id 87\n")).cancel("87")


def test_a_transport_that_cannot_reach_slurm_is_unreachable():
    def lost(argv, stdin):
        raise TransportError("ssh: connection reset")
    with pytest.raises(SlurmUnreachable, match="connection reset"):
        SlurmClient(ScriptedTransport(lost)).cancel("87")


@pytest.mark.parametrize("job_id", ["87;reboot", "../87", "87_x", ""])
def test_a_job_id_that_is_not_one_never_reaches_a_command(job_id):
    transport = answering()
    with pytest.raises(SlurmError, match="not a job id"):
        SlurmClient(transport).cancel(job_id)
    assert transport.calls == []


def slurm_with(squeue: str, sacct: str | Exception) -> ScriptedTransport:
    def handler(argv, stdin):
        if argv[0] == "squeue":
            return CommandResult(0, squeue, "")
        if isinstance(sacct, Exception):
            return CommandResult(1, "", f"sacct: error: {sacct}")
        return CommandResult(0, sacct, "")
    return ScriptedTransport(handler)


def test_query_merges_squeue_live_jobs_with_saccts_final_records():
    transport = slurm_with("88|RUNNING|None|1000|node1|div-run-b||1\n",
                           "87|COMPLETED|0:0|1000|1010|10|node2|None|div-run-a|\n")
    records = SlurmClient(transport).query(["87", "88"])
    assert (records["87"].state, records["87"].exit_code, records["87"].elapsed_seconds) == \
        ("COMPLETED", 0, 10)
    assert records["87"].finished and not records["88"].finished
    assert records["88"].nodes == "node1"
    squeue, sacct = (call.argv for call in transport.calls)
    assert squeue == ["squeue", "--noheader", "--array", "--states=all", "--jobs=87,88",
                      f"--format={SQUEUE_FORMAT}"]
    assert sacct == ["sacct", "--noheader", "--parsable2", "--duplicates", "--jobs=87,88",
                     f"--format={SACCT_FIELDS}"]


def test_with_accounting_down_query_follows_squeue_alone_only_when_asked():
    transport = slurm_with("88|RUNNING|None|1000|node1|div-run-b||1\n",
                           SlurmError("Problem talking to the database"))
    assert set(SlurmClient(transport).query(["88"], squeue_alone=True)) == {"88"}
    with pytest.raises(SlurmError, match="Problem talking to the database"):
        SlurmClient(transport).query(["88"])


def test_many_ids_go_in_chunks_an_argument_can_hold(monkeypatch):
    monkeypatch.setattr(client_module, "IDS_PER_CALL", 2)
    transport = slurm_with("", "")
    SlurmClient(transport).query(["1", "2", "3"])
    assert [call.argv[4] for call in transport.calls] == \
        ["--jobs=1,2", "--jobs=3", "--jobs=1,2", "--jobs=3"]


def test_an_existing_account_is_kept_and_a_new_one_waits_for_the_controller():
    shown = iter(["", "ClusterName=dev Account=acme UserName=divergent(0) Partition=\n"])

    def handler(argv, stdin):
        if argv[:3] == ["sacctmgr", "-i", "add"]:
            return CommandResult(0, " Associations =\n  U = divergent A = acme\n", "")
        return CommandResult(0, next(shown), "")

    transport = ScriptedTransport(handler)
    SlurmClient(transport).ensure_account("acme")
    assert [call.argv[:4] for call in transport.calls] == [
        ["sacctmgr", "-i", "add", "account"], ["sacctmgr", "-i", "add", "user"],
        ["scontrol", "show", "assoc_mgr", "flags=assoc"], ["scontrol", "show", "assoc_mgr", "flags=assoc"]]

    kept = answering(" Nothing new added.\n", returncode=1)
    SlurmClient(kept).ensure_account("acme")
    assert [call.argv[2] for call in kept.calls] == ["add", "add"]      # no wait


def test_ping_says_what_the_controller_said():
    with pytest.raises(SlurmError, match="scontrol ping: Slurmctld.primary. at vm is DOWN"):
        SlurmClient(answering("Slurmctld(primary) at vm is DOWN\n")).ping()
    assert SlurmClient(answering("Slurmctld(primary) at vm is UP\n")).ping() == \
        "Slurmctld(primary) at vm is UP"


def test_jobs_named_says_when_accounting_could_not_be_asked():
    transport = slurm_with("90|div-run-c|2000\n", SlurmError("slurmdbd down"))
    found, complete = SlurmClient(transport).jobs_named(["div-run-c"], "acme", 1000)
    assert found == {"div-run-c": "90"} and complete is False


def test_an_org_users_commands_go_through_sudo_and_a_refusal_submits_nothing():
    transport = answering("87;acme\n")
    as_org = SlurmClient(transport).as_user("div-acme")
    assert as_org.submit(SCRIPT) == "87"
    as_org.cancel("87")
    assert [call.argv for call in transport.calls] == [
        ["sudo", "-n", "-u", "div-acme", "--", "sbatch", "--parsable"],
        ["sudo", "-n", "-u", "div-acme", "--", "scancel", "87"]]
    assert transport.calls[0].stdin == SCRIPT
    # The transport's own user, or none: the client itself, no sudo.
    client = SlurmClient(transport)
    assert client.as_user(None) is client and client.as_user("divergent") is client
    # sudo refusing (no rule for this user) certainly made no job: not "unsure".
    refused = answering("", "sudo: a password is required\n", returncode=1)
    with pytest.raises(SubmitNotReceived, match="divergent may not run sbatch as div-other "
                                                r"\(sudo: a password is required\)"):
        SlurmClient(refused).as_user("div-other").submit(SCRIPT)
    # sbatch's own failure through sudo is sbatch's, judged as ever.
    slurm_refused = answering("", "sbatch: error: Batch job submission failed: Invalid account\n",
                              returncode=1)
    with pytest.raises(SubmitRefused, match="Invalid account"):
        SlurmClient(slurm_refused).as_user("div-acme").submit(SCRIPT)


def test_a_submit_refused_for_an_account_just_made_is_tried_once_more():
    """Another server process added the org's user to its account a moment
    ago: the controller has not heard, sbatch says Invalid account; once the
    controller knows the user in it, the same script goes in."""
    tries = iter([CommandResult(1, "", "sbatch: error: Batch job submission failed: Invalid "
                                "account or account/partition combination specified\n"),
                  CommandResult(0, "88;acme\n", "")])

    def handler(argv, stdin):
        if argv[0] == "sudo":
            return next(tries)
        return CommandResult(0, "ClusterName=dev Account=acme UserName=div-acme(990) "
                                "Partition=\n", "")
    transport = ScriptedTransport(handler)
    script = SCRIPT.replace("#!/bin/bash\n", "#!/bin/bash\n#SBATCH --account=acme\n")
    assert SlurmClient(transport).as_user("div-acme").submit(script) == "88"
    assert [call.argv[:6] for call in transport.calls] == [
        ["sudo", "-n", "-u", "div-acme", "--", "sbatch"],
        ["scontrol", "show", "assoc_mgr", "flags=assoc", "accounts=acme", "users=div-acme"],
        ["sudo", "-n", "-u", "div-acme", "--", "sbatch"]]
