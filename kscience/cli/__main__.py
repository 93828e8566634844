"""`python -m kscience.cli`: the same command line as the `kscience` script."""

import sys

from kscience.cli.main import main

sys.exit(main())
