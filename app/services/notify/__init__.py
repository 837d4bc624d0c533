"""Notifications: which events reach whom (notices), the outbox that keeps
them until sent, and delivery by webhook or email."""
