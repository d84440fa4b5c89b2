"""What the benchmark reads of this machine and its processes: free ports, a process tree's CPU
time and peak memory, the hypervisor's steal, what the disk did, and the machine's description."""

import os
import subprocess
import sys
import time

# The rules for a server's port live with the test suites, which start servers the same way.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from py_support import free_port, listening_port, serve_ports, wait_line  # noqa: E402,F401


def wait_port(port, what, proc, timeout=30):
    """Waits until `proc` (or a process it started) listens on `port`. A connection would not say
    so: a port picked and let go may be taken by another socket before the server binds it, and a
    probe would then talk to that one."""
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"bench: {what} exited with {proc.returncode}")
        if port in listening_ports(proc.pid):
            return
        time.sleep(0.05)
    raise SystemExit(f"bench: {what} did not listen on {port}")


def listening_ports(pid):
    """The TCP ports on which `pid` or its descendants hold a listening socket."""
    inodes = set()
    for p in process_tree(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                # sl, local address, remote address, state (0A: LISTEN), ..., inode (the tenth).
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def peak_rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def process_tree(pid):
    """`pid` and its descendants (from /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def proc_stat(path):
    """The name and the fields after it of the process or thread at `path` (/proc/PID or
    /proc/PID/task/TID): fields[0] is its state, fields[11] and [12] its user and system ticks."""
    with open(f"{path}/stat") as f:
        stat = f.read()
    return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()


def cpu_seconds(roots):
    """User + system CPU seconds used so far by the processes `roots` and their descendants,
    with what their children that have exited used (PostgreSQL's autovacuum workers and
    short-lived connections end, and their time moves into the postmaster's)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for root in roots:
        for p in process_tree(root):
            try:
                fields = proc_stat(f"/proc/{p}")[1]
                total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
            except (OSError, IndexError, ValueError):
                pass
    return total / tick


def reap(p):
    """Waits up to 10 s for the signalled process `p` to end, then kills it."""
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def cpu_times():
    """(steal, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[7], sum(v)


def steal_since(t0):
    """The share of CPU time the hypervisor took from this VM since `t0` (cpu_times())."""
    s1, t1 = cpu_times()
    return (s1 - t0[0]) / max(1, t1 - t0[1])


def block_device(path):
    """The /proc/diskstats name of the disk that holds `path` (a partition's parent disk, whose
    flush counters the kernel keeps), or None if it is not on a block device (tmpfs, overlay)."""
    st = os.stat(path)
    sys_path = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not os.path.exists(sys_path):
        return None
    if os.path.exists(os.path.join(sys_path, "partition")):
        sys_path = os.path.dirname(sys_path)
    return os.path.basename(sys_path)


def disk_counters(dev):
    """`dev`'s (writes, ms writing, sectors written, flushes, ms flushing) so far, from
    /proc/diskstats; None if unknown."""
    if dev is None:
        return None
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == dev and len(p) >= 20:
                return int(p[7]), int(p[10]), int(p[9]), int(p[18]), int(p[19])
    return None


def disk_since(dev, d0):
    """What `dev` did since `d0` (disk_counters): MB written, and the mean time a write and a
    flush (what an fsync waits for) took, queueing included. The 1k req/s tail follows the disk
    as much as the CPU's steal; None where unknown."""
    d1 = disk_counters(dev)
    if d0 is None or d1 is None:
        return {"disk_mb": None, "disk_ms_per_write": None, "disk_ms_per_flush": None}
    writes, flushes = d1[0] - d0[0], d1[3] - d0[3]
    return {"disk_mb": (d1[2] - d0[2]) * 512 / 1e6,
            "disk_ms_per_write": (d1[1] - d0[1]) / writes if writes else None,
            "disk_ms_per_flush": (d1[4] - d0[4]) / flushes if flushes else None}


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "kernel": os.uname().release,
            "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
            "wrk": (subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.splitlines() or ["?"])[0]}
