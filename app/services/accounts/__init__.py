"""Accounts: orgs and their users, API keys (stored hashed), dashboard
passwords and sessions, the throttle on wrong ones, secrets (sealed) and
their masking in logs, and taking users and orgs off the platform."""
