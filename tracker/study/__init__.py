"""The study loop: what one invocation sets up (the session), the tuning loop, one trial, one
measured configuration, the conclusion, the confirmation rounds, and ``tracker profile``.

Only this package and :mod:`tracker.cli` see every layer below them."""
