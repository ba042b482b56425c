"""Load generation and measurement.

The sweep over levels (sweep.py), one level's shared
windows (level.py, windows.py), the load kinds (kinds/), the requests and their transports
(inputs.py, transport.py, shm.py, stream.py), percentiles (percentiles.py), the monitors, and
perf_analyzer's CSV. The server-side split of latency comes from Triton's statistics
(tracker/triton/statistics.py)."""
