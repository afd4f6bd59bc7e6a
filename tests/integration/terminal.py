"""A command run with a pseudo-terminal as its terminal, and what it drew, as a user would have seen it."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

STYLE = re.compile(r"\x1b\[[0-9;]*m|\x1b\][^\x07]*\x07")  # colours and links: dropped
MOVES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")  # cursor moves and erases: a new frame line


def record_in_a_terminal(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> tuple[int, str]:
    """Run ``argv`` with a pty as its terminal; return the exit code and everything it drew (ANSI removed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    code = proc.wait(timeout=30)
    return code, MOVES.sub("\n", STYLE.sub("", b"".join(chunks).decode("utf-8", "replace")))
