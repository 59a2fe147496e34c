"""A sender that points the fd its memfd handle names at another file between the receiver's check
and its open: the receiver opens only the memfd it checked, and nothing else the fd may be by then.

Opening a terminal makes it the controlling terminal of a process that leads a session and has
none (a daemon after ``setsid()``, a service); the peer hanging the terminal up then kills it with
SIGHUP. The race is made certain here: the first read of the link answers what the check expects
(the memfd's label), while the fd is in truth a pseudo-terminal. Each case runs in a forked child
that leads a session of its own.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import secrets
import signal
import time
from multiprocessing.connection import Connection

from tensorwire.errors import DecodeError
from tensorwire.transports._segment import memfd_link, open_memfd

NUMBER = 777  # the fd number the forged handle names


def _controlling_terminal() -> int:
    """This process's ``tty_nr`` (0: it has no controlling terminal)."""
    with open("/proc/self/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[4])


def _swapped(report: Connection) -> None:
    """In a session of its own: open the memfd a forged handle names while its fd is a terminal."""
    os.setsid()
    master, slave = os.openpty()
    os.dup2(slave, NUMBER, inheritable=False)
    os.close(slave)
    name = f"tw-{os.getpid()}-{secrets.token_hex(16)}-1"
    link = f"/proc/{os.getpid()}/fd/{NUMBER}"
    real = os.readlink
    lied: list[str] = []

    def readlink(path: str, *args: object, **kwargs: object) -> str:
        if path == link and not lied:  # the check's read: the fd was the memfd at that moment
            lied.append(path)
            return memfd_link(name)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    os.readlink = readlink  # type: ignore[assignment]  # (in this forked child only)
    before = _controlling_terminal()
    fds = sorted(os.listdir("/proc/self/fd"))
    try:
        open_memfd(os.getpid(), NUMBER, name, "pool segment", min_size=0)
        outcome = "opened"
    except DecodeError as exc:
        outcome = exc.message
    finally:
        os.readlink = real
    after = _controlling_terminal()
    leaked = sorted(set(os.listdir("/proc/self/fd")) - set(fds))
    os.close(master)  # the peer hangs up: SIGHUP to this process, were the terminal its own
    time.sleep(0.2)
    report.send((before, after, outcome, lied, leaked))


def test_a_terminal_swapped_in_for_a_memfd_is_never_opened() -> None:
    ours, theirs = mp.get_context("fork").Pipe(duplex=False)
    child = mp.get_context("fork").Process(target=_swapped, args=(theirs,))
    child.start()
    theirs.close()
    try:
        report = ours.recv() if ours.poll(30) else None
    except EOFError:  # it died before it reported
        report = None
    finally:
        child.join(30)
    assert child.exitcode == 0, f"the child ended with {child.exitcode} (-{int(signal.SIGHUP)}: SIGHUP)"
    assert report is not None
    before, after, outcome, lied, leaked = report
    assert lied, "the check never read the link"
    assert (before, after) == (0, 0)  # no controlling terminal, before or after
    expected = r"pool segment tw-\d+-[0-9a-f]{32}-1: /proc/\d+/fd/777 changed while it was opened"
    assert re.fullmatch(expected, outcome), outcome
    assert leaked == []
