"""``python -m rococo_eval``: the ``rococo-eval`` command (see :mod:`rococo_eval.cli`)."""

import sys

from rococo_eval.cli import main

sys.exit(main())
