"""The package version, in a module of its own so nothing has to import the `kscience` package
itself (whose `__init__` is the Jupyter extension's entry point) to read it."""

__version__ = "0.1.0"
