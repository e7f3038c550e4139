"""The package version (one place; ``lpjax.__version__``)."""

__version__ = "0.1.0"
