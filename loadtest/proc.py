"""What /proc says about a server process (resident memory, CPU time, CPU affinity) and
about the machine (CPU time busy)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from _common import cpu_model_name

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """VmRSS of a process, from /proc/<pid>/status (0 where /proc is absent)."""
    status = Path(f"/proc/{pid}/status")
    if not status.is_file():
        return 0
    for line in status.read_text(encoding="ascii", errors="replace").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU time of a process and all its threads so far."""
    stat = Path(f"/proc/{pid}/stat")
    if not stat.is_file():
        return 0.0, 0.0
    # Fields after the command name, which may hold spaces: utime and stime are 14 and 15.
    fields = stat.read_text(encoding="ascii", errors="replace").rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process and all its threads so far."""
    return sum(cpu_times(pid))


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of a process's live threads so far."""
    total = 0
    tasks = Path(f"/proc/{pid}/task")
    for status in tasks.glob("*/status") if tasks.is_dir() else []:
        with contextlib.suppress(OSError):  # the thread may have ended
            for line in status.read_text(encoding="ascii", errors="replace").splitlines():
                if "ctxt_switches:" in line:  # voluntary_ and nonvoluntary_
                    total += int(line.split()[1])
    return total


def busy_cpu_seconds() -> float:
    """CPU time all CPUs of this machine spent busy so far (anything but idle and iowait,
    steal included: time the hypervisor gave to someone else), from /proc/stat."""
    stat = Path("/proc/stat")
    if not stat.is_file():
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(
        int, stat.read_text(encoding="ascii").split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def pin_process(pid: int, cpus: set[int]) -> None:
    """Restrict every thread of a process to ``cpus`` (threads it starts later inherit it)."""
    tasks = Path(f"/proc/{pid}/task")
    thread_ids = [int(entry.name) for entry in tasks.iterdir()] if tasks.is_dir() else [pid]
    for thread_id in thread_ids:
        with contextlib.suppress(ProcessLookupError):  # the thread may have ended
            os.sched_setaffinity(thread_id, cpus)


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, with the number of CPUs."""
    return f"{cpu_model_name()}, {os.cpu_count()} CPUs"
