"""The ``tzr`` command line: ``python -m tensorizer_rs ...`` and the ``tzr``
script a wheel installs both run the native ``tzr`` in this process, so
they take the same arguments and exit the same way as the binary."""

import signal
import sys
import threading
from collections.abc import Sequence

from ._native import tzr_main


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``tzr`` with ``argv`` (default: this process's arguments) and
    returns its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C ends the command as it ends the binary: Python's own
        # handler only sets a flag that native code never reads.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    return tzr_main(["tzr", *args])


if __name__ == "__main__":
    sys.exit(main())
