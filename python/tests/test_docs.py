"""Docs that run: every Python block of README.md and python/README.md, and
the documented torchrun command, run as written."""
import glob
import os
import re
import shlex
import shutil
import subprocess

import pytest

from conftest import PYTHON, SOURCE, BUILD

DOCS = [os.path.join(SOURCE, "README.md"), os.path.join(SOURCE, "python", "README.md")]


def blocks(path, lang):
    text = open(path).read()
    out = []
    for m in re.finditer(r"^( *)```%s\n(.*?)^\1```" % lang, text, re.S | re.M):
        indent = len(m.group(1))
        out.append("\n".join(ln[indent:] for ln in m.group(2).splitlines()))
    return out


SNIPPETS = [(os.path.basename(os.path.dirname(p)) + "/" + os.path.basename(p), i, code)
            for p in DOCS for i, code in enumerate(blocks(p, "python"))]


def clean_env(tmp):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MXOP_SOCKET", "MXOP_PLUGIN_DIR", "MXOP_EMBEDDED_SOCKET")}
    env["PYTHONPATH"] = os.path.join(SOURCE, "python")
    env["MXOP_BUILD_DIR"] = BUILD
    env["TMPDIR"] = tmp
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_the_docs_have_python_blocks():
    names = {n for n, _, _ in SNIPPETS}
    assert len(SNIPPETS) >= 5 and len(names) == 2, SNIPPETS


@pytest.mark.parametrize("name,index,code", SNIPPETS,
                         ids=["%s#%d" % (n, i) for n, i, _ in SNIPPETS])
def test_python_block_runs_as_written(name, index, code, tmp_path):
    p = subprocess.run([PYTHON, "-c", code], env=clean_env(str(tmp_path)), cwd=SOURCE,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, "%s block %d failed:\n%s\n%s" % (name, index, code, p.stderr)
    assert glob.glob(os.path.join(str(tmp_path), "mxop-*")) == []


def test_documented_torchrun_command_runs(tmp_path):
    cmds = [b for b in blocks(DOCS[1], "sh") if "torch.distributed.run" in b]
    assert len(cmds) == 1
    argv = shlex.split(cmds[0].replace("\\\n", " "))
    assert argv[0] == "build/venv/bin/python3"
    argv[0] = PYTHON
    argv[argv.index("--log_dir") + 1] = str(tmp_path / "logs")
    argv += ["--json"]
    p = subprocess.run(argv, env=clean_env(str(tmp_path)), cwd=SOURCE, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert any(ln.startswith("RESULT ") for ln in p.stdout.splitlines()), p.stdout


def test_documented_pip_install_works(tmp_path):
    cmds = [b for b in blocks(DOCS[1], "sh") if "pip install" in b]
    assert len(cmds) == 1
    argv = shlex.split(cmds[0].splitlines()[0])
    assert argv[:4] == ["build/venv/bin/python3", "-m", "pip", "install"]
    # Built from a copy, so that the source tree gets no build directories.
    src = tmp_path / "src"
    shutil.copytree(os.path.join(SOURCE, "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "tests"))
    site = tmp_path / "site"
    argv[0] = PYTHON
    argv[argv.index("--target") + 1] = str(site)
    argv[-1] = str(src)
    env = clean_env(str(tmp_path))
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    env["PYTHONPATH"] = str(site)  # the installed copy, told MXOP_BUILD_DIR
    code = ("import mxop, mxop.torch, torch; assert mxop.__file__.startswith(%r); "
            "g = mxop.torch.load(None, 'gemm.so').gemm; "
            "print(g(torch.ones(2, 3), torch.ones(3, 2)).tolist())" % str(site))
    p = subprocess.run([PYTHON, "-c", code], env=env, cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[[3.0, 3.0], [3.0, 3.0]]"
