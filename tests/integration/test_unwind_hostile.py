#!/usr/bin/env python3
"""Hostile CFI in a target's mappings (issue 19 item 3): an FDE whose CFA program has
hundreds of thousands of rows. The libdw-based table builder re-ran the program for
every row (O(rows²)): one 411 KB file delayed `offcputime -p PID 1` to 40 s, 1.2 MB to
211 s, at 100% CPU and silently. The tables now come from one pass over each program,
with rows capped per FDE (common/unwind_tables.cpp).

The attacker is `nobody`: it writes THREE such ELF files (a 600 KB CFA program each,
~120k rows; distinct files, so three tables) and maps them executable into its own
python3 process, which root then profiles. Checks:
  * `offcputime -p PID -j 1` exits 0 within 10 s, compile included (the old builder:
    minutes, killed at 60 s);
  * its start record's unwind_tables: the hostile tables were built up to the per-FDE
    cap and no further: rows exceed a control process's (same python3, no hostile
    files) by between 3 x 65536 and 3 x (65536 + 2); build_ms under 2 s;
  * the control run's rows and the hostile run's are both > 0 (tables built at all).
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F401

require_root()
OC = tool("offcputime")
require_built(OC)
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
ROWS_PER_FDE_CAP = 1 << 16  # kMaxRowsPerFde
N_FILES = 3
N_ROWS = 120000  # per file: advance 1 byte + a new CFA offset, ~5 bytes a row


def uleb(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def hostile_elf(n_rows, salt):
    """A minimal ELF64 .so: one PT_LOAD, .eh_frame_hdr, .eh_frame with one CIE and one
    FDE whose program is n_rows x (DW_CFA_advance_loc1 1; DW_CFA_def_cfa_offset 8k)."""
    HDR = 0x200
    cie = struct.pack("<I", 0) + b"\x01zR\x00" + uleb(1) + b"\x78\x10" + uleb(1) + b"\x1b"
    cie += b"\x0c\x07\x08\x90\x01"  # CFA = rsp+8, RA at CFA-8
    while (len(cie) + 4) % 8:
        cie += b"\x00"
    eh = bytearray(struct.pack("<I", len(cie)) + cie)
    prog = b"".join(b"\x02\x01\x0e" + uleb(8 * ((k + salt) % 4000 + 2)) for k in range(n_rows))
    EH = HDR + 0x20
    start, rng = 0x10000, n_rows + 0x1000
    fde_off = len(eh)
    body = bytearray(struct.pack("<I", fde_off + 4))  # CIE pointer: back to offset 0
    body += struct.pack("<i", start - (EH + fde_off + 8))  # pc_begin, pcrel
    body += struct.pack("<I", rng) + uleb(0) + prog
    while (len(body) + 4) % 8:
        body += b"\x00"
    eh += struct.pack("<I", len(body)) + body + struct.pack("<I", 0)
    hdr = b"\x01\x1b\x03\x3b" + struct.pack("<iI", EH - (HDR + 4), 1)
    hdr += struct.pack("<ii", start - HDR, EH + fde_off - HDR)
    shstr = b"\x00.eh_frame_hdr\x00.eh_frame\x00.shstrtab\x00"
    img = bytearray(HDR) + hdr
    img += bytes(EH - len(img)) + eh
    shstr_off = len(img)
    img += shstr
    img += bytes((-len(img)) % 8)
    shoff = len(img)

    def shdr(name, typ, flags, addr, off, size):
        return struct.pack("<IIQQQQIIQQ", name, typ, flags, addr, off, size, 0, 0, 8, 0)

    img += bytes(64) + shdr(1, 1, 2, HDR, HDR, len(hdr)) + shdr(15, 1, 2, EH, EH, len(eh))
    img += shdr(25, 3, 0, 0, shstr_off, len(shstr))
    ehdr = b"\x7fELF\x02\x01\x01" + bytes(9)
    ehdr += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, shoff, 0, 64, 56, 1, 64, 4, 3)
    ehdr += struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, len(img), max(len(img), start + rng), 0x1000)
    img[0:len(ehdr)] = ehdr
    return bytes(img)


# The target: nobody's python3 mapping the files PROT_EXEC, blocked reading stdin.
TARGET = r"""
import mmap, sys
maps = []
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        maps.append(mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC))
print("ready", flush=True)
sys.stdin.read()
"""


def profile(files):
    """Starts nobody's target mapping `files`, runs offcputime -p PID -j 1 on it as root;
    returns (seconds, rc, start record, stderr)."""
    target = subprocess.Popen(NOBODY + [sys.executable, "-c", TARGET] + files, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        line = target.stdout.readline()
        check(line.strip() == "ready", "nobody's target mapped %d hostile file(s)" % len(files))
        maps = open("/proc/%d/maps" % target.pid).read()
        for f in files:
            check(any(f in l and " r-xp " in l for l in maps.splitlines()),
                  "%s is an executable file mapping of the target" % os.path.basename(f))
        t0 = time.monotonic()
        try:
            r = run([OC, "-p", str(target.pid), "-j", "1"], timeout=60)
        except subprocess.TimeoutExpired:
            return 60.0, None, {}, "timed out after 60 s"
        secs = time.monotonic() - t0
        start_rec = {}
        for l in r.stdout.splitlines():
            try:
                rec = json.loads(l)
            except ValueError:
                continue
            if is_type(rec, "offcputime", "start"):
                start_rec = rec
        return secs, r.returncode, start_rec, r.stderr
    finally:
        target.stdin.close()
        target.wait(timeout=10)


work = tempfile.mkdtemp(prefix="unwind_hostile_")
try:
    os.chmod(work, 0o755)
    paths = []
    for i in range(N_FILES):
        p = os.path.join(work, "hostile%d.so" % i)
        with open(p, "wb") as f:
            f.write(hostile_elf(N_ROWS, i))
        os.chown(p, 65534, 65534)
        paths.append(p)
    print("hostile files: %d x %d bytes" % (N_FILES, os.path.getsize(paths[0])))

    secs0, rc0, start0, err0 = profile([])
    rows0 = start0.get("unwind_tables", {}).get("rows", 0)
    check(rc0 == 0 and rows0 > 0, "control: offcputime exit 0 with tables (%s rows, rc %s)" % (rows0, rc0))

    secs, rc, start_rec, err = profile(paths)
    ut = start_rec.get("unwind_tables", {})
    print("hostile run: %.1f s, unwind_tables %s" % (secs, json.dumps(ut)))
    check(rc == 0, "offcputime -p PID -j 1 exits 0 (rc %s; %s)" % (rc, err.strip()[-300:]))
    check(secs < 10, "offcputime finished in %.1f s (< 10 s, compile included; the old builder took minutes)" % secs)
    extra = ut.get("rows", 0) - rows0
    check(N_FILES * ROWS_PER_FDE_CAP <= extra <= N_FILES * (ROWS_PER_FDE_CAP + 2),
          "hostile tables capped at %d rows per FDE: %d rows more than the control run" % (ROWS_PER_FDE_CAP, extra))
    check(ut.get("build_ms", 1e9) < 2000, "tables built in %.0f ms (< 2000)" % ut.get("build_ms", -1))
finally:
    shutil.rmtree(work, ignore_errors=True)
finish()
