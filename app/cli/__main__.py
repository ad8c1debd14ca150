"""``python -m app.cli``: what the container image and the benchmarks run."""

import sys

from app.cli import main

sys.exit(main())
