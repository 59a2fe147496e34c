"""A received view of a pool slot collected by the garbage collector inside this thread's own
transition of that slot's control page.

Any allocation can run a collection, and a tensor in a reference cycle (one a traceback holds,
say) dies there. A collection inside a claim or a give-back of a page, made with the page's mutex
held, that collected a view of the same page gave that view's claim back from inside the
transition: taking the mutex again, it waited for itself forever (a broadcast's free, or a named
segment's mark). The give-back now waits until the transition is over. Each case runs in a child
process (a hang ends with its timeout) and makes the collection come where an allocation of the
transition can make it: a stand-in for a call the transition makes with the mutex held.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tensorwire.transports.shm import Backing

REPO = Path(__file__).resolve().parents[2]


def _collected_inside(case: str) -> None:
    """Run in the child: a view of a slot, in a reference cycle, collected inside a claim (or a
    give-back) of the same page by the same receiving transport; print what came of it and of the
    slot."""
    import gc

    import torch

    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY, diffusion
    from tensorwire.transports import _page
    from tensorwire.transports._page_layout import FREE

    backing: Backing = "named" if case == "named" else "memfd"
    sender, receiver = transports.ShmTransport(backing=backing), transports.ShmTransport(backing=backing)
    readers = 1 if case == "named" else 2
    encoder = tw.Encoder(sender.fan_out(readers) if readers > 1 else sender, tw.EncodeOptions(inline_threshold=1))
    options = tw.DecodeOptions(borrow=True)
    first, second = (tw.Decoder(REGISTRY, transports=[receiver], options=options) for _ in range(2))
    frames = encoder.encode(diffusion.Output(output=torch.ones(20_000)))
    assert sender.pool is not None
    (slot,) = sender.pool.slots()
    gc.disable()  # (no collection but the one made below)
    held = [first.decode(frames).output]
    held.append(held)  # a cycle: only a collection frees the view
    del held
    if case == "broadcast-free":
        out = second.decode(frames).output  # (before the first view dies)
    where = {"broadcast": "own_start", "named": "_refusal"}.get(case, "drop_holder")  # (each called with
    real = getattr(_page, where)  # the page's mutex held)

    def collecting(*args: object) -> object:
        gc.collect()
        return real(*args)

    setattr(_page, where, collecting)
    try:
        if case == "broadcast-free":
            del out  # its give-back: the first view dies inside it
            print("given back")
        else:
            out = second.decode(frames).output  # the broadcast's second receiver, or a replay
            print("decoded", float(out.sum()))
            del out
    except tw.DecodeError as exc:
        print("refused", str(exc)[:80])
    setattr(_page, where, real)
    gc.collect()
    print("slot", "free" if slot.page.state == FREE else f"state {slot.page.state}")
    receiver.close()
    sender.close()


@pytest.mark.parametrize(
    ("case", "outcome"),
    [
        ("broadcast", "decoded 20000.0"),  # its second receiver's claim, through the same transport
        ("broadcast-free", "given back"),  # its second receiver's give-back, through the same transport
        (
            "named",
            "refused diffusion.Output v1: pool slot",
        ),  # a replayed handle, refused (named: a give-back marks the page)
    ],
)
def test_a_view_collected_inside_a_transition_of_its_own_page_is_given_back_after_it(case: str, outcome: str) -> None:
    code = f"from {__name__} import _collected_inside; _collected_inside({case!r})"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: the claim waited for its own page's mutex (a hang)")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 2, done.stdout + done.stderr
    assert lines[0].startswith(outcome), done.stdout
    assert lines[1] == "slot free", done.stdout  # (the view's claim given back once the claim was over)


def test_give_backs_kept_for_after_a_transition_are_made_as_it_ends_one_whose_page_went_passed_over() -> None:
    """In process: what ``defer`` kept is made once any transition of the page is over (here a
    mark's); one whose page's views were let go of meanwhile (``ValueError``) does not stop the rest."""
    from tensorwire.transports._page_layout import RECEIVER_BYTE
    from tests.interrupts import memfd_page

    with memfd_page("tw-kept-give-backs") as page:
        made: list[str] = []

        def gone() -> None:
            made.append("gone")
            raise ValueError("operation forbidden on released memoryview object")

        page.defer(lambda: made.append("first"))
        page.defer(gone)  # (made first: the last kept)
        assert not page.held_here()
        page.mark(RECEIVER_BYTE, False)
        assert made == ["gone", "first"] and page._later == []
        page.mark(RECEIVER_BYTE, False)
        assert made == ["gone", "first"]  # (each made once)
