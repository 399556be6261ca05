"""Benchmarks (each script's last line is ``RESULT key=value ...``); see docs/performance.md."""
