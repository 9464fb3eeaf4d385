"""``python -m tilec``: the same command line as the ``tilec`` script."""
import sys

from tilec.cli import main

sys.exit(main())
