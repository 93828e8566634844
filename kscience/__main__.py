"""`python -m kscience`: the same command line as the `kscience` script."""

from kscience.cli import entry

entry()
