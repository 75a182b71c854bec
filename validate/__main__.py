"""`python -m validate`: run the suite on this host and exit 0 only when every check passed."""

import sys

from validate.cli import main

sys.exit(main(sys.argv[1:]))
