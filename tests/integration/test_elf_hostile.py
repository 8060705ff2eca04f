#!/usr/bin/env python3
"""ELF files and mappings built to exhaust the tools (issue 19, items 4, 5 and part of 7).

An unprivileged user (`nobody`) owns a process; offcputime runs as root against it:
  (a) its executable is a 12 KB sparse ELF whose extended section numbering (e_shnum 0,
      section 0's sh_size) claims 16.7M section headers: libelf allocated one descriptor
      per header (4.3 GB, 23 s) in the unwinder's and in the symbolizer's open. Both must
      refuse it before libelf sees it: one "TOOL: warning: ignoring PATH: ..." line,
      binaries_refused in data_quality, bounded time and peak RSS (GNU time's %M).
  (b) it maps 40 copies (distinct build-ids) of an ELF with 300k FDEs (600k rows each):
      the unwind tables of one process are capped; the executable and libc keep theirs
      (its stacks still have frames of the executable), the rest are counted
      (ustack_tables_capped) and named in one warning line; start time and RSS bounded.
  (c) it maps a small file executable 200 times below its executable and libc: the 128
      mapping slots go to the executable and libc first (stacks still unwind through the
      executable), the mappings left out are counted (ustack_maps_capped) and warned.
"""
import ctypes  # noqa: F401 (the target's script uses it)
import os
import re
import shutil
import signal
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
TIME = "/usr/bin/time"
if not os.access(TIME, os.X_OK):
    skip("GNU time (/usr/bin/time) is needed to read the peak RSS")
PYTHON = "/usr/bin/python3"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# A normal offcputime -p run peaks near 110-130 MB here; the old code took 4.3 GB for (a)
# and well over 1 GB for (b).
RSS_LIMIT_KB = 400 * 1024
TIME_LIMIT = 30.0    # seconds for a 1 s run (the old code: 23 s for (a), minutes for (b))
KILL_AFTER = 90.0    # the old code is killed here (and fails)
COPIES = 40          # of the big-CFI file in (b)


# --- ELF images ---------------------------------------------------------------------------
def ehdr64(e_type, entry, phoff, shoff, phnum, shnum, shstrndx):
    return (b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) +
            struct.pack("<HHIQQQIHHHHHH", e_type, 62, 1, entry, phoff, shoff, 0, 64, 56, phnum, 64,
                        shnum, shstrndx))


def phdr64(p_type, flags, off, vaddr, filesz, memsz, align):
    return struct.pack("<IIQQQQQQ", p_type, flags, off, vaddr, vaddr, filesz, memsz, align)


def shdr64(name, sh_type, flags, addr, off, size, link=0, info=0, align=1, entsize=0):
    return struct.pack("<IIQQQQIIQQ", name, sh_type, flags, addr, off, size, link, info, align, entsize)


def sparse_exe(path):
    """A static x86-64 executable (10 ms nanosleep()s in a loop) whose ELF header says
    e_shnum 0 and whose section 0 says 16.7M sections: the file is 1 GiB - 4 KiB long,
    8 KiB of it allocated."""
    base = 0x400000
    shoff = 0x1000
    shnum = ((1 << 30) - 2 * 0x1000) // 64
    code = bytes([0x48, 0x83, 0xec, 0x10,                                # sub rsp, 16
                  0x48, 0xc7, 0x04, 0x24, 0, 0, 0, 0,                    # tv_sec = 0
                  0x48, 0xc7, 0x44, 0x24, 0x08, 0x80, 0x96, 0x98, 0x00,  # tv_nsec = 10 ms
                  0xb8, 35, 0, 0, 0,                                     # loop: eax = nanosleep
                  0x48, 0x89, 0xe7, 0x31, 0xf6,                          # rdi = rsp, esi = 0
                  0x0f, 0x05, 0xeb, 0xf2])                               # syscall; jmp loop
    img = bytearray(0x1000 + 64)
    img[0:64] = ehdr64(2, base + 0x80, 64, shoff, 1, 0, 0xffff)
    img[64:120] = phdr64(1, 5, 0, base, 0x1000, 0x1000, 0x1000)
    img[0x80:0x80 + len(code)] = code
    img[shoff:shoff + 64] = shdr64(0, 0, 0, 0, 0, shnum, link=1)
    with open(path, "wb") as f:
        f.write(img)
        f.truncate(shoff + shnum * 64)
    os.chmod(path, 0o755)


def uleb(v):
    out = bytearray()
    while True:
        b = v & 0x7f
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def big_cfi_elf(nfde):
    """A shared object (no code in the file) with nfde FDEs of 16 bytes of code each,
    two rows each (CFA rsp+8, then rsp+16), indexed by .eh_frame_hdr; a GNU build-id note
    whose bytes (offset returned) each copy changes."""
    note_off, hdr_off = 0x100, 0x200
    hdr_size = 12 + 8 * nfde
    ehf_off = (hdr_off + hdr_size + 7) & ~7
    cie = bytearray(struct.pack("<I", 0) + b"\x01zR\x00" + uleb(1) + b"\x78" + uleb(16) + uleb(1) + b"\x1b" +
                    b"\x0c\x07\x08" + b"\x90\x01")
    while (len(cie) + 4) % 4:
        cie += b"\x00"
    cie = struct.pack("<I", len(cie)) + cie
    fde_size = 20
    ehf_size = len(cie) + nfde * fde_size + 4
    text = (ehf_off + ehf_size + 0xfff) & ~0xfff  # code addresses (beyond the file)
    shstr = b"\x00.note.gnu.build-id\x00.eh_frame_hdr\x00.eh_frame\x00.shstrtab\x00"
    shstr_off = ehf_off + ehf_size
    shoff = (shstr_off + len(shstr) + 7) & ~7
    size = shoff + 5 * 64
    img = bytearray(size)
    img[0:64] = ehdr64(3, 0, 64, shoff, 3, 5, 4)
    img[64:120] = phdr64(1, 5, 0, 0, size, text + 16 * nfde, 0x1000)
    img[120:176] = phdr64(0x6474e550, 4, hdr_off, hdr_off, hdr_size, hdr_size, 4)
    img[176:232] = phdr64(4, 4, note_off, note_off, 36, 36, 4)
    img[note_off:note_off + 16] = struct.pack("<III", 4, 20, 3) + b"GNU\x00"
    # .eh_frame_hdr: version 1, eh_frame_ptr pcrel|sdata4, count udata4, table datarel|sdata4
    struct.pack_into("<BBBBiI", img, hdr_off, 1, 0x1b, 0x03, 0x3b, ehf_off - (hdr_off + 4), nfde)
    img[ehf_off:ehf_off + len(cie)] = cie
    fde_tail = struct.pack("<I", 16) + b"\x00\x41\x0e\x10"  # pc_range, aug len 0, advance 1, def_cfa_offset 16
    table = bytearray(8 * nfde)
    p = ehf_off + len(cie)
    for i in range(nfde):
        pc = text + 16 * i
        struct.pack_into("<IIi", img, p, 16, p + 4 - ehf_off, pc - (p + 8))
        img[p + 12:p + 20] = fde_tail
        struct.pack_into("<ii", table, 8 * i, pc - hdr_off, p - hdr_off)
        p += fde_size
    img[hdr_off + 12:hdr_off + 12 + len(table)] = table
    img[shstr_off:shstr_off + len(shstr)] = shstr
    sh = shdr64(0, 0, 0, 0, 0, 0)
    sh += shdr64(1, 7, 2, note_off, note_off, 36, align=4)
    sh += shdr64(20, 1, 2, hdr_off, hdr_off, hdr_size, align=4)
    sh += shdr64(34, 1, 2, ehf_off, ehf_off, ehf_size, align=8)
    sh += shdr64(44, 3, 0, 0, shstr_off, len(shstr))
    img[shoff:shoff + len(sh)] = sh
    return img, note_off + 16


# --- the target and the tool --------------------------------------------------------------
# The target: maps what it is told (MAP_FIXED_NOREPLACE at the given addresses, or where
# the kernel puts it), then sleeps 10 ms at a time (each wake-up is an off-CPU record).
TARGET = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
for spec in sys.argv[1:]:
    path, addr, n, step = spec.split(",")
    fd = os.open(path, os.O_RDONLY)
    size = min(os.fstat(fd).st_size, 1 << 30)
    for i in range(int(n)):
        a = int(addr, 16) + i * int(step, 16) if addr != "0" else 0
        r = libc.mmap(a, size if a == 0 else 4096, 5, 2 | (0x100000 if a else 0), fd, 0)  # R|X, PRIVATE
        if r in (None, ctypes.c_void_p(-1).value):
            sys.exit("mmap %s: errno %d" % (path, ctypes.get_errno()))
    os.close(fd)
print("mapped", flush=True)
while True:
    time.sleep(0.01)
'''


def nobody_target(work, specs):
    script = os.path.join(work, "target.py")
    with open(script, "w") as f:
        f.write(TARGET)
    p = subprocess.Popen(NOBODY + [PYTHON, script] + specs, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()  # a sign, not a sleep: the target has mapped everything
    check(line.strip() == "mapped", "nobody's target mapped its files (%r)" % line)
    return p


def run_oc(args, label):
    """offcputime under GNU time: (elapsed s, peak RSS KB, rc, stdout, stderr)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.monotonic()
        p = subprocess.Popen([TIME, "-f", "%M", "-o", tf.name, OC] + args, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = p.communicate(timeout=KILL_AFTER)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            check(False, "%s: offcputime finishes (killed after %.0f s)" % (label, KILL_AFTER))
            return None
        elapsed = time.monotonic() - t0
        tf.seek(0)
        words = tf.read().split()
        hwm = int(words[-1]) if words and words[-1].isdigit() else -1
    print("   %s: %.1f s, peak RSS %d MB, exit %d" % (label, elapsed, hwm >> 10, p.returncode))
    check(p.returncode == 0, "%s: exit 0 (got %d: %r)" % (label, p.returncode, err.strip()[-300:]))
    check(elapsed < TIME_LIMIT, "%s: finished in %.1f s (< %.0f s)" % (label, elapsed, TIME_LIMIT))
    check(0 < hwm < RSS_LIMIT_KB, "%s: peak RSS %d MB < %d MB" % (label, hwm >> 10, RSS_LIMIT_KB >> 10))
    return elapsed, hwm, p.returncode, out, err


def summary_dq(out):
    recs = validated("offcputime", ndjson(out, "offcputime"))
    summ = [r for r in recs if is_type(r, "offcputime", "summary")]
    return recs, (summ[-1].get("data_quality", {}) if summ else {})


def stacks(recs):
    """(user frames innermost first, off-CPU ns) of every stack record."""
    return [(r.get("user_stack", []), r.get("offcpu_total_ns", 0)) for r in recs
            if is_type(r, "offcputime", "stack")]


# Frames of python3.11 itself (exported names, or module+offset); libc's are not.
def exe_frame(f):
    return f.startswith(("_PyEval_", "PyEval_", "Py_", "_Py", "PyObject_", "pymain")) or "(python3" in f


def exe_unwound_share(recs, pid):
    """Share of the target's off-CPU time whose user stack reaches python3's frames."""
    mine = [(u, v) for r in recs if r.get("pid") == pid
            for u, v in [(r.get("user_stack", []), r.get("offcpu_total_ns", 0))]
            if is_type(r, "offcputime", "stack")]
    total = sum(v for _, v in mine)
    good = sum(v for u, v in mine if any(exe_frame(f) for f in u))
    return (good / total if total else 0.0), total, mine


def warnings(err, what):
    return [l for l in err.splitlines() if re.match(r"^offcputime: warning: ignoring .*%s" % re.escape(what), l)]


work = tempfile.mkdtemp(prefix="elfhostile-")
os.chmod(work, 0o755)
os.chown(work, 65534, 65534)
procs = []
try:
    # (a) sparse executable with extended numbering (the file is nobody's)
    exe = os.path.join(work, "sparse_exe")
    sparse_exe(exe)
    os.chown(exe, 65534, 65534)
    st = os.stat(exe)
    print("   sparse executable: %d MiB apparent, %d KiB allocated" % (st.st_size >> 20, st.st_blocks // 2))
    p = subprocess.Popen(NOBODY + [exe])
    procs.append(p)
    wait_for(lambda: open("/proc/%d/stat" % p.pid).read().split()[2] == "S", 5.0,
             "the sparse executable runs and sleeps")
    for mode in (["--unwind=dwarf"], ["--unwind=fp"]):  # unwinder and symbolizer; symbolizer alone
        r = run_oc(["-p", str(p.pid), "-j"] + mode + ["1"], "sparse ELF, offcputime %s" % mode[0])
        if r:
            w = warnings(r[4], exe)
            check(len(w) == 1 and "16777088 section headers" in w[0],
                  "sparse ELF %s: one warning line naming the file (%r)" % (mode[0], r[4].strip()[-300:]))
            recs, dq = summary_dq(r[3])
            check(dq.get("binaries_refused", 0) >= 1 or mode[0] == "--unwind=fp",
                  "sparse ELF %s: data_quality.binaries_refused %s" % (mode[0], dq.get("binaries_refused")))
    p.kill()
    p.wait()

    # (b) 40 copies (distinct build-ids) of a file with 300k FDEs, 600k rows each:
    # 24M rows for one process (the old code: 14.5M rows from 24 copies took 39 s and
    # 411 MB on a loaded machine)
    img, id_off = big_cfi_elf(300000)
    copies = []
    for i in range(COPIES):
        img[id_off:id_off + 20] = struct.pack("<I", i + 1) + b"hostile-buildid!"
        path = os.path.join(work, "big%02d.so" % i)
        with open(path, "wb") as f:
            f.write(img)
        os.chown(path, 65534, 65534)
        copies.append(path)
    print("   big-CFI file: %d MB, 300000 FDEs, %d copies" % (len(img) >> 20, COPIES))
    p = nobody_target(work, ["%s,0,1,0" % c for c in copies])
    procs.append(p)
    r = run_oc(["-p", str(p.pid), "-j", "1"], "%d big-CFI copies" % COPIES)
    if r:
        recs, dq = summary_dq(r[3])
        start = next((x for x in recs if is_type(x, "offcputime", "start")), {})
        ut = start.get("unwind_tables", {})
        print("   unwind_tables: %s" % ut)
        check(0 < ut.get("rows", 0) <= 8 * 1024 * 1024,
              "big CFI: rows in the tables %s <= the cap (8M across processes)" % ut.get("rows"))
        check(dq.get("ustack_tables_capped", 0) > 0,
              "big CFI: data_quality.ustack_tables_capped %s > 0" % dq.get("ustack_tables_capped"))
        w = warnings(r[4], "mappings of process %d" % p.pid)
        check(len(w) == 1 and "rows" in w[0], "big CFI: one warning line for the process (%r)" % r[4].strip()[-400:])
        share, total, mine = exe_unwound_share(recs, p.pid)
        check(total > 0 and share >= 0.9,
              "big CFI: %.0f%% of the target's off-CPU time unwinds into python3's own frames (>= 90%%)"
              % (100 * share))
        if share < 0.9:
            for u, v in mine[:5]:
                print("     %8d ns  %s" % (v, ";".join(u)[:200]))
    p.kill()
    p.wait()
    for c in copies:
        os.unlink(c)

    # (c) one small file mapped executable 200 times below the executable and libc
    small = os.path.join(work, "small.so")
    shutil.copyfile("/bin/true", small)
    os.chown(small, 65534, 65534)
    # python3.11 is not PIE here (0x400000): the mappings go from 1 MiB to 2.6 MiB
    p = nobody_target(work, ["%s,100000,200,2000" % small])
    procs.append(p)
    with open("/proc/%d/maps" % p.pid) as f:
        lines = f.read().splitlines()
    xmaps = [l for l in lines if l.split()[1][2] == "x" and "/" in l]
    first = [l.split()[-1] for l in xmaps[:128]]
    check(len(xmaps) > 200 and all(x == small for x in first),
          "the target's first 128 executable mappings (by address) are the small file (%d in all)" % len(xmaps))
    r = run_oc(["-p", str(p.pid), "-j", "1"], "200 low mappings")
    if r:
        recs, dq = summary_dq(r[3])
        check(dq.get("ustack_maps_capped", 0) >= 200 - 128,
              "low mappings: data_quality.ustack_maps_capped %s >= 72" % dq.get("ustack_maps_capped"))
        w = warnings(r[4], "mappings of process %d" % p.pid)
        check(len(w) == 1 and "128" in w[0], "low mappings: one warning line (%r)" % r[4].strip()[-400:])
        share, total, mine = exe_unwound_share(recs, p.pid)
        check(total > 0 and share >= 0.9,
              "low mappings: %.0f%% of the target's off-CPU time unwinds into python3's own frames (>= 90%%);"
              " ustack_no_mapping %s" % (100 * share, dq.get("ustack_no_mapping")))
        if share < 0.9:
            for u, v in mine[:5]:
                print("     %8d ns  %s" % (v, ";".join(u)[:200]))
    p.kill()
    p.wait()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(work, ignore_errors=True)

finish()
