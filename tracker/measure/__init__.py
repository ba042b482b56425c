"""Load generation and measurement: windows, percentiles, server-side split, monitors."""
