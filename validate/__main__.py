"""`python -m validate`: run the suite on this host and exit 0 only when every check passed.

Also runnable as a file (`python /opt/gpuenv/validate/__main__.py`): then this folder's own
package is imported, never a `validate` folder that happens to be in the current directory.
"""

import sys
from pathlib import Path

if not __package__:  # run as a file: import the package this file belongs to
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from validate.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
