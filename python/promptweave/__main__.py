"""``python -m promptweave``: the ``promptweave`` command line (``render``, ``show``, ``demo``)."""

from promptweave.cli import main

if __name__ == "__main__":
    main()
