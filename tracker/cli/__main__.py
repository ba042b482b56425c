"""``python -m tracker.cli``: the same command line as the ``tracker`` entry point."""

from tracker.cli import main

main()
