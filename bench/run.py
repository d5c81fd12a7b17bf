#!/usr/bin/env python3
"""countdownd benchmark: countdownd vs Redis vs the clock floor. Writes BENCHMARKS.md.

    make bench            # clean release build, then this script
    python3 bench/run.py --quick   # tiny sizes, for a smoke check

Every configuration runs three times (--runs); the report gives the median and the spread (the
lowest and highest of the runs), and calls a target met only where the median meets it and the
spread does not cross it. Comparisons with Redis are ratios within one round: each round runs
countdownd and then Redis back to back. Everything it starts runs on Unix sockets in a temporary
directory and is stopped by pid.
"""
import argparse, json, os, re, platform, random, shutil, signal, socket, statistics, struct, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = subprocess.run(["swift", "build", "-c", "release", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
TOOLS = os.path.join(ROOT, ".build", "bench")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def boot_ns():
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def percentiles(values):
    if not values:
        return None
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"p50": pick(0.50), "p90": pick(0.90), "p99": pick(0.99), "max": ordered[-1], "n": len(ordered)}


def build_tools():
    os.makedirs(TOOLS, exist_ok=True)
    for tool in ("eventlog", "loadgen", "floor", "floorserver", "feed", "bystander", "lister"):
        subprocess.run(["cc", "-O2", "-o", os.path.join(TOOLS, tool), os.path.join(ROOT, "bench", tool + ".c"), "-lpthread", "-Wall"], check=True)


def rss_bytes(pid):
    """The resident set of a process, in bytes."""
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid):
    """User and system CPU time a process has used, in seconds."""
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_process(process):
    """SIGTERM, then SIGKILL if it has not exited within 10 s; always reaped."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class NotifySocket:
    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)

    def wait_for(self, text, timeout):
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(4096).decode()
            except socket.timeout:
                break
            if text in data.split("\n"):
                return True
        return False


class Daemon:
    """A release countdownd on a temporary socket and state directory."""

    def __init__(self, workdir, state=None, extra=(), prefix=()):
        """`prefix` goes before the command (`ip netns exec NAME`: a host in a network namespace)."""
        self.socket = os.path.join(workdir, "d.sock")
        self.state = state or os.path.join(workdir, "state")
        notify_path = os.path.join(workdir, "notify-%d.sock" % random.randrange(1 << 30))
        self.notify = NotifySocket(notify_path)
        env = dict(os.environ, NOTIFY_SOCKET=notify_path)
        for key in ("LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC", "JOURNAL_STREAM"):
            env.pop(key, None)
        self.launched = time.monotonic()
        # Lifecycle logging off: a line per start/done to stderr is not what is being measured.
        self.process = subprocess.Popen(
            list(prefix) + [os.path.join(BIN, "countdownd"), "--socket", self.socket, "--state-dir", self.state, "--log-level", os.environ.get("CD_LOG_LEVEL", "warning")] + list(extra),
            env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, "daemon.log"), "a"))
        if not self.notify.wait_for("READY=1", 60):
            raise RuntimeError("countdownd did not become ready")
        self.ready_after = time.monotonic() - self.launched
        # Nobody reads STATUS= updates here; closing makes the daemon's sends fail at once.
        self.notify.sock.close()
        os.unlink(notify_path)

    def cpu_seconds(self):
        return cpu_seconds(self.process.pid)

    def rss_bytes(self):
        return rss_bytes(self.process.pid)

    def stop(self):
        stop_process(self.process)


def pipelined(sock_path, lines, greeting=True):
    """Sends lines in chunks while reading replies; returns the reply lines."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    f = s.makefile("rb")
    if greeting:
        f.readline()
    replies = []
    chunk = 2000
    for i in range(0, len(lines), chunk):
        s.sendall("".join(lines[i:i + chunk]).encode())
        for _ in lines[i:i + chunk]:
            replies.append(f.readline().decode())
    s.close()
    return replies


def feed(sock_path, lines, workdir, greeting, chunk=2000, rate=None):
    """Sends lines with bench/feed.c, `chunk` at a time (paced at `rate` lines per second if
    given); returns (replies, errors)."""
    path = os.path.join(workdir, "feed-%d.txt" % random.randrange(1 << 30))
    with open(path, "w") as f:
        f.write("".join(lines))
    out = subprocess.run([os.path.join(TOOLS, "feed"), sock_path, path, str(chunk), "1" if greeting else "0"] + ([str(rate)] if rate else []),
                         capture_output=True, text=True, check=True, timeout=300).stdout.split()
    os.unlink(path)
    return int(out[0]), int(out[1])


def start_eventlog(mode, sock_path, out, expected, timeout, request=None):
    proc = subprocess.Popen([os.path.join(TOOLS, "eventlog"), mode, sock_path, out, str(expected), str(timeout)] + ([request] if request else []),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "READY":
        raise RuntimeError("eventlog did not subscribe: " + proc.stderr.read())
    return proc



RUNS = 3
MIXED_RATE = 25_000  # STARTs per second in the mixed-load run: 100,000 arrive over 4 s.
THROUGHPUT_N = 200_000
MILLION = 1_000_000
LIST_REPEATS = 10  # LISTs of the million in a row, while the bystander measures.


def durations_ms(n, seed, low=1000, high=5000):
    rng = random.Random(seed)
    return [int(low + rng.random() * (high - low)) for _ in range(n)]


def fresh_dir(workdir, name):
    path = os.path.join(workdir, "%s-%d" % (name, random.randrange(1 << 30)))
    os.makedirs(path)
    return path


def countdownd_lateness(workdir, n, seed, mixed=False):
    """N countdowns and one subscriber to all. Alone: 1-5 s, started as fast as they are
    answered, then the events. Mixed: 3-6 s, started at MIXED_RATE a second, so ticks and
    `done`s fall due while STARTs keep arriving."""
    directory = fresh_dir(workdir, "lateness")
    daemon = Daemon(directory)
    try:
        events_file = os.path.join(directory, "events.log")
        logger = start_eventlog("countdownd", daemon.socket, events_file, n, 60)
        rss_before = daemon.rss_bytes()
        spread = durations_ms(n, seed, 3000, 6000) if mixed else durations_ms(n, seed)
        lines = ["START c%d %dms\n" % (i, d) for i, d in enumerate(spread)]
        cpu_start = daemon.cpu_seconds()
        _, errors = feed(daemon.socket, lines, directory, greeting=True, chunk=500 if mixed else 2000, rate=MIXED_RATE if mixed else None)
        rss_after = daemon.rss_bytes()
        # The journal files as they are now, hard-linked aside: the `done`s can fill the journal
        # to a snapshot (16 MiB), after which the files holding the `started` records are gone.
        kept = os.path.join(directory, "journal-at-feed")
        os.makedirs(kept)
        for name in os.listdir(daemon.state):
            if name.startswith("journal."):
                os.link(os.path.join(daemon.state, name), os.path.join(kept, name))
        cpu_before = daemon.cpu_seconds()
        logger.wait(90)
        cpu_after = daemon.cpu_seconds()
        # Exact deadlines, on the same CLOCK_BOOTTIME the subscriber stamps events with, from the
        # `started` records of the journal. Read afterwards, so that it takes no CPU from the run.
        deadlines = journal_deadlines(kept)
        if len(deadlines) != n:
            raise RuntimeError("found %d of %d deadlines in the journal" % (len(deadlines), n))
        done, ticks, delivered = event_lateness(events_file, deadlines)
        return {
            "done": percentiles(done), "tick": percentiles(ticks), "errors": errors,
            # Alone: the daemon's CPU from the last START to the last event, per event delivered.
            "cpu_per_event_us": (cpu_after - (cpu_start if mixed else cpu_before)) / max(delivered, 1) * 1e6,
            # The same CPU per countdown (its ticks and its done together), to set beside Redis's per key.
            "cpu_per_countdown_us": (cpu_after - (cpu_start if mixed else cpu_before)) / n * 1e6,
            "rss_per_countdown": (rss_after - rss_before) / n,
        }
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def event_lateness(events_file, deadlines):
    """Lateness (ms) of the `done`s and of the `tick`s the subscriber logged, each against its
    nominal instant (the deadline less the remaining time it announces), and the events delivered."""
    done, ticks, delivered = [], [], 0
    for line in open(events_file):
        arrived, _real, kind, name, remaining = line.split()
        delivered += 1
        deadline = deadlines.get(name)
        if deadline is None:
            continue
        nominal = deadline - int(remaining) * 1_000_000
        (done if kind == "done" else ticks).append((int(arrived) - nominal) / 1e6)
    return done, ticks, delivered


def floorserver_lateness(workdir, n, seed):
    """The same run as countdownd's, events alone, against `bench/floorserver.c`: the bare C
    server with countdownd's lines, wake-up rule and journal write per wake-up (issue 40)."""
    directory = fresh_dir(workdir, "floorserver")
    path = os.path.join(directory, "s.sock")
    deadlines_file = os.path.join(directory, "deadlines")
    server = subprocess.Popen([os.path.join(TOOLS, "floorserver"), path, os.path.join(directory, "journal"), deadlines_file],
                              stdout=subprocess.PIPE, text=True)
    try:
        if server.stdout.readline().strip() != "READY":
            raise RuntimeError("floorserver did not start")
        events_file = os.path.join(directory, "events.log")
        logger = start_eventlog("countdownd", path, events_file, n, 60)
        lines = ["START c%d %dms\n" % (i, d) for i, d in enumerate(durations_ms(n, seed))]
        _, errors = feed(path, lines, directory, greeting=True, chunk=2000)
        cpu_before = cpu_seconds(server.pid)
        logger.wait(90)
        cpu_after = cpu_seconds(server.pid)
        stop_process(server)
        deadlines = {}
        for line in open(deadlines_file):
            name, deadline = line.split()
            deadlines[name] = int(deadline)
        if len(deadlines) != n:
            raise RuntimeError("floorserver kept %d of %d deadlines" % (len(deadlines), n))
        done, ticks, delivered = event_lateness(events_file, deadlines)
        return {"done": percentiles(done), "tick": percentiles(ticks), "errors": errors,
                "cpu_per_event_us": (cpu_after - cpu_before) / max(delivered, 1) * 1e6}
    finally:
        if server.poll() is None:
            stop_process(server)
        shutil.rmtree(directory, ignore_errors=True)


def redis_lateness(workdir, n, seed):
    redis = Redis(workdir)
    try:
        events_file = os.path.join(workdir, "redis-events-%d.log" % random.randrange(1 << 30))
        logger = start_eventlog("redis", redis.socket, events_file, n, 30)
        now_ms = time.time_ns() // 1_000_000
        deadlines = {}
        lines = []
        for i, d in enumerate(durations_ms(n, seed)):
            deadlines["k%d" % i] = now_ms + d
            lines.append("SET k%d 1 PXAT %d\r\n" % (i, now_ms + d))
        feed(redis.socket, lines, workdir, greeting=False)
        cpu_before = cpu_seconds(redis.process.pid)
        logger.wait(60)
        cpu_after = cpu_seconds(redis.process.pid)
        late = []
        for line in open(events_file):
            _boot, real, _kind, key, _ = line.split()
            if key in deadlines:
                late.append((int(real) / 1e6) - deadlines[key])
        os.unlink(events_file)
        # As countdownd's: Redis's CPU from the last SET's reply to the last notification, per
        # notification delivered (its only events are the expirations).
        # (/proc counts CPU in 10 ms steps: meaningful at 100,000 keys, not at small N.)
        return {"done": percentiles(late), "cpu_per_event_us": (cpu_after - cpu_before) / max(len(late), 1) * 1e6}
    finally:
        redis.stop()


def countdownd_throughput(workdir, depth, durability):
    directory = fresh_dir(workdir, "throughput")
    daemon = Daemon(directory, extra=["--durability", durability])
    try:
        out = subprocess.run([os.path.join(TOOLS, "loadgen"), daemon.socket, "8", str(THROUGHPUT_N), str(depth), "t"],
                             capture_output=True, text=True, timeout=600).stdout.split()
        return float(out[0]), int(out[1])
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def redis_throughput(workdir, depth, fsync):
    """SET PX per second from the same client as countdownd's figure (bench/loadgen.c), and from
    redis-benchmark (single-threaded, lighter on the shared cores), for scale."""
    redis = Redis(workdir, fsync=fsync)
    try:
        same = subprocess.run([os.path.join(TOOLS, "loadgen"), redis.socket, "8", str(THROUGHPUT_N), str(depth), "key:", "redis"],
                              capture_output=True, text=True, timeout=600).stdout.split()
        out = subprocess.run(["redis-benchmark", "-s", redis.socket, "-c", "8", "-n", str(THROUGHPUT_N), "-P", str(depth),
                              "-r", "1000000", "-q", "SET", "key:__rand_int__", "1", "PX", "60000"],
                             capture_output=True, text=True, timeout=600).stdout
        # "SET key:__rand_int__ 1 PX 60000: 113122.17 requests per second, p50=..."
        found = re.findall(r"([0-9.]+) requests per second", out)
        return float(same[0]) if same else None, float(found[-1]) if found else None
    finally:
        redis.stop()


def wait_for_snapshot(state, timeout):
    """Waits until no snapshot is being written (its temporary file is gone) for half a second."""
    deadline = time.monotonic() + timeout
    quiet_since = None
    while time.monotonic() < deadline:
        busy = os.path.exists(os.path.join(state, "countdownd.snapshot.tmp"))
        now = time.monotonic()
        quiet_since = None if busy else (quiet_since or now)
        if quiet_since and now - quiet_since >= 0.5:
            return True
        time.sleep(0.1)
    return False


def countdownd_million(workdir, n):
    """A million (N) one-hour countdowns, no subscriber: START rate; RSS per countdown while the
    snapshot after them is written (peak) and once it is (settled); a LIST of all of them with a
    bystander sending PING every millisecond; and, on a fresh state, launch to READY after a
    SIGKILL right after the STARTs (the journal's tail is then as long as it gets)."""
    result = {}
    directory = fresh_dir(workdir, "million")
    daemon = Daemon(directory)
    try:
        lines = ["START m%d 1h\n" % i for i in range(n)]
        rss_before = daemon.rss_bytes()
        started = time.monotonic()
        _, errors = feed(daemon.socket, lines, directory, greeting=True)
        result["start_rate"] = n / (time.monotonic() - started)
        result["errors"] = errors
        result["rss_peak"] = (daemon.rss_bytes() - rss_before) / n
        if not wait_for_snapshot(daemon.state, 120):
            raise RuntimeError("the snapshot after %d STARTs did not finish" % n)
        result["rss_settled"] = (daemon.rss_bytes() - rss_before) / n
        pings = os.path.join(directory, "pings.txt")
        bystander = subprocess.Popen([os.path.join(TOOLS, "bystander"), daemon.socket, "1000", pings], stdout=subprocess.PIPE, text=True)
        if bystander.stdout.readline().strip() != "READY":
            raise RuntimeError("bystander did not connect")
        listed = subprocess.run([os.path.join(TOOLS, "lister"), daemon.socket, str(LIST_REPEATS)], capture_output=True, text=True, timeout=600).stdout.split()
        bystander.send_signal(signal.SIGTERM)
        bystander.wait(30)
        result["list_lines"], result["list_seconds"] = int(listed[0]), float(listed[1])
        result["ping"] = percentiles([int(x) / 1e6 for x in open(pings)])
        result["rss_after_list"] = (daemon.rss_bytes() - rss_before) / n
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)
    directory = fresh_dir(workdir, "million-kill")
    daemon = Daemon(directory)
    try:
        feed(daemon.socket, lines, directory, greeting=True)
        daemon.process.send_signal(signal.SIGKILL)
        daemon.process.wait()
        # For scale: the journal behind the snapshot at the kill, and reading the files once.
        files = [os.path.join(daemon.state, f) for f in os.listdir(daemon.state)]
        result["journal_behind_mb"] = sum(os.path.getsize(f) for f in files if os.path.basename(f).startswith("journal.")) / 1e6
        started = time.monotonic()
        subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL, check=True)
        result["cat_ms"] = (time.monotonic() - started) * 1000
        relaunched = Daemon(directory)
        result["launch_ms"] = relaunched.ready_after * 1000
        relaunched.process.send_signal(signal.SIGKILL)
        relaunched.process.wait()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return result


def redis_million(workdir, n):
    redis = Redis(workdir)
    try:
        rss_before = redis.rss_bytes()
        feed(redis.socket, ["SET m%d 1 PX 3600000\r\n" % i for i in range(n)], workdir, greeting=False)
        return {"rss_per_key": (redis.rss_bytes() - rss_before) / n}
    finally:
        redis.stop()


def launch_to_ready(workdir, n):
    """Launch to READY with N countdowns to restore from a clean stop (a snapshot)."""
    directory = fresh_dir(workdir, "restore")
    daemon = Daemon(directory)
    feed(daemon.socket, ["START r%d 1h\n" % i for i in range(n)], directory, greeting=True)
    daemon.stop()
    relaunched = Daemon(directory)
    ready = relaunched.ready_after * 1000
    relaunched.stop()
    shutil.rmtree(directory, ignore_errors=True)
    return ready


def journal_deadlines(state):
    """{name: deadline on CLOCK_BOOTTIME in ns} from the `started` records of the journal files
    (format: Sources/CountdownDaemon/Storage/JournalFormat.swift)."""
    deadlines = {}
    for file in sorted(f for f in os.listdir(state) if f.startswith("journal.")):
        data = open(os.path.join(state, file), "rb").read()
        offset = 0
        # Frames: magic, length, CRC-32C, then (numbered frames, "CDJ\x02") the frame's index.
        while offset + 12 <= len(data) and data[offset:offset + 3] == b"CDJ" and data[offset + 3] in (1, 2):
            header = 20 if data[offset + 3] == 2 else 12
            (length,) = struct.unpack_from("<I", data, offset + 4)
            position, end = offset + header, offset + header + length
            while position < end:
                kind = data[position]
                if kind == 1:  # header: generation, created, boot id, then (numbered) the frame it follows
                    position += 1 + 16
                    position += 1 + data[position]
                    position += 12 if header == 20 else 0
                    continue
                if kind in (3, 5):  # removed: seq, owner, total, name (then, numbered, owner_seq)
                    position += 1 + 20
                    position += 1 + data[position]
                    position += 8 if kind == 5 else 0
                    continue
                fields = struct.unpack_from("<QBBIqqqqqqq", data, position + 1)
                position += 1 + struct.calcsize("<QBBIqqqqqqq")
                name = data[position + 1:position + 1 + data[position]].decode()
                position += 1 + data[position] + 16  # name, then the state's late_ms and pinned_unix_ms
                if kind == 4:  # a flagged event's flags, then (bit 2) the owner's own number
                    position += 1 + (8 if data[position] & 4 else 0)
                if fields[1] == 0:  # started
                    deadlines[name] = fields[8]
            offset = end
    return deadlines



class Redis:
    """redis-server on a Unix socket, TCP off. `fsync`: None for no persistence, or the
    append-only file's appendfsync policy: `everysec` (each change written to the OS before the
    reply and synced within a second, like countdownd's default `--durability process`) or
    `always` (synced before the reply, like `--durability power`)."""

    def __init__(self, workdir, fsync=None):
        directory = os.path.join(workdir, "redis-%s-%d" % (fsync or "plain", random.randrange(1 << 30)))
        os.makedirs(directory, exist_ok=True)
        self.socket = os.path.join(directory, "redis.sock")
        persistence = ["--appendonly", "yes", "--appendfsync", fsync] if fsync else ["--appendonly", "no"]
        self.process = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", self.socket, "--unixsocketperm", "700", "--save", ""]
            + persistence + ["--notify-keyspace-events", "Ex", "--dir", directory, "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if os.path.exists(self.socket):
                break
            time.sleep(0.05)

    def rss_bytes(self):
        return rss_bytes(self.process.pid)

    def stop(self):
        stop_process(self.process)



def floor_lateness(workdir, n, seed):
    out = os.path.join(workdir, "floor-%d.txt" % n)
    subprocess.run([os.path.join(TOOLS, "floor"), str(n), str(seed), out], check=True, timeout=60)
    return {"done": percentiles([int(x) / 1e6 for x in open(out)])}


def analysis():
    """The hand-written notes on the figures (bench/notes.md), appended to the report."""
    path = os.path.join(ROOT, "bench", "notes.md")
    return open(path).read() if os.path.exists(path) else ""




def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Etcd:
    """A real three-member etcd (Debian's etcd-server) on loopback ports (its clients' ports on
    `host`'s address, which another network namespace can reach)."""

    def __init__(self, workdir, host="127.0.0.1"):
        self.directory = fresh_dir(workdir, "etcd")
        members = [("m%d" % i, free_port(), free_port()) for i in range(3)]
        self.ports = [client for _, client, _ in members]
        self.endpoints = ["http://%s:%d" % (host, client) for _, client, _ in members]
        initial = ",".join("%s=http://127.0.0.1:%d" % (name, peer) for name, _, peer in members)
        self.processes = []
        for name, client, peer in members:
            self.processes.append(subprocess.Popen([
                "etcd", "--name", name, "--data-dir", os.path.join(self.directory, name),
                "--listen-client-urls", "http://%s:%d" % (host, client), "--advertise-client-urls", "http://%s:%d" % (host, client),
                "--listen-peer-urls", "http://127.0.0.1:%d" % peer, "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                "--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token", "bench",
                "--logger", "zap", "--log-outputs", os.path.join(self.directory, name + ".log"),
            ], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if all(b"true" in etcd_post(endpoint, "/health", None) for endpoint in self.endpoints):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("etcd did not become healthy")

    def stop(self):
        for process in self.processes:
            stop_process(process)


def etcd_post(endpoint, path, body, connection=None):
    """POST (GET without a body) to etcd's gateway; the response body."""
    import http.client
    own = connection is None
    if own:
        host, port = endpoint[len("http://"):].split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
    if body is None:
        connection.request("GET", path)
    else:
        connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    data = connection.getresponse().read()
    if own:
        connection.close()
    return data


def etcd_txn_rate(endpoints, total, clients=8):
    """Create-if-absent transactions per second, `clients` connections one at a time each: what
    a cluster START costs etcd itself, with no countdownd in the way."""
    import base64, http.client, threading
    per_client = total // clients

    def run(index):
        host, port = endpoints[index % len(endpoints)][len("http://"):].split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        for n in range(per_client):
            key = base64.b64encode(("/bare/%d-%d" % (index, n)).encode()).decode()
            etcd_post(None, "/v3/kv/txn", {
                "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                "success": [{"request_put": {"key": key, "value": base64.b64encode(b"1").decode()}}],
                "failure": [{"request_range": {"key": key}}],
            }, connection=connection)
        connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return per_client * clients / (time.monotonic() - started)


def etcd_txn_latency(endpoints, count=200):
    """Milliseconds per create-if-absent transaction, one at a time, straight to etcd: the floor
    under a cluster `done`'s lateness (each `done` is such a transaction)."""
    import base64, http.client
    host, port = endpoints[0][len("http://"):].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    took = []
    for n in range(count):
        key = base64.b64encode(("/latency/%d" % n).encode()).decode()
        started = time.monotonic()
        etcd_post(None, "/v3/kv/txn", {
            "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": key, "value": base64.b64encode(b"1").decode()}}],
            "failure": [],
        }, connection=connection)
        took.append((time.monotonic() - started) * 1000)
    connection.close()
    return percentiles(took)


def stats(path):
    """A daemon's STATS, as a dict of strings."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    f = s.makefile("rb")
    f.readline()
    s.sendall(b"STATS\n")
    result = {}
    for line in f:
        parts = line.decode().split()
        if parts[0] != "STAT":
            break
        result[parts[1]] = parts[2] if len(parts) > 2 else ""
    s.close()
    return result


def cluster_round(workdir, total, n, probes):
    """Cluster mode against a real three-member etcd on loopback: START throughput (8 clients,
    one at a time each) next to etcd's own rate for the same transactions; `done` lateness as
    seen on the host that started the countdowns and on another; and replica lag: from the OK on
    one host to the `started` event on the other."""
    etcd = Etcd(workdir)
    hosts = []
    try:
        cluster = ["--cluster", ",".join(etcd.endpoints)]
        hosts = [Daemon(fresh_dir(workdir, "cluster-a"), extra=cluster), Daemon(fresh_dir(workdir, "cluster-b"), extra=cluster)]
        a, b = hosts
        result = {"etcd_txn_rate": etcd_txn_rate(etcd.endpoints, total), "etcd_txn_latency": etcd_txn_latency(etcd.endpoints)}
        out = subprocess.run([os.path.join(TOOLS, "loadgen"), a.socket, "8", str(total), "1", "t"], capture_output=True, text=True, timeout=600).stdout.split()
        result["start_rate"], result["start_errors"] = float(out[0]), int(out[1])
        # The same 8 clients, 32 requests in flight each: pipelined changes wait in parallel and
        # go to etcd together.
        out = subprocess.run([os.path.join(TOOLS, "loadgen"), a.socket, "8", str(total), "32", "u"], capture_output=True, text=True, timeout=600).stdout.split()
        result["start_rate_pipelined"], result["start_errors"] = float(out[0]), result["start_errors"] + int(out[1])
        # done lateness on both hosts; deadlines (wall clock) from the OK replies.
        logs = []
        for host in hosts:
            path = os.path.join(workdir, "cluster-events-%d.log" % random.randrange(1 << 30))
            logs.append((path, start_eventlog("countdownd", host.socket, path, n, 60)))
        replies = pipelined(a.socket, ["START d%d %dms\n" % (i, d) for i, d in enumerate(durations_ms(n, n, 1000, 3000))])
        deadlines = {line.split()[1]: int(line.split()[5]) for line in replies if line.startswith("OK ")}
        sent_before = [int(stats(host.socket)["cluster_transactions"]) for host in hosts]
        for label, (path, logger) in zip(("done_on_starter", "done_on_other"), logs):
            logger.wait(60)
            late = [int(real) / 1e6 - deadlines[name] for _boot, real, kind, name, _ in (l.split() for l in open(path))
                    if kind == "done" and name in deadlines]
            result[label] = percentiles(late)
            os.unlink(path)
        # etcd transactions the whole fleet sent for those dones, per done.
        sent_after = [int(stats(host.socket)["cluster_transactions"]) for host in hosts]
        result["transactions_per_done"] = (sum(sent_after) - sum(sent_before)) / max(1, len(deadlines))
        # A burst: n deadlines at one moment (a wall-clock time), started through host A; their
        # dones as host B's subscriber receives them, and the fleet's transactions for them.
        at = int(time.time() * 1000) + 10_000
        w = socket.socket(socket.AF_UNIX); w.connect(b.socket); fw = w.makefile("rb"); fw.readline()
        w.sendall(b"SUBSCRIBE EVENTS done\n"); fw.readline()
        started = sum(line.startswith("OK ") for line in pipelined(a.socket, ["START burst%d AT %d\n" % (i, at) for i in range(n)]))
        sent_before = [int(stats(host.socket)["cluster_transactions"]) for host in hosts]
        late = []
        while len(late) < started:
            fields = fw.readline().split()
            if fields[2:3] == [b"done"] and fields[3].startswith(b"burst"):
                late.append(time.time() * 1000 - at)
        w.close()
        time.sleep(3)  # past the other host's grace: any takeover it sent is counted
        sent_after = [int(stats(host.socket)["cluster_transactions"]) for host in hosts]
        result["burst_started"] = started
        result["burst_transactions_per_done"] = (sum(sent_after) - sum(sent_before)) / max(1, started)
        result["burst_done_late"] = percentiles(late)
        # Replica lag, one change at a time.
        s = socket.socket(socket.AF_UNIX); s.connect(a.socket); fa = s.makefile("rb"); fa.readline()
        t = socket.socket(socket.AF_UNIX); t.connect(b.socket); fb = t.makefile("rb"); fb.readline()
        t.sendall(b"SUBSCRIBE EVENTS started\n"); fb.readline()
        lags = []
        for i in range(probes):
            s.sendall(b"START lag%d 1h\n" % i)
            fa.readline()
            answered = time.monotonic()
            while not fb.readline().split()[3:4] == [b"lag%d" % i]:
                pass
            lags.append((time.monotonic() - answered) * 1000)
        s.close(); t.close()
        result["replica_lag"] = percentiles(lags)
        return result
    finally:
        stop_cluster(etcd, hosts)


def stop_cluster(etcd, hosts, children=()):
    """The end of a cluster run: kills the helper processes still running (loads, probers,
    subscribers; `None` for one never started), then stops the daemons and etcd."""
    for child in children:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
    for host in hosts:
        host.stop()
    etcd.stop()


def summarize(values):
    """(median, lowest, highest) of the runs' values, or None."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def cell(values, form="%.3f"):
    s = summarize(values)
    if s is None:
        return "n/a"
    median, low, high = s
    return ("%s (%s–%s)" % (form, form, form)) % (median, low, high)


def met(values, target, at_most=True):
    """'yes' only when the median meets the target and the spread does not cross it."""
    s = summarize(values)
    if s is None:
        return "n/a"
    median, low, high = s
    if at_most:
        return "yes" if high <= target else ("**no** (spread crosses it)" if median <= target else "**no**")
    return "yes" if low >= target else ("**no** (spread crosses it)" if median >= target else "**no**")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measurement")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--report-from", help="write the report from the raw figures of an earlier run (the .json written beside OUTPUT)")
    args = parser.parse_args()
    if args.report_from:
        raw = json.load(open(args.report_from))
        r = raw["r"]
        for key in ("alone", "redis", "floor", "floorserver"):
            r[key] = {int(n): runs for n, runs in r.get(key, {}).items()}
        r.setdefault("cluster", [])
        # The run's own date, commit and machine: kept in the raw figures, or (for figures
        # written before they were) in the report being rewritten.
        header = raw.get("header")
        if header is None and os.path.exists(args.output):
            lines = [l.rstrip("\n") for l in open(args.output)]
            kept = [next((l for l in lines if l.startswith(start)), None) for start in ("Written by `make bench`", "Machine:")]
            header = kept if None not in kept else None
        write_report(args, raw["sizes"], raw["million"], raw["restore_n"], r, raw["have_redis"], header)
        return
    global THROUGHPUT_N
    sizes = [200, 1000] if args.quick else [1000, 10_000, 100_000]
    million = 20_000 if args.quick else MILLION
    restore_n = 2000 if args.quick else 100_000
    if args.quick:
        THROUGHPUT_N = 20_000
    build_tools()
    have_redis = bool(shutil.which("redis-server") and shutil.which("redis-benchmark"))
    have_etcd = bool(shutil.which("etcd"))
    workdir = tempfile.mkdtemp(prefix="cdbench.")
    r = {"alone": {n: [] for n in sizes}, "redis": {n: [] for n in sizes}, "floor": {n: [] for n in sizes},
         "floorserver": {n: [] for n in sizes},
         "mixed": [], "throughput": {}, "million": [], "redis_million": [], "restore": [], "cluster": []}
    try:
        for run in range(args.runs):
            log("round %d of %d" % (run + 1, args.runs))
            for n in sizes:
                log("  lateness, N=%d" % n)
                r["alone"][n].append(countdownd_lateness(workdir, n, seed=n + run))
                r["floor"][n].append(floor_lateness(workdir, n, seed=n + run))
                r["floorserver"][n].append(floorserver_lateness(workdir, n, seed=n + run))
                if have_redis:
                    r["redis"][n].append(redis_lateness(workdir, n, seed=n + run))
            log("  mixed load, N=%d" % sizes[-1])
            r["mixed"].append(countdownd_lateness(workdir, sizes[-1], seed=7 + run, mixed=True))
            log("  START throughput")
            for depth in (1, 32):
                for durability, fsync in (("process", "everysec"), ("power", "always")):
                    rate, errors = countdownd_throughput(workdir, depth, durability)
                    same, benchmark = redis_throughput(workdir, depth, fsync) if have_redis else (None, None)
                    r["throughput"].setdefault("%d/%s" % (depth, durability), []).append((rate, errors, same, benchmark))
                same, benchmark = redis_throughput(workdir, depth, None) if have_redis else (None, None)
                r["throughput"].setdefault("%d/redis-plain" % depth, []).append((same, 0, benchmark, None))
            log("  %d countdowns" % million)
            r["million"].append(countdownd_million(workdir, million))
            if have_redis:
                r["redis_million"].append(redis_million(workdir, million))
            r["restore"].append(launch_to_ready(workdir, restore_n))
            if have_etcd:
                log("  cluster mode")
                r["cluster"].append(cluster_round(workdir, 2000 if args.quick else 10_000, 200 if args.quick else 1000, 50 if args.quick else 200))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    # The raw figures, so a report can be written again (--report-from) without rerunning.
    raw = {"sizes": sizes, "million": million, "restore_n": restore_n, "have_redis": have_redis, "r": r,
           "header": report_header(args, have_redis)}
    json.dump(raw, open(os.path.splitext(args.output)[0] + ".json", "w"))
    write_report(args, sizes, million, restore_n, r, have_redis, raw["header"])


def report_header(args, have_redis):
    """The report's first lines: when, which commit, which machine (of the run measured)."""
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
    swift = subprocess.run(["swift", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    redis_version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2] if have_redis else "not installed"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return [
        "Written by `make bench` (`bench/run.py`) on %s, commit `%s`. %s" % (time.strftime("%Y-%m-%d"), commit, "**Quick smoke run: sizes too small to mean anything.**" if args.quick else ""),
        "Machine: %s, %d cores, Linux %s; %s; Redis %s." % (cpu, os.cpu_count(), platform.release(), swift, redis_version),
    ]


def write_report(args, sizes, million, restore_n, r, have_redis, header=None):
    header = header or report_header(args, have_redis)
    # Redis's version as the header gives it ("…; Redis v=7.0.15.").
    redis_version = header[1].rsplit("Redis ", 1)[-1].rstrip(".")
    big = sizes[-1]
    N = lambda n: "{:,}".format(n)
    lines = []
    w = lines.append
    w("# Benchmarks")
    w("")
    w(header[0])
    w("")
    w(header[1])
    w("")
    w("These machines are shared 2-core VMs and noisy. Every configuration ran **%d time(s)**; each figure is the **median (lowest–highest)** of the runs. A target is **met** only where the median meets it *and* the whole spread stays on its side. Comparisons with Redis are ratios within one round (countdownd, then Redis, back to back), summarized the same way." % args.runs)
    w("")
    # Targets first.
    alone_done = [x["done"]["p99"] for x in r["alone"][big]]
    alone_tick = [x["tick"]["p99"] for x in r["alone"][big]]
    mixed_done = [x["done"]["p99"] for x in r["mixed"]]
    mixed_tick = [x["tick"]["p99"] for x in r["mixed"]]
    cpu_event = [x["cpu_per_event_us"] for x in r["alone"][big]]
    def ratios(depth, durability):
        return [(a / c) if a and c else None for a, _e, c, _b in r["throughput"].get("%d/%s" % (depth, durability), [])]
    memory = [x["rss_settled"] for x in r["million"]]
    launch = [x["launch_ms"] for x in r["million"]]
    ping = [x["ping"]["p99"] for x in r["million"]]
    w("## Targets")
    w("")
    w("| figure | target | median (lowest–highest) | met |")
    w("|---|---|---|---|")
    w("| `done` p99 at N=%s, events alone | ≤ 1 ms | %s ms | %s |" % (N(big), cell(alone_done), met(alone_done, 1)))
    w("| `tick` p99 at N=%s, events alone | ≤ 1 ms | %s ms | %s |" % (N(big), cell(alone_tick), met(alone_tick, 1)))
    w("| `done` p99 at N=%s, mixed load | ≤ 1 ms | %s ms | %s |" % (N(big), cell(mixed_done), met(mixed_done, 1)))
    w("| `tick` p99 at N=%s, mixed load | ≤ 1 ms | %s ms | %s |" % (N(big), cell(mixed_tick), met(mixed_tick, 1)))
    w("| CPU per delivered event at N=%s | ≤ 1 µs | %s µs | %s |" % (N(big), cell(cpu_event, "%.2f"), met(cpu_event, 1)))
    redis_cpu = [x.get("cpu_per_event_us") for x in r["redis"].get(big, [])]
    if redis_cpu and None not in redis_cpu:
        cpu_ratio = [c / max(rc, 1e-9) for c, rc in zip(cpu_event, redis_cpu)]
        w("| the same ÷ Redis's CPU per expired-key notification, within each round (Redis: %s µs) | < 1 | %s× | %s |" % (cell(redis_cpu, "%.2f"), cell(cpu_ratio, "%.2f"), met(cpu_ratio, 1)))
        # Like for like: a countdown's events (about 3.5 at 1-5 s: its ticks and its done) against
        # a key's one notification. Not a target; it says what the per-event ratio leaves out.
        per_countdown = [x.get("cpu_per_countdown_us") for x in r["alone"][big]]
        if None not in per_countdown:
            like = [c / max(rc, 1e-9) for c, rc in zip(per_countdown, redis_cpu)]
            w("| CPU per countdown (its ticks and its `done`) ÷ Redis's per key expired, within each round | | %s× | |" % cell(like, "%.2f"))
    floor_cpu = [x.get("cpu_per_event_us") for x in r.get("floorserver", {}).get(big, [])]
    if floor_cpu and len(floor_cpu) == len(cpu_event):
        floor_ratio = [c / max(fc, 1e-9) for c, fc in zip(cpu_event, floor_cpu)]
        w("| the same ÷ the floor server's (`bench/floorserver.c`: the same lines, wake-up rule and journal write per wake-up), within each round (floor server: %s µs) | ≤ 1.25 | %s× | %s |" % (
            cell(floor_cpu, "%.2f"), cell(floor_ratio, "%.2f"), met(floor_ratio, 1.25)))
    for depth in (1, 32):
        for durability, fsync in (("process", "everysec"), ("power", "always")):
            values = ratios(depth, durability)
            w("| START ÷ Redis with AOF, 8 clients, %s, `--durability %s` vs `appendfsync %s` | ≥ 1 | %s× | %s |" % (
                "unpipelined" if depth == 1 else "pipeline 32", durability, fsync, cell(values, "%.2f"), met(values, 1, at_most=False)))
    w("| RSS per countdown at %s (after the snapshot) | ≤ 112 B | %s B | %s |" % (N(million), cell(memory, "%.0f"), met(memory, 112)))
    w("| launch to READY with %s, after SIGKILL (`cat` of its files: %s ms) | ≤ 0.5 s | %s ms | %s |" % (N(million), cell([x.get("cat_ms", 0) for x in r["million"]], "%.0f"), cell(launch, "%.0f"), met(launch, 500)))
    behind = [x.get("journal_behind_mb", 0) for x in r["million"]]
    w("| journal behind the snapshot at that SIGKILL | ≤ 32 MB | %s MB | %s |" % (cell(behind, "%.1f"), met(behind, 32)))
    w("| bystander PING p99 while another client LISTs %s | ≤ 5 ms | %s ms | %s |" % (N(million), cell(ping, "%.2f"), met(ping, 5)))
    w("")
    w("## What was run")
    w("")
    w("- **Lateness, events alone**: a release countdownd, persistence on (the journal, default `--durability process`), lifecycle logging off. N countdowns of 1–5 s (uniform), started through the protocol, pipelined 2,000 at a time (`bench/feed.c`), with one subscriber to all of them (`bench/eventlog.c`, C, stamping each read with `CLOCK_BOOTTIME`). Lateness is measured against each countdown's exact deadline, read afterwards from the journal's `started` records: `done` against the deadline, each `tick` against `deadline − remaining`. CPU per event: the daemon's CPU time from the last START's reply to the last `done`, divided by the events delivered.")
    w("- **Lateness, mixed load**: %s countdowns of 3–6 s, started at %s a second (500 per pipelined chunk), so that for four seconds requests keep arriving while ticks and `done`s fall due; same subscriber and measurement." % (N(big), N(MIXED_RATE)))
    w("- **Redis** (%s): `redis-server --port 0 --unixsocket … --save '' --notify-keyspace-events Ex`, default `hz 10`; the same N and spread as `SET k 1 PXAT <deadline>` by the same feeder, the same C subscriber on `__keyevent@0__:expired`, measured against the deadline on the wall clock." % redis_version)
    w("- **Floor** (`bench/floor.c`): one thread sleeping with `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)` to each of the same number of sorted deadlines, recording its own lateness.")
    w("- **Floor server** (`bench/floorserver.c`): a bare C server in countdownd's shape for the event path, run as countdownd is in each round (same N, spread, feeder and subscriber): one `CLOCK_BOOTTIME` timerfd for the earliest due event, no sooner than 400 µs after it last fired; per wake-up every due `tick` and `done` formatted as countdownd's lines into one write, and one journal frame (CRC-32C, a 110-byte record per `done`) in one `pwrite`: five system calls per wake-up. Nothing else (no limits, replay, statistics or per-user state): the distance from countdownd to it is what countdownd's own work costs.")
    w("- **START throughput**: `bench/loadgen.c`, 8 connections, %s `START`s in all, 1 or 32 in flight per connection; against `redis-benchmark -c 8 -n %s -P 1|32 SET key:__rand_int__ 1 PX 60000` with the append-only file at the same durability: `--durability process` (written to the OS before the reply) against `appendfsync everysec`, and `--durability power` (`fdatasync` before the reply) against `appendfsync always`." % (N(THROUGHPUT_N), N(THROUGHPUT_N)))
    w("- **%s countdowns**: one-hour countdowns started as above with no subscriber. RSS growth per countdown while the snapshot that follows is written (peak: the engine's pages are shared copy-on-write with it, so each changed page exists twice) and once it is written (settled); Redis: the same number of `SET m 1 PX 3600000`. Then `bench/lister.c` reads %d `LIST`s of all of them in a row, as fast as it can, while `bench/bystander.c` sends `PING` every millisecond and records each reply's latency. Launch to READY: on a fresh state directory, %s STARTs, SIGKILL right after the last reply (mid-snapshot, with the journal's tail as long as it gets), then a new daemon's launch to its `READY=1`." % (N(million), LIST_REPEATS, N(million)))
    w("")
    for kind in ("done", "tick"):
        w("## `%s` lateness, events alone (ms)" % kind)
        w("")
        w("| N | | countdownd | floor server | Redis | floor | countdownd ÷ Redis | countdownd ÷ floor |")
        w("|---|---|---|---|---|---|---|---|")
        for n in sizes:
            for q in ("p50", "p90", "p99", "max"):
                c = [x[kind][q] for x in r["alone"][n]]
                server = [x[kind][q] for x in r.get("floorserver", {}).get(n, [])]
                f = [x["done"][q] for x in r["floor"][n]]
                red = [x["done"][q] for x in r["redis"][n]] if kind == "done" else []
                cr = [a / b for a, b in zip(c, red) if b] if red else []
                cf = [a / b for a, b in zip(c, f) if b]
                w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (N(n) if q == "p50" else "", q, cell(c), cell(server) if server else "—", cell(red) if red else "—", cell(f),
                                                       cell(cr, "%.2g") + "×" if cr else "—", cell(cf, "%.2f") + "×"))
        w("")
    w("## Mixed load (ms)")
    w("")
    w("| N=%s | p50 | p90 | p99 | max |" % N(big))
    w("|---|---|---|---|---|")
    for kind in ("done", "tick"):
        w("| `%s` | %s |" % (kind, " | ".join(cell([x[kind][q] for x in r["mixed"]]) for q in ("p50", "p90", "p99", "max"))))
    w("")
    w("## START throughput (per second, 8 clients)")
    w("")
    w("Both servers are driven by the same client, `bench/loadgen.c` (one epoll thread, like `redis-benchmark`); `redis-benchmark`'s own figure for Redis is given for scale.")
    w("")
    w("| in flight | durability | countdownd | Redis with AOF | countdownd ÷ Redis | Redis, by redis-benchmark |")
    w("|---|---|---|---|---|---|")
    for depth in (1, 32):
        for durability, fsync in (("process", "everysec"), ("power", "always")):
            runs = r["throughput"].get("%d/%s" % (depth, durability), [])
            w("| %d | `%s` / `appendfsync %s` | %s | %s | %s× | %s |" % (depth, durability, fsync, cell([x[0] for x in runs], "%.0f"),
                                                                 cell([x[2] for x in runs], "%.0f"), cell(ratios(depth, durability), "%.2f"),
                                                                 cell([x[3] for x in runs], "%.0f")))
        plain = r["throughput"].get("%d/redis-plain" % depth, [])
        w("| %d | Redis without persistence, for scale | | %s | | %s |" % (depth, cell([x[0] for x in plain], "%.0f"), cell([x[2] for x in plain], "%.0f")))
    errors = sum(x[1] for runs in r["throughput"].values() for x in runs)
    w("")
    w("START errors: %d in the throughput runs; %d in the lateness runs." % (errors, sum(x["errors"] for n in sizes for x in r["alone"][n]) + sum(x["errors"] for x in r["mixed"])))
    w("")
    w("## %s countdowns" % N(million))
    w("")
    w("| figure | countdownd | Redis |")
    w("|---|---|---|")
    w("| START per second, pipelined (one client, 2,000 in flight) | %s | |" % cell([x["start_rate"] for x in r["million"]], "%.0f"))
    w("| RSS per countdown / key, settled (bytes) | %s | %s |" % (cell(memory, "%.0f"), cell([x["rss_per_key"] for x in r["redis_million"]], "%.0f")))
    w("| RSS per countdown while the snapshot is written (bytes) | %s | |" % cell([x["rss_peak"] for x in r["million"]], "%.0f"))
    w("| RSS per countdown after the LIST (bytes) | %s | |" % cell([x["rss_after_list"] for x in r["million"]], "%.0f"))
    w("| LIST of all: seconds to read one whole | %s | |" % cell([x["list_seconds"] for x in r["million"]], "%.2f"))
    w("| bystander PINGs answered during the LISTs | %s | |" % cell([x["ping"]["n"] for x in r["million"]], "%.0f"))
    w("| bystander PING during the LIST: p50 / p99 / max (ms) | %s / %s / %s | |" % (
        cell([x["ping"]["p50"] for x in r["million"]]), cell(ping), cell([x["ping"]["max"] for x in r["million"]])))
    w("| launch to READY after SIGKILL (ms) | %s | |" % cell(launch, "%.0f"))
    w("| launch to READY with %s from a clean stop (ms) | %s | |" % (N(restore_n), cell(r["restore"], "%.0f")))
    w("")
    if r.get("cluster"):
        c = r["cluster"]
        w("## Cluster mode (three etcd members and two daemons, all on this machine)")
        w("")
        w("A real three-member etcd (Debian's etcd-server) on loopback ports, two daemons with `--cluster`. START: `bench/loadgen.c`, 8 clients one at a time each, through one daemon; etcd's own rate: the same create-if-absent transactions sent straight to etcd's gateway by 8 clients (Python, keep-alive). `done` lateness: countdowns of 1–3 s started through host A, against their deadline on the wall clock (from the OK replies), as host A's and host B's subscribers saw them; local mode's figure at the same N is in the tables above. Replica lag: a START through host A, then the time until host B's subscriber sees it, one at a time.")
        w("")
        w("| figure | median (lowest–highest) |")
        w("|---|---|")
        w("| START per second through countdownd | %s |" % cell([x["start_rate"] for x in c], "%.0f"))
        w("| the same transactions per second straight to etcd | %s |" % cell([x["etcd_txn_rate"] for x in c], "%.0f"))
        w("| countdownd ÷ etcd | %s× |" % cell([x["start_rate"] / x["etcd_txn_rate"] for x in c], "%.2f"))
        w("| START per second through countdownd, 8 clients pipelining 32 each | %s |" % cell([x["start_rate_pipelined"] for x in c], "%.0f"))
        w("| that ÷ etcd (8 clients, one transaction each) | %s× |" % cell([x["start_rate_pipelined"] / x["etcd_txn_rate"] for x in c], "%.2f"))
        for label, key in (("host that started them", "done_on_starter"), ("the other host", "done_on_other")):
            w("| `done` lateness p50 / p99, %s (ms) | %s / %s |" % (label, cell([x[key]["p50"] for x in c], "%.2f"), cell([x[key]["p99"] for x in c], "%.2f")))
        w("| etcd transactions per `done`, the fleet, deadlines spread over 2 s | %s |" % cell([x["transactions_per_done"] for x in c], "%.3f"))
        w("| etcd transactions per `done`, the fleet, %s deadlines at one moment | %s |" % (N(c[0]["burst_started"]), cell([x["burst_transactions_per_done"] for x in c], "%.4f")))
        w("| `done` lateness p50 / p99 of that burst, the other host's subscriber (ms) | %s / %s |" % (cell([x["burst_done_late"]["p50"] for x in c], "%.1f"), cell([x["burst_done_late"]["p99"] for x in c], "%.1f")))
        w("| replica lag p50 / p99 (ms) | %s / %s |" % (cell([x["replica_lag"]["p50"] for x in c], "%.2f"), cell([x["replica_lag"]["p99"] for x in c], "%.2f")))
        if all("etcd_txn_latency" in x for x in c):
            w("| one transaction straight to etcd, one at a time, p50 / p99 (ms): the floor under a `done` | %s / %s |" % (cell([x["etcd_txn_latency"]["p50"] for x in c], "%.2f"), cell([x["etcd_txn_latency"]["p99"] for x in c], "%.2f")))
        w("| START errors | %d |" % sum(x["start_errors"] for x in c))
        w("")
    w(analysis())
    # The section bench/linking.py writes is its own: kept as it is.
    mark = "\n## Static and dynamic linking\n"
    kept = open(args.output).read().split(mark, 1) if os.path.exists(args.output) else []
    tail = mark + kept[1] if len(kept) == 2 else ""
    open(args.output, "w").write("\n".join(lines) + "\n" + tail)
    log("wrote " + args.output)


if __name__ == "__main__":
    main()
