"""The stable surface generated code imports: ``tensorwire gen`` writes imports of this module only.

Each generated module first calls ``require(API, SINCE)``: the number of this surface it was
written for, and the first tensorwire release that provides it. Code written for a surface this
release does not provide fails at import with an ``ImportError`` that names what to install or
says to re-run ``tensorwire gen``, instead of failing later on a missing name.
"""

from __future__ import annotations

from tensorwire._api import API, OLDEST_API, SINCE
from tensorwire._contract import check_struct, struct_check
from tensorwire._version import __version__
from tensorwire.registry import Registry
from tensorwire.rules import CountCheck, EachCheck, GroupRule, StructRules, TensorCheck, TreeCheck, TupleCheck, TypeInfo

__all__ = [
    "API",
    "OLDEST_API",
    "SINCE",
    "CountCheck",
    "EachCheck",
    "GroupRule",
    "Registry",
    "StructRules",
    "TensorCheck",
    "TreeCheck",
    "TupleCheck",
    "TypeInfo",
    "check_struct",
    "require",
    "struct_check",
]


def require(api: int, since: str) -> None:
    """Raise ``ImportError`` unless this release provides surface ``api`` (first in tensorwire ``since``)."""
    if OLDEST_API <= api <= API:
        return
    if api > API:
        raise ImportError(
            f"this code was generated for tensorwire runtime API {api} (tensorwire {since} and later); this is "
            f"tensorwire {__version__} (runtime API {API}): install tensorwire>={since}, or re-run `tensorwire gen` "
            "with the installed version"
        )
    raise ImportError(
        f"this code was generated for tensorwire runtime API {api} (tensorwire {since}), which tensorwire "
        f"{__version__} no longer provides (it provides {OLDEST_API}..{API}): re-run `tensorwire gen`"
    )
