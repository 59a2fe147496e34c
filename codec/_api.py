"""The number of the ``tensorwire.runtime`` surface (torch-free, for the code generator too)."""

__all__ = ["API", "OLDEST_API", "SINCE"]

API = 1
"""The surface this release provides (generated code records the number it was written for)."""
OLDEST_API = 1
"""The oldest surface this release still provides."""
SINCE = "0.2.0"
"""The first tensorwire release that provides surface ``API``."""
