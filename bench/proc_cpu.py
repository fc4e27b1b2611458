"""A process's CPU time from /proc, for the benchmark scripts beside it."""
import os


def cpu_seconds(pid):
    """User plus system CPU seconds `pid` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
