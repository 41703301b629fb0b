"""``python -m toolbreaker`` runs the command line."""

import sys

from toolbreaker.cli import main

sys.exit(main())
