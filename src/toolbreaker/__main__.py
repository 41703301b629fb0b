"""``python -m toolbreaker`` runs the command line."""

import sys

from toolbreaker.cli import main

if __name__ == "__main__":  # not when a replay worker process imports this module
    sys.exit(main())
