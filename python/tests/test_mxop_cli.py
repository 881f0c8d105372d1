"""The `mxop` command's observability subcommands (status, ops, stats, top),
driven as an operator would: the real build/bin/mxop against a real
mxop-serverd, output parsed (JSON, tables, the Prometheus text format), and
the daemon's --metrics-file and --log-format json.
"""
import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest

import mxop
from conftest import BUILD, plugin_sources

MXOP = os.path.join(BUILD, "bin", "mxop")
X = np.zeros(4, np.float32)


@pytest.fixture(scope="module")
def env():
    """A daemon logging JSON to a file and writing its metrics file every 200 ms."""
    tmp = tempfile.mkdtemp(prefix="mxop-cli-test.")
    log_path = os.path.join(tmp, "daemon.log")
    metrics = os.path.join(tmp, "metrics", "mxop.prom")
    os.mkdir(os.path.dirname(metrics))
    log = open(log_path, "wb")
    d = mxop.Daemon(plugin_sources=plugin_sources(), log_level="info", stderr=log,
                    extra_args=["--log-format", "json", "--metrics-file", metrics,
                                "--metrics-interval-ms", "200"])
    yield {"daemon": d, "log": log_path, "metrics": metrics}
    alive = d.alive()
    rc = d.stop()
    log.close()
    for f in (log_path, metrics):
        if os.path.exists(f):
            os.unlink(f)
    os.rmdir(os.path.dirname(metrics))
    os.rmdir(tmp)
    assert alive and rc == 0


@pytest.fixture
def sess(env):
    c = mxop.connect(env["daemon"], timeout=20)
    c.load("crash.so")
    yield c
    c.close()


def run(env, *args, check=None, timeout=60):
    argv = [MXOP, args[0], "--socket", env["daemon"].socket] + list(args[1:])
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    out, err = p.stdout.decode(), p.stderr.decode()
    if check is not None:
        assert p.returncode == check, (argv, p.returncode, out, err)
    return p.returncode, out, err


def my_session(status, client):
    pid = client.stats().worker_pid
    mine = [s for s in status["sessions"] if s["worker_pid"] == pid]
    assert len(mine) == 1, status
    return mine[0]


# ---------------------------------------------------------------------------
# Usage and exit statuses


@pytest.mark.parametrize("cmd", ["status", "ops", "stats", "top"])
def test_help_and_bad_arguments(cmd):
    p = subprocess.run([MXOP, cmd, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0
    assert p.stdout.decode().startswith("usage: mxop %s" % cmd)
    assert "exit status" in p.stdout.decode()
    p = subprocess.run([MXOP, cmd, "--no-such-option"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert p.returncode == 2
    assert "usage: mxop %s" % cmd in p.stderr.decode()


@pytest.mark.parametrize("cmd", ["status", "ops", "stats", "top"])
def test_no_daemon(cmd, tmp_path):
    sock = str(tmp_path / "nobody.sock")
    p = subprocess.run([MXOP, cmd, "--socket", sock], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert p.returncode == 3
    assert "nobody.sock" in p.stderr.decode()
    # Without --socket and $MXOP_SOCKET there is nothing to reach: a usage error.
    e = dict(os.environ)
    e.pop("MXOP_SOCKET", None)
    p = subprocess.run([MXOP, cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
    assert p.returncode == 2
    assert "MXOP_SOCKET" in p.stderr.decode()


def test_socket_from_environment(env):
    e = dict(os.environ, MXOP_SOCKET=env["daemon"].socket)
    p = subprocess.run([MXOP, "status", "--json"], stdout=subprocess.PIPE, env=e)
    assert p.returncode == 0
    assert json.loads(p.stdout)["pid"] == env["daemon"].pid


# Each subcommand with the global options before its name (`mxop --socket S
# status` was refused) and the arguments it needs after it.
GLOBAL_FIRST = {
    "status": [],
    "ops": ["crash.so"],
    "stats": [],
    "top": ["--iterations", "1", "--interval-ms", "100"],
    "load": ["crash.so"],
    "reload": ["relu.so"],
    "run": ["crash.so", "identity", "--input", "4:f32"],
    "verify": ["relu.so"],
}


@pytest.mark.parametrize("cmd", sorted(GLOBAL_FIRST))
def test_global_options_before_the_subcommand(env, cmd):
    for opts in (["--socket", env["daemon"].socket, "--json"],
                 ["--json", "--socket=" + env["daemon"].socket]):
        argv = [MXOP] + opts + [cmd] + GLOBAL_FIRST[cmd]
        e = dict(os.environ)
        e.pop("MXOP_SOCKET", None)
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e,
                           timeout=300)
        assert p.returncode == 0, (argv, p.stdout, p.stderr)
        # --json reached the subcommand: its output is JSON (top: one object per line).
        for line in p.stdout.decode().splitlines() if cmd == "top" else [p.stdout]:
            json.loads(line)


def test_bad_global_options():
    for argv, words in ((["--bogus", "status"], "'--bogus' is not an option before"),
                        (["--socket"], "--socket needs a PATH"),
                        (["--socket", "/nonexistent.sock"], "usage: mxop"),
                        (["-s", "x", "status"], "'-s' is not an option before")):
        p = subprocess.run([MXOP] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.returncode == 2 and words in p.stderr.decode(), (argv, p.stderr)
    # The option after the subcommand wins over the one before it.
    p = subprocess.run([MXOP, "--socket", "/nonexistent/a.sock", "status", "--socket",
                        "/nonexistent/b.sock"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 3 and "b.sock" in p.stderr.decode(), p.stderr


# ---------------------------------------------------------------------------
# status


def test_status_shows_the_session(env, sess):
    sess.op("identity")(X)
    _, out, _ = run(env, "status", "--json", check=0)
    st = json.loads(out)
    assert re.match(r"^\d+\.\d+\.\d+", st["version"])
    assert st["pid"] == env["daemon"].pid
    assert st["uptime_ms"] > 0
    assert st["sandbox"] in ("none", "basic", "strict")
    assert "seccomp" in st["layers"] or st["sandbox"] == "none"
    assert st["admin"] is True  # the tests run as the daemon's user
    me = my_session(st, sess)
    assert me["client_pid"] == os.getpid()
    assert me["client_uid"] == os.getuid()
    assert me["libraries"] == ["crash.so"]
    assert me["state"] == "running"
    assert me["regions"] >= 1 and me["region_bytes"] > 0  # the staging region
    assert "identity" in me["ops"]
    # The file the session's worker runs (hot reload), with its digest.
    (ver,) = me["library_versions"]
    assert ver["name"] == "crash.so" and ver["path"].endswith("/crash.so")
    with open(ver["path"], "rb") as f:
        assert ver["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert st["sessions_total"] >= len(st["sessions"]) >= 1

    _, out, _ = run(env, "status", check=0)
    assert out.startswith("mxop-serverd ")
    assert "sandbox %s: " % st["sandbox"] in out
    rows = [l.split() for l in out.splitlines() if l.split()[:1] == [str(me["id"])]]
    assert len(rows) == 1, out
    row = rows[0]
    assert row[1] == str(os.getpid()) and row[4] == str(me["worker_pid"]) and row[-1] == "crash.so"
    assert "session %d runs:\n  crash.so  inode %d" % (me["id"], ver["ino"]) in out
    assert "sha256 " + ver["sha256"] in out


def test_status_keeps_restart_reasons(env, sess):
    with pytest.raises(mxop.WorkerCrashed):
        sess.op("segv")(X)
    sess.op("identity")(X)
    _, out, _ = run(env, "status", "--json", check=0)
    me = my_session(json.loads(out), sess)
    assert me["restarts"] >= 1 and me["generation"] >= 2
    last = me["recent_restarts"][-1]
    assert last["code"] == -1025 and last["code_name"] == "MXOP_EWORKER_CRASHED"
    assert last["signal"] == 11 and last["op"] == "segv"
    assert "SIGSEGV" in last["message"]
    _, out, _ = run(env, "status", check=0)
    assert "MXOP_EWORKER_CRASHED" in out and "restarts (oldest first)" in out


# ---------------------------------------------------------------------------
# ops


def test_ops_of_a_library(env):
    _, out, _ = run(env, "ops", "gemm.so", "--json", check=0)
    ops = {o["name"]: o for o in json.loads(out)["ops"]}
    g = ops["gemm"]
    assert g["library"] == "gemm.so" and g["num_inputs"] == 2 and g["num_outputs"] == 1
    assert g["variadic"] is False and g["has_backward"] is True and g["cpu"] is True
    attrs = {a["name"]: a for a in g["attrs"]}
    assert attrs["transpose_a"]["type"] == "bool" and attrs["transpose_a"]["default"] == "false"
    assert attrs["alpha"]["type"] == "float" and attrs["alpha"]["required"] is False

    _, out, _ = run(env, "ops", "running_mean.so", "--json", check=0)
    rm = json.loads(out)["ops"][0]
    assert rm["stateful"] is True and "stateful" in rm["flags"]

    _, out, _ = run(env, "ops", "sum_n.so", "--json", check=0)
    assert any(o["variadic"] and o["num_inputs"] == -1 for o in json.loads(out)["ops"])

    _, out, _ = run(env, "ops", "gemm.so", check=0)
    assert out.startswith("gemm  (gemm.so)")
    assert "inputs: 2; outputs: 1" in out
    assert "attr alpha: float = 1.0" in out


def test_ops_of_a_missing_library(env):
    rc, out, err = run(env, "ops", "no_such_library.so")
    assert rc == 1 and out == ""
    assert "MXOP_ELIB_NOT_FOUND" in err and "no_such_library.so" in err
    rc, _, err = run(env, "ops", "../outside.so")
    assert rc == 1 and "MXOP_ELIB_OUTSIDE" in err


def test_ops_loaded_by_sessions(env, sess):
    _, out, _ = run(env, "ops", "--json", check=0)
    names = {(o["library"], o["name"]) for o in json.loads(out)["ops"]}
    assert ("crash.so", "identity") in names and ("crash.so", "segv") in names
    # Each op once, however many sessions loaded it.
    assert len(names) == len(json.loads(out)["ops"])


# ---------------------------------------------------------------------------
# stats


def op_row(stats, session_id, op):
    rows = [o for o in stats["ops"] if o["session"] == session_id and o["op"] == op]
    assert len(rows) == 1, (op, stats)
    return rows[0]


def session_id(env, client):
    _, out, _ = run(env, "status", "--json", check=0)
    return my_session(json.loads(out), client)["id"]


def test_stats_counts_calls_errors_and_crashes(env, sess):
    sid = session_id(env, sess)
    for _ in range(25):
        sess.op("identity")(X)
    with pytest.raises(mxop.OpFailed):
        sess.op("fail")(X)
    with pytest.raises(mxop.WorkerCrashed):
        sess.op("abort")(X)
    with pytest.raises(mxop.Timeout):
        sess.op("hang")(X, timeout=0.3)
    _, out, _ = run(env, "stats", "--json", check=0)
    st = json.loads(out)
    ident = op_row(st, sid, "identity")
    assert ident["library"] == "crash.so"
    assert ident["calls"] == 25 and ident["errors"] == 0 and ident["errors_by_code"] == {}
    assert 0 < ident["p50_ns"] <= ident["p99_ns"] <= ident["max_ns"]
    assert ident["sum_ns"] >= ident["max_ns"]
    assert ident["staged_bytes"] >= 25 * X.nbytes  # a heap input goes through staging
    fail = op_row(st, sid, "fail")
    assert fail["calls"] == 1 and fail["errors"] == 1
    assert fail["errors_by_code"] == {"MXOP_EOP_FAILED": 1}
    ab = op_row(st, sid, "abort")
    assert ab["crashes"] == 1 and ab["errors_by_code"] == {"MXOP_EWORKER_CRASHED": 1}
    hang = op_row(st, sid, "hang")
    assert hang["timeouts"] == 1 and hang["crashes"] == 0
    assert hang["errors_by_code"] == {"MXOP_ETIMEOUT": 1}
    s = [x for x in st["sessions"] if x["session"] == sid][0]
    assert s["calls"] == sum(o["calls"] for o in st["ops"] if o["session"] == sid)
    assert s["errors"] == 3 and s["crashes"] == 1 and s["timeouts"] == 1
    assert s["restarts"] >= 2 and s["client_pid"] == os.getpid()

    _, out, _ = run(env, "stats", check=0)
    lines = [l.split() for l in out.splitlines()]
    row = [l for l in lines if l[:3] == [str(sid), "crash.so", "identity"]]
    assert len(row) == 1 and row[0][3] == "25", out
    row = [l for l in lines if l[:3] == [str(sid), "crash.so", "fail"]]
    assert row[0][-1] == "MXOP_EOP_FAILED=1"


# The Prometheus text exposition format, line by line.
METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
LABELS = r"\{(?:[a-zA-Z_][a-zA-Z0-9_]*=%s(?:,[a-zA-Z_][a-zA-Z0-9_]*=%s)*)?\}" % (
    LABEL_VALUE, LABEL_VALUE)
SAMPLE = re.compile(r"^(%s)(%s)? ([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|NaN|[-+]?Inf))"
                    r"(?: -?[0-9]+)?$" % (METRIC, LABELS))
HELP = re.compile(r"^# HELP (%s) (.*)$" % METRIC)
TYPE = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % METRIC)
ONE_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)=("(?:[^"\\\n]|\\\\|\\"|\\n)*")')


def parse_prometheus(text):
    """{(name, frozenset(labels)): value}, asserting the format on every line."""
    assert text.endswith("\n")
    helped, typed, samples, done = set(), {}, {}, set()
    current = None
    for line in text.splitlines():
        assert line.strip() == line and line, repr(line)
        m = HELP.match(line)
        if m:
            assert m.group(1) not in helped, "second HELP for " + m.group(1)
            helped.add(m.group(1))
            continue
        m = TYPE.match(line)
        if m:
            name = m.group(1)
            assert name in helped, "TYPE before HELP: " + line
            assert name not in typed, "second TYPE for " + name
            typed[name] = m.group(2)
            if current is not None:
                done.add(current)
            current = name
            continue
        assert not line.startswith("#"), "a comment that is neither HELP nor TYPE: " + line
        m = SAMPLE.match(line)
        assert m, "not a sample line: " + line
        name = m.group(1)
        assert name in typed, "sample before its TYPE: " + line
        assert name not in done, "samples of %s are not together" % name
        assert name == current, "sample under another family's TYPE: " + line
        labels = {}
        for k, v in ONE_LABEL.findall(m.group(2) or ""):
            labels[k] = json.loads(v)  # the format's escapes are a subset of JSON's
        key = (name, frozenset(labels.items()))
        assert key not in samples, "duplicate sample: " + line
        value = float(m.group(3))
        if typed[name] == "counter":
            assert name.endswith("_total") and value >= 0
        samples[key] = value
    for name in typed:
        assert name.startswith("mxop_")
    return samples


def sample(samples, name, **labels):
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def test_stats_prometheus(env, sess):
    sid = session_id(env, sess)
    for _ in range(7):
        sess.op("identity")(X)
    with pytest.raises(mxop.OpFailed):
        sess.op("fail")(X)
    _, out, _ = run(env, "stats", "--prometheus", check=0)
    s = parse_prometheus(out)
    ident = dict(session=sid, library="crash.so", op="identity")
    assert sample(s, "mxop_op_calls_total", **ident) == 7
    assert sample(s, "mxop_op_errors_total", session=sid, library="crash.so", op="fail",
                  code="MXOP_EOP_FAILED") == 1
    assert 0 < sample(s, "mxop_op_latency_p50_seconds", **ident) <= \
        sample(s, "mxop_op_latency_p99_seconds", **ident) <= \
        sample(s, "mxop_op_latency_max_seconds", **ident)
    assert sample(s, "mxop_op_crashes_total", **ident) == 0
    assert sample(s, "mxop_sessions") >= 1
    assert sample(s, "mxop_session_calls_total", session=sid, client_pid=os.getpid(),
                  client_uid=os.getuid()) == 8


def test_prometheus_parser_refuses_bad_text():
    """The checker above is a real check: each of these breaks the format."""
    good = "# HELP mxop_x a.\n# TYPE mxop_x counter\nmxop_x_total 1\n"
    for bad in [
        "mxop_x_total 1\n",  # no HELP/TYPE
        "# TYPE mxop_x_total counter\n# HELP mxop_x_total a.\nmxop_x_total 1\n",
        "# HELP mxop_a_total a.\n# TYPE mxop_a_total counter\nmxop_a_total{op=\"a\"b\"} 1\n",
        "# HELP mxop_a_total a.\n# TYPE mxop_a_total counter\nmxop_a_total{op=\"a\"} x\n",
        "# HELP mxop_a_total a.\n# TYPE mxop_a_total counter\nmxop_a_total 1\n"
        "# HELP mxop_b a.\n# TYPE mxop_b gauge\nmxop_b 1\nmxop_a_total 2\n",
        good,  # TYPE names mxop_x, the sample mxop_x_total
    ]:
        with pytest.raises(AssertionError):
            parse_prometheus(bad)


def test_metrics_file(env, sess):
    sid = session_id(env, sess)
    for _ in range(5):
        sess.op("identity")(X)
    want = dict(session=sid, library="crash.so", op="identity")
    end = time.monotonic() + 15
    while True:
        with open(env["metrics"]) as f:
            s = parse_prometheus(f.read())
        if sample(s, "mxop_op_calls_total", **want) == 5 or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert sample(s, "mxop_op_calls_total", **want) == 5
    # Written atomically: nothing but the file itself is left in its directory.
    assert os.listdir(os.path.dirname(env["metrics"])) == ["mxop.prom"]


# ---------------------------------------------------------------------------
# top


def test_top(env, sess):
    stop = threading.Event()

    def calls():
        c = mxop.connect(env["daemon"], timeout=20)
        c.load("crash.so")
        while not stop.is_set():
            c.op("identity")(X)
            time.sleep(0.002)
        c.close()

    t = threading.Thread(target=calls)
    t.start()
    try:
        time.sleep(0.3)
        _, out, _ = run(env, "top", "--iterations", "3", "--interval-ms", "300", check=0)
        _, jout, _ = run(env, "top", "--iterations", "3", "--interval-ms", "300", "--json",
                         check=0)
    finally:
        stop.set()
        t.join()
    assert "\x1b" not in out  # not a terminal: no escape codes
    blocks = [b for b in out.split("\n\n") if b.strip()]
    assert len(blocks) == 3, out
    for b in blocks:
        lines = b.splitlines()
        assert lines[0].startswith("mxop top - ")
        assert lines[1].split()[:4] == ["LIBRARY", "OP", "CALLS/S", "P99"]
    last = [l.split() for l in blocks[-1].splitlines()[2:]]
    ident = [l for l in last if l[:2] == ["crash.so", "identity"]]
    assert len(ident) == 1 and float(ident[0][2]) > 0, blocks[-1]
    refreshes = [json.loads(l) for l in jout.splitlines()]
    assert [r["iteration"] for r in refreshes] == [1, 2, 3]
    row = [o for o in refreshes[-1]["ops"] if o["op"] == "identity"][0]
    assert row["calls_per_s"] > 0 and row["p99_ns"] > 0 and row["calls"] > 0


# ---------------------------------------------------------------------------
# the daemon's log


def test_log_format_json(env, sess):
    with pytest.raises(mxop.WorkerCrashed):
        sess.op("segv")(X)
    sess.op("identity")(X)
    end = time.monotonic() + 10
    crash = []
    while not crash and time.monotonic() < end:
        with open(env["log"], "rb") as f:
            lines = f.read().decode().splitlines()
        events = [json.loads(l) for l in lines]  # every line is one JSON object
        crash = [e for e in events if e.get("op") == "segv" and "SIGSEGV" in e["msg"]]
        time.sleep(0.05)
    for e in events:
        assert e["level"] in ("debug", "info", "warn", "error")
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", e["ts"])
        assert e["daemon_pid"] == env["daemon"].pid and isinstance(e["msg"], str)
    assert crash, lines[-20:]
    c = crash[-1]
    assert c["level"] == "warn" and c["library"] == "crash.so"
    assert isinstance(c["session"], int) and c["worker_pid"] > 0
    # The inputs as the worker received them, quoted as its account.
    assert "inputs (the worker's account): [%s] %s" % (",".join(map(str, X.shape)), X.dtype.name.replace("float", "f")) in c["msg"], c["msg"]
    assert "MXOP_EWORKER_CRASHED" in c["msg"] and "signal 11" in c["msg"]


# ---------------------------------------------------------------------------
# who sees what


NOBODY = 65534


def as_nobody():
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def unreachable_by_nobody(path=MXOP):
    """Why `path --help` cannot run as nobody here (None when it can): as root in a checkout
    other users cannot traverse, the exec fails with EACCES, which subprocess raises."""
    try:
        p = subprocess.run([path, "--help"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, preexec_fn=as_nobody, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return "%s cannot be run by uid %d here: %s" % (path, NOBODY, e)
    if p.returncode != 0:
        return "%s --help exits with %d as uid %d here" % (path, p.returncode, NOBODY)
    return None


def test_unreachable_binary_is_a_reason_not_an_error(tmp_path):
    """The probe of the two tests below skips in a checkout nobody cannot traverse."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run mxop as another user")
    locked = tmp_path / "locked"
    locked.mkdir()
    exe = locked / "mxop"
    exe.write_bytes(open(MXOP, "rb").read())
    exe.chmod(0o755)
    locked.chmod(0o700)
    why = unreachable_by_nobody(str(exe))
    assert why is not None and str(exe) in why and "uid %d" % NOBODY in why, why


def test_other_users_see_only_their_sessions(tmp_path):
    """A user allowed by --allow-uid who is not the daemon's sees no one else's sessions."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run mxop as another user")
    why = unreachable_by_nobody()
    if why is not None:
        pytest.skip(why)
    # Workers run as a uid of their own here: the workers' uid (by default nobody) is never a
    # client's, whatever --allow-uid says.
    d = mxop.Daemon(plugin_sources=plugin_sources(),
                    extra_args=["--allow-uid", str(NOBODY), "--worker-uid", str(NOBODY - 1)])
    c = None
    try:
        # The private directory and the socket are the daemon user's alone: open them up.
        os.chmod(d.dir, 0o711)
        os.chmod(d.socket, 0o666)
        c = mxop.connect(d, timeout=20)
        c.load("crash.so")
        c.op("identity")(X)
        argv = [MXOP, "status", "--socket", d.socket, "--json"]
        mine = json.loads(subprocess.run(argv, stdout=subprocess.PIPE, check=True).stdout)
        assert mine["admin"] is True and len(mine["sessions"]) == 1
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           preexec_fn=as_nobody)
        assert p.returncode == 0, p.stderr
        theirs = json.loads(p.stdout)
        assert theirs["admin"] is False and theirs["sessions"] == []
        assert theirs["sessions_total"] == 1
        p = subprocess.run([MXOP, "stats", "--socket", d.socket, "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=as_nobody)
        assert p.returncode == 0, p.stderr
        st = json.loads(p.stdout)
        assert st["ops"] == [] and st["sessions"] == []
    finally:
        if c is not None:
            c.close()
        assert d.stop() == 0


def test_the_workers_uid_is_never_a_client(tmp_path):
    """A workers' uid cannot connect, even when --allow-uid says so (here nobody is in the range)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run mxop as another user")
    why = unreachable_by_nobody()
    if why is not None:
        pytest.skip(why)
    d = mxop.Daemon(plugin_sources=plugin_sources(),
                    extra_args=["--allow-uid", str(NOBODY), "--worker-uids", "65500:100"])
    try:
        os.chmod(d.dir, 0o711)
        os.chmod(d.socket, 0o666)
        p = subprocess.run([MXOP, "status", "--socket", d.socket], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, preexec_fn=as_nobody, text=True)
        assert p.returncode != 0
        assert "workers' uid" in p.stderr, p.stderr
        # The daemon's own user still connects.
        p = subprocess.run([MXOP, "status", "--socket", d.socket], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        assert p.returncode == 0, p.stderr
    finally:
        assert d.stop() == 0


def test_log_json_stays_json_with_hostile_worker_output(env):
    """A worker's output (escapes, forged daemon lines, a 64 KiB line) is logged as valid JSON."""
    c = mxop.connect(env["daemon"], timeout=20)
    try:
        c.load("hostile_flood.so")
        c.op("flood")(np.zeros(4, np.float32), mb=1)
        c.op("flood")(np.zeros(4, np.float32), mb=0)
    finally:
        c.close()
    end = time.monotonic() + 10
    worker_lines = []
    while time.monotonic() < end:
        with open(env["log"], "rb") as f:
            raw = f.read()
        assert b"\x1b" not in raw and b"\r" not in raw
        events = [json.loads(l) for l in raw.decode().splitlines()]
        worker_lines = [e for e in events if "forged" in e["msg"]]
        if worker_lines and any("AAAA" in e["msg"] for e in events):
            break
        time.sleep(0.1)
    assert worker_lines, "none of the worker's lines was logged"
    for e in worker_lines:
        assert e["level"] == "info" and not e["msg"].startswith("mxop-serverd[1] error")


# ---------------------------------------------------------------------------
# the daemon's options


SERVERD = os.path.join(BUILD, "bin", "mxop-serverd")


@pytest.mark.parametrize("args,words", [
    (["--log-format", "yaml"], "--log-format must be text or json, not 'yaml'"),
    (["--metrics-interval-ms", "5"], "--metrics-interval-ms must be a number"),
    (["--metrics-interval-ms", "-1"], "--metrics-interval-ms must be a number"),
])
def test_bad_observability_options(tmp_path, args, words):
    p = subprocess.run([SERVERD, "--socket", str(tmp_path / "s"), "--plugin-dir", str(tmp_path)]
                       + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == 2 and words in p.stderr.decode(), p.stderr
    assert not os.path.exists(str(tmp_path / "s"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_daemon_stopped_while_it_starts_leaves_no_socket(tmp_path, sig):
    """A stop signal the moment the daemon's first name appears in its
    socket directory (the socket's temporary name, or the socket just after
    the rename, before the signal handlers are in place): the daemon stops
    by its handler, and removes what it made."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    for i in range(12):
        d = tmp_path / ("run%d" % i)
        d.mkdir()
        p = subprocess.Popen([SERVERD, "--socket", str(d / "s.sock"), "--plugin-dir",
                              str(plugins)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 30
        while not os.listdir(str(d)) and p.poll() is None and time.monotonic() < end:
            pass  # no sleep: the window is a few microseconds wide
        p.send_signal(sig)
        # SIGHUP asks a running daemon to reload; one held through the start
        # is delivered then, so the daemon is stopped after it.
        if sig == signal.SIGHUP:
            time.sleep(0.05)
            p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0, "the daemon did not stop by its handler"
        assert os.listdir(str(d)) == []


def test_metrics_file_that_cannot_be_written(tmp_path):
    """A metrics file in a directory that does not exist: a warning, and the daemon serves."""
    log = open(str(tmp_path / "log"), "wb")
    d = mxop.Daemon(plugin_sources=plugin_sources(), log_level="info", stderr=log,
                    extra_args=["--metrics-file", str(tmp_path / "no" / "such" / "m.prom"),
                                "--metrics-interval-ms", "100"])
    try:
        c = mxop.connect(d, timeout=20)
        c.load("crash.so")
        c.op("identity")(X)
        c.close()
        _, out, _ = run({"daemon": d}, "status", "--json", check=0)
        assert json.loads(out)["pid"] == d.pid
    finally:
        assert d.stop() == 0
        log.close()
    text = open(str(tmp_path / "log")).read()
    assert text.count("cannot write the metrics file") == 1, text  # once a minute at most
    assert "no/such/m.prom" in text
