"""Everything about Triton itself: config.pbtxt, model repositories, the client, the servers.

Below measure/ and everything above it (tests/project/test_layers.py, ``TIERS``): it never
imports the measurement, the search, tracking, the session or the commands.
"""
