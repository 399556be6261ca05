"""Per-process probe for the training benchmarks, inert unless ``BENCH_PROBE_DIR`` is set.

``bench/profile_train.py`` and ``bench/scale.py`` put this directory first on ``PYTHONPATH`` of the
local gang, so every role process (the unchanged production entrypoint) imports it at start-up.
At exit it writes ``$BENCH_PROBE_DIR/<pid>.json``: the process's spawn and exit times, its role
(Paddle's variables, set by the entrypoint), and its peak RSS; with ``BENCH_PROBE_PROFILE=1`` it
also profiles the main thread with cProfile into ``<pid>.prof``.
"""
import os

if os.environ.get("BENCH_PROBE_DIR"):
    import atexit
    import json
    import sys
    import time

    def _spawn_time() -> float:
        """Wall-clock time the process was created (before the interpreter started)."""
        with open("/proc/self/stat") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")

    def _peak_rss_kb() -> float:
        """This process's own peak RSS (``VmHWM``: the high-water mark of its address space since
        exec). Not ``ru_maxrss``, which also holds the parent's peak from before the exec."""
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
        return 0.0

    _probe = {"pid": os.getpid(), "spawn_time": _spawn_time(), "site_time": time.time()}
    _profiler = None
    if os.environ.get("BENCH_PROBE_PROFILE") == "1":
        import cProfile

        _profiler = cProfile.Profile()
        _profiler.enable()

    def _write_probe() -> None:
        out_dir = os.environ["BENCH_PROBE_DIR"]
        if _profiler is not None:
            _profiler.disable()
            _profiler.dump_stats(os.path.join(out_dir, f"{os.getpid()}.prof"))
        _probe.update(
            exit_time=time.time(),
            role=os.environ.get("TRAINING_ROLE", ""),
            # a role's helper (the stream reader's pipe) inherits its variables: the program tells
            program=os.path.basename(sys.argv[0]) if getattr(sys, "argv", None) else "",
            trainer_id=os.environ.get("PADDLE_TRAINER_ID"),
            port=os.environ.get("PADDLE_PORT"),
            peak_rss_mb=_peak_rss_kb() / 1024.0)
        with open(os.path.join(out_dir, f"{os.getpid()}.json"), "w") as fh:
            json.dump(_probe, fh)

    atexit.register(_write_probe)
