"""`python -m kscience.cli`: the same command line as the `kscience` script."""

from kscience.cli import entry

entry()
