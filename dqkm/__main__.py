"""``python -m dqkm``: the ``dqkm`` command (see :mod:`dqkm.cli`)."""

import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the imports load: the same one line as in main
    print("dqkm: interrupted (Ctrl-C).", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
