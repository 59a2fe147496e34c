"""The version of the installed ``tensorwire`` distribution."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("tensorwire")
except PackageNotFoundError:  # imported from a tree that is not installed
    __version__ = "0+unknown"
