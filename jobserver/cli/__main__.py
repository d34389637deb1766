"""``python -m jobserver.cli``: the ``jobserver`` command, as the console script runs
it (the local cluster and the tests start nodes this way)."""

import sys

from jobserver.cli import main

sys.exit(main())
