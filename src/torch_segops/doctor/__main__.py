"""``python -m torch_segops.doctor``."""

import sys

from .report import main

sys.exit(main())
