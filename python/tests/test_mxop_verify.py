"""`mxop verify` and `mxop run`: the real command against real daemons, its output parsed.

Each `mxop` here (but the --socket tests) starts its own private daemon
with a copy of the library, in a temporary directory under $TMPDIR, which
is a test's tmp_path, so that what it leaves behind is seen.
"""
import glob
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time

import numpy as np
import pytest

from conftest import BUILD, SOURCE

MXOP = os.path.join(BUILD, "bin", "mxop")
PLUGINS = sorted(glob.glob(os.path.join(BUILD, "plugins", "*.so")))
FIXTURES = os.path.join(BUILD, "tests", "plugins")
GUIDE = os.path.join(SOURCE, "docs", "op-author-guide.md")

# Each fixture's one flaw and the checks that must fail for it (and only those).
FLAWS = {
    "flaw_grad": {"grad"},
    "flaw_unwritten": {"written"},
    "flaw_infer": {"infer"},
    "flaw_nondet": {"determinism", "fresh-worker"},
    "flaw_reqadd": {"req-add"},
    "flaw_input_write": {"inputs"},
    "flaw_overrun": {"bounds"},
}
LINE = re.compile(r"^(PASS|FAIL|SKIP) (\S+) +(\S+) +(.*)$")


@pytest.fixture
def tmp_path():
    """A short private directory: mxop's private daemons are made in it ($TMPDIR), and
    their socket paths must stay short (pytest's own tmp_path can be too long)."""
    d = tempfile.mkdtemp(prefix="mxvt-", dir="/tmp")
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def mxop(args, tmp_path, timeout=300, env=None, cwd=SOURCE):
    e = dict(os.environ if env is None else env)
    e["TMPDIR"] = str(tmp_path)
    e.pop("MXOP_SOCKET", None)
    return subprocess.run([MXOP] + list(args), capture_output=True, text=True, timeout=timeout,
                          env=e, cwd=cwd)


def leftovers(tmp_path):
    return [p for p in os.listdir(tmp_path) if p.startswith("mxop-run-")]


def parse_lines(out):
    """{(op, check): (status, detail)} and the summary line."""
    res, summary = {}, None
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            res[(m.group(2), m.group(3))] = (m.group(1), m.group(4))
        elif line.startswith("summary: "):
            summary = line
        else:
            raise AssertionError("unexpected line %r" % line)
    return res, summary


@pytest.mark.parametrize("lib", PLUGINS, ids=[os.path.basename(p) for p in PLUGINS])
def test_verify_passes_every_example_library(lib, tmp_path):
    p = mxop(["verify", lib], tmp_path)
    res, summary = parse_lines(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert not [k for k, v in res.items() if v[0] == "FAIL"]
    ops = {op for op, _ in res}
    assert ops, p.stdout
    for op in ops:
        # Every op ran forward on some case and checked its outputs.
        assert res[(op, "forward")][0] == "PASS", res[(op, "forward")]
        assert res[(op, "written")][0] == "PASS"
        assert res[(op, "determinism")][0] == "PASS"
    n = len(res)
    passed = sum(v[0] == "PASS" for v in res.values())
    assert summary == "summary: %s: %d op%s, %d checks: %d passed, 0 failed, %d skipped" % (
        os.path.basename(lib), len(ops), "" if len(ops) == 1 else "s", n, passed, n - passed)
    assert leftovers(tmp_path) == []


def test_verify_checks_gradients_empty_and_0d_shapes(tmp_path):
    p = mxop(["verify", os.path.join(BUILD, "plugins", "relu.so")], tmp_path)
    res, _ = parse_lines(p.stdout)
    assert res[("relu", "grad")][0] == "PASS"
    assert "(scalar)" in res[("relu", "shapes")][1] and "(0x3)" in res[("relu", "shapes")][1]
    assert res[("relu", "dtypes")][1].startswith("accepted f32 f64; refused: f16 bf16")


def test_verify_refuses_wrong_attributes_and_cycles_state(tmp_path):
    p = mxop(["verify", os.path.join(BUILD, "plugins", "running_mean.so")], tmp_path)
    res, _ = parse_lines(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert res[("running_mean_norm", "attrs")][0] == "PASS"
    status, detail = res[("running_mean_norm", "state")]
    assert status == "PASS" and "MXOP_EUNKNOWN_STATE" in detail, detail
    # A 0-d x is refused by state_create, not by inference: skipped, and said so.
    assert "state_create refused case scalar" in res[("running_mean_norm", "forward")][1]


def test_verify_dynamic_output_shapes(tmp_path):
    p = mxop(["verify", os.path.join(BUILD, "plugins", "masked_select.so")], tmp_path)
    res, _ = parse_lines(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "dynamic outputs" in res[("masked_select", "infer")][1]
    assert res[("masked_select", "grad")][0] == "PASS"


def test_verify_passes_the_flawless_control(tmp_path):
    p = mxop(["verify", os.path.join(FIXTURES, "flaw_none.so")], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("flaw", sorted(FLAWS))
def test_verify_fails_a_flawed_library_with_the_right_check(flaw, tmp_path):
    p = mxop(["verify", os.path.join(FIXTURES, flaw + ".so")], tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    res, summary = parse_lines(p.stdout)
    failed = {check for (op, check), v in res.items() if v[0] == "FAIL"}
    assert failed == FLAWS[flaw], p.stdout
    assert "%d failed" % len(FLAWS[flaw]) in summary
    assert leftovers(tmp_path) == []


def test_verify_names_a_sandbox_caught_input_write(tmp_path):
    p = mxop(["verify", os.path.join(FIXTURES, "flaw_input_write.so")], tmp_path)
    res, _ = parse_lines(p.stdout)
    status, detail = res[("flaw_input_write", "inputs")]
    assert status == "FAIL"
    # Either the sandbox caught the write or the comparison with a copy did.
    assert "MXOP_EINPUT_WRITTEN" in detail or "changed at element" in detail, detail


def test_verify_names_the_overrun_output_and_bytes(tmp_path):
    """An op that writes 4 KiB past its output: the output and the bytes named."""
    p = mxop(["verify", os.path.join(FIXTURES, "flaw_overrun.so")], tmp_path)
    res, _ = parse_lines(p.stdout)
    status, detail = res[("flaw_overrun", "bounds")]
    assert status == "FAIL", detail
    assert detail.startswith("output 0 (48 bytes): forward wrote past its end: "
                             "bytes +0 to +4095 after it changed"), detail
    assert "(case 3x4:f32)" in detail, detail


def test_verify_bounds_through_a_running_daemon(daemon, tmp_path):
    """Against a shared daemon the check runs where outputs are written in place, and says
    why not where the daemon copies them through scratch; it never passes the overrun."""
    p = mxop(["verify", "flaw_overrun.so", "--socket", daemon.socket], tmp_path)
    res, _ = parse_lines(p.stdout)
    status, detail = res[("flaw_overrun", "bounds")]
    assert (status == "SKIP" and "scratch mode" in detail and "without --socket" in detail) or \
        (status == "FAIL" and "past its end" in detail), (status, detail)


def test_verify_json(tmp_path):
    p = mxop(["verify", os.path.join(FIXTURES, "flaw_grad.so"), "--json"], tmp_path)
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert doc["library"] == "flaw_grad.so" and doc["failed"] == 1 and doc["ops"] == 1
    grad = [r for r in doc["results"] if r["check"] == "grad"][0]
    assert grad["status"] == "FAIL" and "central differences" in grad["detail"]
    assert grad["cases"]["fail"] >= 1


def test_verify_one_op_through_a_running_daemon(daemon, tmp_path):
    p = mxop(["verify", "leaky_relu.so", "--op", "clamp", "--socket", daemon.socket], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    res, _ = parse_lines(p.stdout)
    assert {op for op, _ in res} == {"clamp"}
    # Its required attributes got ordered values.
    assert "lo=-0.5 hi=0.5" in res[("clamp", "attrs")][1]
    p = mxop(["verify", "leaky_relu.so", "--op", "nosuchop", "--socket", daemon.socket],
             tmp_path)
    assert p.returncode == 2 and "no op named nosuchop" in p.stderr


def test_verify_bad_arguments_and_missing_library(tmp_path):
    p = mxop(["verify"], tmp_path)
    assert p.returncode == 2 and "give one LIB" in p.stderr
    p = mxop(["verify", str(tmp_path / "nope.so")], tmp_path)
    assert p.returncode == 3 and "nope.so" in p.stderr
    assert leftovers(tmp_path) == []
    p = mxop(["verify", "--help"], tmp_path)
    assert p.returncode == 0 and "req-add" in p.stdout


def processes_under(path):
    """Pids whose command line names `path` (a daemon started there)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if str(path).encode() in f.read():
                    found.append(int(pid))
        except (OSError, ValueError):
            pass
    return found


@pytest.mark.parametrize("sig,delay", [(signal.SIGTERM, 0), (signal.SIGTERM, 0.3),
                                       (signal.SIGINT, 0.3)])
def test_verify_interrupted_leaves_nothing(sig, delay, tmp_path):
    e = dict(os.environ)
    e["TMPDIR"] = str(tmp_path)
    e.pop("MXOP_SOCKET", None)
    # hang_backward's first backward waits out the 20 s deadline: the signal comes mid-run.
    p = subprocess.Popen([MXOP, "verify", os.path.join(FIXTURES, "hang_cb.so"), "--op",
                          "hang_backward", "--timeout-ms", "20000"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=e)
    end = time.monotonic() + 20
    while not leftovers(tmp_path) and time.monotonic() < end and p.poll() is None:
        time.sleep(0.005)
    time.sleep(delay)
    p.send_signal(sig)
    assert p.wait(timeout=30) == -sig
    assert leftovers(tmp_path) == []
    end = time.monotonic() + 10
    while processes_under(tmp_path) and time.monotonic() < end:
        time.sleep(0.05)
    assert processes_under(tmp_path) == []


def test_verify_interrupted_removes_what_the_daemon_left(tmp_path):
    """A daemon stopped while it starts can leave names the tool never made
    (its socket's temporary name, mxop.sock.tmp.PID, before the rename): the
    private directory goes all the same.  The daemon here is a stand-in that
    makes such names and never listens."""
    fake = tmp_path / "fake-serverd"
    fake.write_text("#!/bin/sh\n"
                    "touch \"$2.tmp.4242\" \"$(dirname \"$2\")/stray\"\n"
                    "exec sleep 60\n")
    fake.chmod(0o755)
    run = tmp_path / "run"
    run.mkdir()
    e = dict(os.environ)
    e["TMPDIR"] = str(run)
    e["MXOP_SERVERD"] = str(fake)
    e.pop("MXOP_SOCKET", None)
    p = subprocess.Popen([MXOP, "verify", os.path.join(FIXTURES, "hang_cb.so")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=e)
    end = time.monotonic() + 20
    while time.monotonic() < end and p.poll() is None and not glob.glob(
            str(run / "mxop-run-*" / "stray")):
        time.sleep(0.01)
    assert glob.glob(str(run / "mxop-run-*" / "mxop.sock.tmp.4242")), "the stand-in did not start"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == -signal.SIGTERM
    assert leftovers(run) == []
    end = time.monotonic() + 10
    while processes_under(fake) and time.monotonic() < end:
        time.sleep(0.05)
    assert processes_under(fake) == []


def test_daemon_that_fails_to_start_is_reported_with_its_reason(tmp_path):
    """The private directory goes with the daemon's log, so the error carries
    the last line the daemon wrote, not the log's path."""
    fake = tmp_path / "fake-serverd"
    fake.write_text("#!/bin/sh\necho 'mxop-serverd: --frob: unknown option' >&2\nexit 2\n")
    fake.chmod(0o755)
    e = dict(os.environ)
    e["MXOP_SERVERD"] = str(fake)
    for cmd in (["run", os.path.join(FIXTURES, "hang_cb.so"), "x"],
                ["verify", os.path.join(FIXTURES, "hang_cb.so")]):
        p = mxop(cmd, tmp_path, timeout=60, env=e)
        assert p.returncode != 0
        assert "exited at start (exit status 2): mxop-serverd: --frob: unknown option" \
            in p.stderr, p.stderr
        assert leftovers(tmp_path) == []


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def parse_run(out):
    res = {}
    for line in out.splitlines():
        m = re.match(r"^(input|output) (\d+) shape=\[([\d,]*)\] dtype=(\w+) fnv1a64=([0-9a-f]{16}) "
                     r"sum=(\S+)$", line)
        assert m, line
        shape = tuple(int(d) for d in m.group(3).split(",")) if m.group(3) else ()
        res[(m.group(1), int(m.group(2)))] = (shape, m.group(4), m.group(5), float(m.group(6)))
    return res


def check_tensor(path, entry, dtype):
    a = np.load(path)
    shape, dt, h, s = entry
    assert a.shape == shape and a.dtype == dtype and dt == {"float32": "f32", "float64": "f64",
                                                           "uint8": "u8"}[str(a.dtype)]
    assert fnv1a64(np.ascontiguousarray(a).tobytes()) == h
    assert s == pytest.approx(float(a.astype(np.float64).sum()), rel=1e-12, abs=1e-12)
    return a


def test_run_prints_checksums_numpy_agrees_with(tmp_path):
    out = tmp_path / "out"
    p = mxop(["run", "relu.so", "relu", "--input", "3x4:f32", "--seed", "7", "--out", str(out)],
             tmp_path)
    assert p.returncode == 0, p.stderr
    res = parse_run(p.stdout)
    x = check_tensor(out / "input0.npy", res[("input", 0)], np.float32)
    y = check_tensor(out / "output0.npy", res[("output", 0)], np.float32)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert x.min() >= -1 and x.max() < 1 and (x < 0).any()
    # The same seed gives the same inputs; another seed others.
    again = parse_run(mxop(["run", "relu.so", "relu", "--input", "3x4:f32", "--seed", "7"],
                           tmp_path).stdout)
    other = parse_run(mxop(["run", "relu.so", "relu", "--input", "3x4:f32", "--seed", "8"],
                           tmp_path).stdout)
    assert again == res and other[("input", 0)][2] != res[("input", 0)][2]
    assert leftovers(tmp_path) == []


def test_run_reads_npy_inputs_and_dynamic_shapes(tmp_path):
    x = np.arange(-6, 6, dtype=np.float64).reshape(3, 4) / 4
    mask = (np.arange(12).reshape(3, 4) % 3 == 0).astype(np.uint8)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "m.npy", mask)
    out = tmp_path / "o"
    p = mxop(["run", "masked_select.so", "masked_select", "--input",
              "3x4:f64=%s" % (tmp_path / "x.npy"), "--input", "3x4:u8=%s" % (tmp_path / "m.npy"),
              "--out", str(out), "--json"], tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    y = np.load(out / "output0.npy")
    np.testing.assert_array_equal(y, x[mask != 0])
    o = doc["outputs"][0]
    assert o["shape"] == [4] and o["dtype"] == "f64" and o["fnv1a64"] == fnv1a64(y.tobytes())
    assert o["sum"] == pytest.approx(y.sum(), rel=1e-12)
    assert doc["inputs"][1]["fnv1a64"] == fnv1a64(mask.tobytes())


def test_run_0d_and_empty(tmp_path):
    p = mxop(["run", "relu.so", "relu", "--input", "scalar:f64", "--out", str(tmp_path / "a")],
             tmp_path)
    assert p.returncode == 0, p.stderr
    assert np.load(tmp_path / "a" / "output0.npy").shape == ()
    p = mxop(["run", "relu.so", "relu", "--input", ":f32"], tmp_path)
    assert p.returncode == 0 and "output 0 shape=[] dtype=f32" in p.stdout
    p = mxop(["run", "relu.so", "relu", "--input", "0x3:f32", "--out", str(tmp_path / "b")],
             tmp_path)
    assert p.returncode == 0, p.stderr
    assert "fnv1a64=cbf29ce484222325 sum=0" in p.stdout  # FNV-1a of no bytes
    assert np.load(tmp_path / "b" / "output0.npy").shape == (0, 3)


def test_run_attributes_and_errors(tmp_path):
    p = mxop(["run", "gemm.so", "gemm", "--input", "2x3:f64", "--input", "3x2:f64", "--attr",
              "alpha=2", "--out", str(tmp_path / "g")], tmp_path)
    assert p.returncode == 0, p.stderr
    a, b, c = (np.load(tmp_path / "g" / n) for n in ("input0.npy", "input1.npy", "output0.npy"))
    np.testing.assert_allclose(c, 2 * a @ b, rtol=1e-12)
    p = mxop(["run", "gemm.so", "gemm", "--input", "2x3:f64", "--input", "3x2:f64", "--attr",
              "alpha=abc"], tmp_path)
    assert p.returncode == 1 and "MXOP_EATTR" in p.stderr
    p = mxop(["run", "relu.so", "relu", "--input", "2x3"], tmp_path)
    assert p.returncode == 2 and "no ':DTYPE'" in p.stderr
    p = mxop(["run", "relu.so", "relu", "--input", "2y3:f32"], tmp_path)
    assert p.returncode == 2 and "shape '2y3'" in p.stderr
    p = mxop(["run", "relu.so", "relu", "--input", "2x3:f99"], tmp_path)
    assert p.returncode == 2 and "unknown dtype 'f99'" in p.stderr
    np.save(tmp_path / "w.npy", np.zeros((2, 2), np.float32))
    p = mxop(["run", "relu.so", "relu", "--input", "2x3:f32=%s" % (tmp_path / "w.npy")], tmp_path)
    assert p.returncode == 2 and "holds [2,2] f32, not [2,3] f32" in p.stderr
    p = mxop(["run", "relu.so", "relu", "--input", "2x3:f32=%s" % (tmp_path / "none.npy")],
             tmp_path)
    assert p.returncode == 2 and "none.npy" in p.stderr
    p = mxop(["run", "relu.so", "nosuch", "--input", "2x3:f32"], tmp_path)
    assert p.returncode == 1 and "MXOP_EUNKNOWN_OP" in p.stderr
    assert leftovers(tmp_path) == []


def guide_examples():
    """The `$ mxop ...` commands of the guide's console blocks and the output shown."""
    text = open(GUIDE).read()
    out = []
    for m in re.finditer(r"^<!-- mxop-example -->\n```console\n(.*?)^```", text, re.S | re.M):
        cmd, shown = None, []
        for line in m.group(1).splitlines():
            if line.startswith("$ "):
                if cmd:
                    out.append((cmd, shown))
                cmd, shown = line[2:], []
            else:
                shown.append(line)
        out.append((cmd, shown))
    return out


def test_the_guides_examples_are_true(tmp_path):
    examples = guide_examples()
    assert len(examples) >= 2
    # The examples name build/...: run them where build/ is the build tree under test
    # (a SANITIZE= build lives elsewhere).
    where = tmp_path / "cwd"
    where.mkdir()
    os.symlink(BUILD, where / "build")
    for cmd, shown in examples:
        argv = cmd.split()
        assert argv[0] == "mxop", cmd
        p = mxop(argv[1:], tmp_path, cwd=str(where))
        got = [line.rstrip() for line in p.stdout.splitlines()]
        assert matches(got, shown), (cmd, got)


def matches(got, shown):
    """Whether `got` is `shown` where each "..." line stands for any lines."""
    parts, cur = [], []
    for line in shown:
        if line == "...":
            parts.append(cur)
            cur = []
        else:
            cur.append(line)
    parts.append(cur)
    if len(parts) == 1:
        return got == shown
    if got[:len(parts[0])] != parts[0] or (parts[-1] and got[-len(parts[-1]):] != parts[-1]):
        return False
    at = len(parts[0])
    for part in parts[1:-1]:
        while at + len(part) <= len(got) and got[at:at + len(part)] != part:
            at += 1
        if at + len(part) > len(got):
            return False
        at += len(part)
    return at <= len(got) - len(parts[-1])


def test_verify_fails_a_hanging_op_within_its_deadline(tmp_path):
    t0 = time.monotonic()
    p = mxop(["verify", os.path.join(FIXTURES, "hang_cb.so"), "--op", "hang_backward",
              "--timeout-ms", "1000"], tmp_path, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    res, _ = parse_lines(p.stdout)
    status, detail = res[("hang_backward", "grad")]
    assert status == "FAIL" and "MXOP_ETIMEOUT" in detail, detail
    # After the first timeout the op's further cases are not run (each would wait too).
    assert time.monotonic() - t0 < 60
    assert leftovers(tmp_path) == []
