"""The package version, from the installed package's metadata (declared once, in pyproject.toml)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lpjax")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
