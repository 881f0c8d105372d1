"""bench/plot_scaling.py - the plot of section 6 of bench_mxop: aggregate
null-op calls/s against the number of client processes, for both data paths.

    python3 bench/plot_scaling.py BUILD/bench/results.json OUT.png

Uses matplotlib when the interpreter has it; otherwise it draws the PNG
itself (a log-scale line chart with a small built-in bitmap font), so that
`make bench` always leaves a plot.  Standard library only in that case.
"""
import json
import math
import re
import struct
import sys
import zlib

COLOURS = {"shm": (31, 119, 180), "socket": (214, 39, 40)}


def read_points(path):
    """{path: {n: calls/s}} from the rows named 'null op, N process(es), PATH (sum)'."""
    with open(path) as f:
        rows = json.load(f)["rows"]
    pts = {}
    for r in rows:
        m = re.match(r"null op, (\d+) process(?:es)?, (shm|socket) \(sum\)$", r["name"])
        if m and r.get("baseline", "").startswith("1 process"):
            pts.setdefault(m.group(2), {})[int(m.group(1))] = r["median"]
    return pts


def plot_matplotlib(pts, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, p in sorted(pts.items()):
        ns = sorted(p)
        ax.plot(ns, [p[n] for n in ns], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("client processes")
    ax.set_ylabel("null-op calls/s (sum)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


# A 5x7 bitmap font for the few characters the labels use.
FONT = {
    "0": "01110 10001 10011 10101 11001 10001 01110", "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111", "3": "11110 00001 00001 01110 00001 00001 11110",
    "4": "00010 00110 01010 10010 11111 00010 00010", "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110", "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110", "9": "01110 10001 10001 01111 00001 00010 01100",
    "a": "00000 00000 01110 00001 01111 10001 01111", "c": "00000 00000 01110 10000 10000 10001 01110",
    "e": "00000 00000 01110 10001 11111 10000 01110", "h": "10000 10000 10110 11001 10001 10001 10001",
    "f": "00110 01001 01000 11100 01000 01000 01000", "g": "00000 01111 10001 10001 01111 00001 01110",
    "i": "00100 00000 01100 00100 00100 00100 01110", "k": "10000 10000 10010 10100 11000 10100 10010",
    "l": "01100 00100 00100 00100 00100 00100 01110", "m": "00000 00000 11010 10101 10101 10001 10001",
    "n": "00000 00000 10110 11001 10001 10001 10001", "o": "00000 00000 01110 10001 10001 10001 01110",
    "p": "00000 00000 11110 10001 11110 10000 10000", "r": "00000 00000 10110 11001 10000 10000 10000",
    "s": "00000 00000 01111 10000 01110 00001 11110", "t": "01000 01000 11100 01000 01000 01001 00110",
    "u": "00000 00000 10001 10001 10001 10011 01101", "/": "00001 00010 00010 00100 01000 01000 10000",
    " ": "00000 00000 00000 00000 00000 00000 00000", "M": "10001 11011 10101 10101 10001 10001 10001",
    "N": "10001 11001 10101 10011 10001 10001 10001", "=": "00000 00000 11111 00000 11111 00000 00000",
    "(": "00010 00100 01000 01000 01000 00100 00010", ")": "01000 00100 00010 00010 00010 00100 01000",
    "-": "00000 00000 00000 11111 00000 00000 00000", "x": "00000 00000 10001 01010 00100 01010 10001",
}


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def dot(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, width=1):
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for s in range(steps + 1):
            x = round(x0 + (x1 - x0) * s / steps)
            y = round(y0 + (y1 - y0) * s / steps)
            for dx in range(-(width // 2), width // 2 + 1):
                for dy in range(-(width // 2), width // 2 + 1):
                    self.dot(x + dx, y + dy, c)

    def box(self, x, y, r, c):
        for dx in range(-r, r + 1):
            for dy in range(-r, r + 1):
                self.dot(x + dx, y + dy, c)

    def text(self, x, y, s, c=(0, 0, 0), scale=1):
        for ch in s:
            rows = FONT.get(ch, FONT[" "]).split()
            for ry, bits in enumerate(rows):
                for rx, b in enumerate(bits):
                    if b == "1":
                        for sx in range(scale):
                            for sy in range(scale):
                                self.dot(x + rx * scale + sx, y + ry * scale + sy, c)
            x += 6 * scale

    def png(self, out):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(kind, data):
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        with open(out, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
            f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)))
            f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
            f.write(chunk(b"IEND", b""))


def si(v):
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if v >= div:
            return "%g%s" % (v / div, unit)
    return "%g" % v


def plot_builtin(pts, out):
    W, H, L, R, T, B = 640, 420, 80, 20, 30, 60
    cv = Canvas(W, H)
    vals = [v for p in pts.values() for v in p.values() if v > 0]
    lo = 10 ** math.floor(math.log10(min(vals)))
    hi = 10 ** math.ceil(math.log10(max(vals)))
    ns = sorted({n for p in pts.values() for n in p})

    def X(n):
        a, b = math.log2(ns[0]), math.log2(ns[-1])
        return L + int((math.log2(n) - a) / max(b - a, 1e-9) * (W - L - R))

    def Y(v):
        return T + int((math.log10(hi) - math.log10(v)) / (math.log10(hi) - math.log10(lo)) * (H - T - B))

    grey = (200, 200, 200)
    d = lo
    while d <= hi:
        cv.line(L, Y(d), W - R, Y(d), grey)
        cv.text(L - 8 - 6 * len(si(d)), Y(d) - 3, si(d))
        d *= 10
    for n in ns:
        cv.line(X(n), T, X(n), H - B, grey)
        cv.text(X(n) - 3 * len(str(n)), H - B + 8, str(n))
    cv.line(L, T, L, H - B, (0, 0, 0))
    cv.line(L, H - B, W - R, H - B, (0, 0, 0))
    cv.text(L + 150, H - B + 26, "client processes (N)")
    cv.text(8, 10, "null-op calls/s (sum), log scale")
    ly = T + 10
    for name in sorted(pts):
        p, c = pts[name], COLOURS.get(name, (0, 0, 0))
        keys = sorted(p)
        for a, b in zip(keys, keys[1:]):
            cv.line(X(a), Y(p[a]), X(b), Y(p[b]), c, width=3)
        for n in keys:
            cv.box(X(n), Y(p[n]), 4, c)
        cv.line(W - R - 110, ly + 3, W - R - 80, ly + 3, c, width=3)
        cv.text(W - R - 72, ly, name, c)
        ly += 16
    cv.png(out)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: plot_scaling.py RESULTS.json OUT.png\n")
        return 2
    pts = read_points(argv[1])
    if not pts:
        sys.stderr.write("plot_scaling: no rows of section 6 in %s\n" % argv[1])
        return 1
    try:
        plot_matplotlib(pts, argv[2])
    except ImportError:
        plot_builtin(pts, argv[2])
    print("plot of calls/s against client processes: %s" % argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
