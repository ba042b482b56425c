"""Everything about Triton itself: config.pbtxt, model repositories, the client, the servers.

Never imports tracker.search, tracker.tracking, tracker.measure or tracker.study.
"""
