"""``python -m emulator`` (see :mod:`emulator.server`)."""

import sys

from emulator.server import main

sys.exit(main())
