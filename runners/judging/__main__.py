"""``python -m runners.judging``: see :mod:`runners.judging.cli`."""

import sys

from runners.judging.cli import main

sys.exit(main())
