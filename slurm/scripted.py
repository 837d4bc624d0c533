"""A transport whose answers come from a function instead of a cluster, as
httpx's MockTransport answers requests: SlurmClient's argv, parsing and
error paths run where there is no Slurm (make test-fast), beside the tests
on the real dev cluster. Every call is kept, in order."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from divergent.slurm.transport import CommandResult

# What a scripted Slurm answers to an argv and its stdin; it may raise
# TransportError, as a lost SSH connection does.
Handler = Callable[[list[str], "str | None"], CommandResult]


@dataclass(frozen=True)
class Call:
    argv: list[str]
    stdin: str | None
    env: dict[str, str]


class ScriptedTransport:
    def __init__(self, handler: Handler, user: str = "divergent") -> None:
        self.handler = handler
        self._user = user
        self.calls: list[Call] = []

    @property
    def user(self) -> str:
        return self._user

    def run(self, argv: list[str], stdin: str | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        self.calls.append(Call(list(argv), stdin, dict(env or {})))
        return self.handler(list(argv), stdin)
