"""Runs, from request to settlement: the request checked and sized, named,
submitted, listed and stopped; their text, logs, metrics, checks and
telemetry; what Slurm's refusals mean; sweeps, schedules (cron) and S3
transfers, which are runs too; and submissions the reconciler settles."""
