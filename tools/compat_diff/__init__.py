"""Differential check of ``tensorwire.compat``: the checker's verdict against real decoding.

Each trial draws a message schema (``p.Msg``) over the schema language's features (integers with
bounds, formats, steps and consts; numbers; strings with lengths and patterns; enums; booleans;
arrays; maps; nested structs; tagged unions; ``x-ndarray`` dtypes and shapes; nullable fields;
required and optional fields with defaults; closed and open types), changes it by a few random
edits, then encodes messages valid under each version and decodes them with the other. For each
mode (backward: new reads old, forward: old reads new, full: both) it reports

- MISS: the checker gives no error, yet a message failed to decode or decoded to another value;
- ALARM: the checker gives an error, yet no message drawn failed (a candidate false alarm: the
  draw may have missed the failing message, so judge each one by hand).

Run it from the repository root (it is slow: two schema loads per trial)::

    nice -n 10 .venv/bin/python -m tools.compat_diff --trials 300 --seed 1

Each finding prints both schemas and a message that shows it, to paste into a test. Modules:
``draw`` (the schemas and their edits), ``values`` (the values tried for a field, its defaults),
``travel`` (messages written under one version and decoded under the other); ``trial`` is here,
``__main__`` runs the trials.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import tensorwire as tw
from tensorwire.compat import compare
from tensorwire.schema import load_dir
from tools.compat_diff.draw import document, draw_schema, mutate
from tools.compat_diff.travel import messages, plain, travels

__all__ = ["trial"]


def trial(r: random.Random, root: Path, count: int) -> list[str]:
    fields, required, closed = draw_schema(r)
    nfields, nrequired, nclosed = mutate(r, fields, required, closed)
    wrap = r.choice(["flat", "flat", "struct", "array"])
    old_doc, new_doc = document(fields, required, closed, wrap), document(nfields, nrequired, nclosed, wrap)
    if old_doc == new_doc:
        return []
    paths = []
    for side, doc in (("old", old_doc), ("new", new_doc)):
        d = root / side / "p"
        d.mkdir(parents=True, exist_ok=True)
        (d / "Msg.v1.json").write_text(json.dumps(doc))
        paths.append(root / side)
    try:
        old_reg, new_reg = tw.load_schemas(paths[0]), tw.load_schemas(paths[1])
    except tw.SchemaError as exc:
        return [f"SKIP: {exc}"]
    old_ir, new_ir = load_dir(paths[0]), load_dir(paths[1])
    broken: dict[str, tuple[Any, str] | None] = {}
    for mode, writer, reader, wf, wr in (
        ("backward", old_reg, new_reg, fields, required),
        ("forward", new_reg, old_reg, nfields, nrequired),
    ):
        broken[mode] = None
        sent = messages(r, writer.type("p.Msg"), wf, wr, count, wrap)
        if not sent:
            return [f"SKIP: no message valid under the {mode} writer drawn"]
        for msg in sent:
            ok, why = travels(msg, reader)
            if not ok:
                broken[mode] = (msg, why)
                break
    broken["full"] = broken["backward"] or broken["forward"]
    out: list[Any] = []
    for mode in ("backward", "forward", "full"):
        errors = sorted(
            {f.rule for f in compare(old_ir, new_ir, mode) if f.severity == "error" and f.rule != "VERSION_NOT_BUMPED"}
        )
        case = f" ({wrap})\n  old={json.dumps(fields)} req={sorted(required)} closed={closed}" + (
            f"\n  new={json.dumps(nfields)} req={sorted(nrequired)} closed={nclosed}"
        )
        failure = broken[mode]
        if not errors and failure is not None:
            msg, why = failure
            out.append(f"MISS {mode}: {why} message={plain(msg)!r}{case}")
        elif errors and failure is None:
            out.append(f"ALARM {mode}: {errors}{case}")
    return out
