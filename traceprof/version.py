"""The package's version, importable from any stage without importing the package's API."""

__version__ = "0.1.0"
