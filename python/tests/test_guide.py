"""docs/op-author-guide.md: every C example in it is checked by make check.

A block is one of:
  - a whole program (it has `int main`): compiled against
    build/lib/libmxop-inproc.a and run;
  - a fragment, marked by `<!-- compile: op -->` or `<!-- compile: client -->`
    on the line before it: compiled (syntax and types) as the body of a
    function of an op library or of an engine;
  - an excerpt of a source file of the project (plugins/, tests/plugins/,
    include/): its code must appear in that file in the same order (the file
    itself is built and tested by the Makefile).  "..." and comments mark
    what an excerpt leaves out; whitespace does not matter.
"""
import glob
import os
import re
import shutil
import subprocess

import pytest

from conftest import BUILD, SOURCE

GUIDE = os.path.join(SOURCE, "docs", "op-author-guide.md")


def blocks(lang):
    """(position, code, marker) of every block; marker from <!-- compile: X -->."""
    text = open(GUIDE).read()
    out = []
    for m in re.finditer(r"^```%s\n(.*?)^```" % lang, text, re.S | re.M):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mk = re.match(r"<!-- compile: (\w+) -->", before)
        out.append((m.start(), m.group(1), mk.group(1) if mk else None))
    return out


def squeeze(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"\s+", " ", text).strip()


def code_pieces(block):
    """The block's code as pieces that must occur in order ("..." separates them)."""
    out = []
    for line in block.splitlines():
        for piece in squeeze(line).split("..."):
            piece = piece.strip()
            if piece:
                out.append(piece)
    return out


def sources():
    pats = ["plugins/*.c", "plugins/*.cpp", "plugins/*.cu", "tests/plugins/*.c",
            "tests/plugins/*.cpp", "tests/plugins/*.cu", "include/mxop/*.h",
            "include/mxop/*.hpp"]
    files = []
    for p in pats:
        files += glob.glob(os.path.join(SOURCE, p))
    return files


def is_excerpt(pieces, text):
    """Whether every piece occurs in text, in order."""
    at = 0
    for piece in pieces:
        at = text.find(piece, at)
        if at < 0:
            return False
        at += len(piece)
    return True


ALL = blocks("c")
EXCERPTS = [(p, b) for p, b, mk in ALL if "int main" not in b and mk is None]
FRAGMENTS = [(p, b, mk) for p, b, mk in ALL if mk is not None]
PROGRAMS = [(p, b) for p, b, mk in ALL if "int main" in b and mk is None]

WRAP = {
    "op": '#include "mxop/op.h"\nstatic const mxop_host_t *host;\n'
          "int fragment(mxop_ctx_t *ctx);\nint fragment(mxop_ctx_t *ctx)\n{\n%s\n}\n",
    "client": '#include "mxop/client.h"\nint fragment(mxop_client_t *client);\n'
              "int fragment(mxop_client_t *client)\n{\n%s\nreturn 0;\n}\n",
}


@pytest.mark.parametrize("pos,block", EXCERPTS, ids=[str(p) for p, _ in EXCERPTS])
def test_excerpt_is_in_a_source_file(pos, block):
    pieces = code_pieces(block)
    files = {f: squeeze(open(f, errors="replace").read()) for f in sources()}
    found = [f for f, text in files.items() if is_excerpt(pieces, text)]
    assert found, "the C block at character %d of the guide is in no source file:\n%s" % (
        pos, block)


@pytest.mark.parametrize("pos,block", PROGRAMS, ids=[str(p) for p, _ in PROGRAMS])
def test_program_compiles_and_runs(pos, block, tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / "prog.c"
    src.write_text(block)
    exe = tmp_path / "prog"
    inproc = os.path.join(BUILD, "lib", "libmxop-inproc.a")
    # A SANITIZE= build's static library needs the sanitizer's runtime linked in too.
    san = os.environ.get("MXOP_SANITIZE_CFLAGS", "").split()
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", *san, "-I", os.path.join(SOURCE, "include"),
                    str(src), inproc, "-lprotobuf-c", "-lopenblas", "-lseccomp", "-lstdc++", "-ldl",
                    "-lm", "-o",
                    str(exe)], check=True)
    # The examples name build/...: run them where build/ is this build tree.
    os.symlink(BUILD, tmp_path / "build")
    p = subprocess.run([str(exe)], cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("pos,block,kind", FRAGMENTS, ids=[str(p) for p, _, _ in FRAGMENTS])
def test_fragment_compiles(pos, block, kind, tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler")
    assert kind in WRAP, "unknown marker <!-- compile: %s -->" % kind
    src = tmp_path / "fragment.c"
    src.write_text(WRAP[kind] % block)
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-Wno-unused-variable",
                    "-Wno-unused-but-set-variable", "-I", os.path.join(SOURCE, "include"),
                    "-fsyntax-only", str(src)], check=True)
