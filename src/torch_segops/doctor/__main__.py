"""``python -m torch_segops.doctor``."""

from . import main

raise SystemExit(main())
