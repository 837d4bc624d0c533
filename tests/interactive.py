"""tmux driving `div shell` as a person at a terminal would: keys typed,
the window resized, the screen read back."""
from __future__ import annotations

import shlex
import subprocess
import time
import uuid
from pathlib import Path


class Tmux:
    """One tmux session running one command, on a server of its own."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str], width: int = 100,
                 height: int = 30):
        self.socket = f"div-test-{uuid.uuid4().hex[:8]}"
        self.done = cwd / f".tmux-{self.socket}.rc"
        script = f"{shlex.join(command)}; echo $? > {shlex.quote(str(self.done))}; sleep 600"
        env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
        subprocess.run(["tmux", "-L", self.socket, "new-session", "-d", "-x", str(width),
                        "-y", str(height), "-c", str(cwd), "bash", "--norc", "-c", script],
                       env={**env, "TERM": "xterm-256color"}, check=True)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, check=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J")

    def screen_with_colours(self) -> str:
        return self.tmux("capture-pane", "-p", "-e")

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", *(["-l"] if literal else []), *keys)

    def line(self, text: str) -> None:
        self.keys(text, literal=True)
        self.keys("Enter")

    def resize(self, width: int, height: int) -> None:
        self.tmux("resize-window", "-x", str(width), "-y", str(height))

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never showed; the screen:\n{screen}")
            time.sleep(0.05)

    def exit_code(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while not self.done.exists() or not self.done.read_text().strip():
            if time.monotonic() > deadline:
                raise AssertionError(f"the command never ended; the screen:\n{self.screen()}")
            time.sleep(0.1)
        return int(self.done.read_text())

    def client_pid(self) -> int:
        """The command's process (the pane's shell runs it as its child)."""
        pane = int(self.tmux("display-message", "-p", "#{pane_pid}").strip())
        children = subprocess.run(["pgrep", "-P", str(pane)], capture_output=True,
                                  text=True).stdout.split()
        return int(children[0])

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        self.done.unlink(missing_ok=True)
