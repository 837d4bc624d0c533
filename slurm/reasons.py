"""Why a job waits, in words: squeue's reason code (Resources, Priority,
QOSMaxGRESPerUser, ...) as a person would say it. Pure, no I/O."""
from __future__ import annotations

UNAVAILABLE = ("ReqNodeNotAvail", "PartitionDown", "PartitionInactive", "PartitionNodeLimit",
               "NodeDown", "PartitionTimeLimit")


def explain_pending(reason: str, hardware: str) -> str:
    """`hardware` is what the job asked for, such as "8 x H100"."""
    if reason in ("", "None"):
        return "starting"
    if reason == "Resources":
        return f"waiting for {hardware}"
    if reason == "Priority":
        return "behind other jobs"
    if reason.startswith("QOS"):
        return f"over a QoS limit ({reason})"
    if reason.startswith("Assoc"):
        return f"over the account's limit ({reason})"
    if reason.startswith(UNAVAILABLE):
        return f"the nodes it needs are not available ({reason})"
    if reason == "BeginTime":
        return "waiting for its start time"
    if reason.startswith("Dependency"):
        return "waiting for another job"
    if reason.startswith("JobHeld"):
        return f"held ({reason})"
    return f"waiting ({reason})"
