#!/usr/bin/env python3
"""offcputime --waker (BCC's offwaketime) against wake_chain, whose threads time their own
blocking: wk_waiter waits on a futex that wk_signaler wakes every D ms from
waker_signal_fn (an inline FUTEX_WAKE syscall), and wk_timer sleeps D ms (woken by a
timer interrupt: no thread wakes it).

Checks (numbers, not exit codes):
  * -j -p (DWARF user stacks, the default with -p): every record validates against
    docs/schema/offcputime.schema.json; wk_waiter's off-CPU time whose waker is task
    wk_signaler (waker_tid its TID) with waker_signal_fn in the waker's user stack and
    futex_wake in its kernel stack is within 5% of the time wk_waiter measured itself;
    wk_timer's off-CPU time woken by an interrupt (hrtimer_wakeup in the waker's kernel
    stack, no waker user stack, comm or tid, whatever task the interrupt hit) is within 5% of its own measured sleep, and none of it
    is attributed to wk_signaler; the summary's waker_kind_total_ns adds up; no
    map_full, lost events or unseen wakeups;
  * -f -K --waker: folded lines "wakee;...;--;waker kernel frames;waker_comm value",
    wk_waiter's lines ending in wk_signaler add up to its measured time (5%), no user
    frames in the waker part; wk_timer's end in [interrupt];
  * -U --unwind fp --waker: the waker part has user frames only (waker_signal_fn), the
    timer's waker part is [interrupt] alone;
  * text mode prints BCC offwaketime's "waker:" / "--  --" / "target:" layout;
  * the same run's --svg names the waker, and its --pprof (read by go tool pprof -raw)
    holds the JSON's off-CPU total with waker_kind/waker_comm labels;
  * usage error: --waker --state 0 (preempted periods have no waker) is one line, exit 2;
  * without --waker the records carry no waker fields (the default output is unchanged).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F401

require_root()
OC = tool("offcputime")
WL = workload("wake_chain")
require_built(OC, WL)

ITERS, DELAY_MS = 20, 20
TOL = 0.05
TMP = tempfile.mkdtemp(prefix="bpfdiag-waker-test-")
GO = shutil.which("go")
if not GO and CI:
    check(False, "go is installed under CI (scripts/install-deps: golang-go)")


def run_mode(args):
    """wake_chain starts its threads once offcputime -p has attached; offcputime ends by
    itself when the workload exits. Returns (truth by thread name, stdout, stderr)."""
    steal0 = steal_ns()
    wl = subprocess.Popen([WL, str(ITERS), str(DELAY_MS), "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True)
    oc = start([OC, *args, "-p", str(wl.pid)])
    if not wait_attached(oc, timeout=30):
        wl.kill()
        wl.wait()
        return None, "", ""
    wl_out, _ = wl.communicate(input="go\n", timeout=60)
    out, err, rc = stop(oc, timeout=60, sig=None)
    truth = {t["name"]: t for t in json.loads(wl_out)["threads"]}
    steal = steal_ns() - steal0
    check(rc == 0 and "PID %d exited" % wl.pid in err,
          "offcputime %s ends by itself when the workload exits (rc %d, %r)"
          % (" ".join(args), rc, err.strip()[-200:]))
    for name in ("wk_waiter", "wk_timer"):
        truth[name]["steal_ns"] = steal
    return truth, out, err


def close_to(attributed, t):
    """Within TOL of what the thread measured, or below it by at most the hypervisor's
    steal (which can only inflate the workload's own clock readings)."""
    m = t["blocked_ns"]
    return within(attributed, m, rel=TOL) or m - t["steal_ns"] * 1.05 <= attributed <= m


# --- 1. JSON, DWARF user stacks (the default with -p) ------------------------------------
SVG, PB = os.path.join(TMP, "wake.svg"), os.path.join(TMP, "wake.pb.gz")
truth, out, err = run_mode(["-j", "--waker", "--svg", SVG, "--pprof", PB])
if truth:
    recs = ndjson(out)
    validate("offcputime", recs)
    stacks = [r for r in recs if r["type"] == "offcputime.stack"]
    summary = recs[-1] if recs and recs[-1]["type"] == "offcputime.summary" else {}
    start_rec = recs[0] if recs else {}
    check(start_rec.get("options", {}).get("waker") is True and start_rec["options"]["unwind"] == "dwarf",
          "start record: options.waker true, unwind dwarf")
    waiter, signaler, timer = truth["wk_waiter"], truth["wk_signaler"], truth["wk_timer"]
    print("info workload: waiter blocked %.1f ms in %d waits, signaler %d wakes, timer slept %.1f ms"
          % (waiter["blocked_ns"] / 1e6, waiter["calls"], signaler["wakes"], timer["blocked_ns"] / 1e6))
    check(signaler["wakes"] >= ITERS // 2, "the signaler woke a blocked waiter in at least half its calls (%d of %d)"
          % (signaler["wakes"], ITERS))

    mine = [s for s in stacks if s["tid"] == waiter["tid"]]
    by_b = [s for s in mine if s["waker_kind"] == "task" and s["waker_comm"] == "wk_signaler"
            and s["waker_tid"] == signaler["tid"] and s["waker_pid"] == s["pid"]]
    from_fn = [s for s in by_b if "waker_signal_fn" in s["waker_user_stack"]
               and any("futex_wake" in f for f in s["waker_kernel_stack"])]
    att = sum(s["offcpu_total_ns"] for s in from_fn)
    top = max(from_fn, key=lambda s: s["offcpu_total_ns"]) if from_fn else None
    if top:
        print("info waiter's top waker stack: kernel %s | user %s"
              % (";".join(top["waker_kernel_stack"][:6]), ";".join(top["waker_user_stack"][:4])))
    check(close_to(att, waiter),
          "wk_waiter: off-CPU time woken by wk_signaler from waker_signal_fn %.1f ms vs measured %.1f ms (5%%)"
          % (att / 1e6, waiter["blocked_ns"] / 1e6))
    check(top is not None and top["waker_user_stack"][0] == "waker_signal_fn",
          "the waker's user stack starts in waker_signal_fn (%s)" % (top["waker_user_stack"][:3] if top else None))
    check(top is not None and "waiter_block_fn" in top["user_stack"],
          "the wakee's own user stack names waiter_block_fn")
    irq_waiter = sum(s["offcpu_total_ns"] for s in mine if s["waker_kind"] == "interrupt")
    check(irq_waiter <= 0.02 * waiter["blocked_ns"],
          "wk_waiter: at most 2%% of its time woken by an interrupt (%.2f ms)" % (irq_waiter / 1e6))

    tmine = [s for s in stacks if s["tid"] == timer["tid"]]
    t_irq = [s for s in tmine if s["waker_kind"] == "interrupt"]
    t_att = sum(s["offcpu_total_ns"] for s in t_irq if any("hrtimer_wakeup" in f for f in s["waker_kernel_stack"]))
    # a wakeup the kernel delivered no event for (seen under a fork-heavy load, together
    # with the switch-in it ended, recovered later: recovered_periods) is counted
    # (waker_unseen) and its period shown as [unknown], never given to another waker
    t_unk = sum(s["offcpu_total_ns"] for s in tmine if s["waker_kind"] == "unknown")
    unseen = summary.get("data_quality", {}).get("waker_unseen", 0)
    check(close_to(t_att + t_unk, timer) and t_unk <= unseen * DELAY_MS * 1.5e6,
          "wk_timer: off-CPU time woken by a timer interrupt (hrtimer_wakeup) %.1f ms (+ %.1f ms [unknown], "
          "waker_unseen %d) vs measured %.1f ms (5%%)" % (t_att / 1e6, t_unk / 1e6, unseen, timer["blocked_ns"] / 1e6))
    check(all(s["waker_user_stack"] == [] and s["waker_comm"] == "" and s["waker_tid"] == 0 for s in t_irq),
          "interrupt wakers have no user stack, comm or tid")
    # its sleeps (timer_sleep_fn); a thread can also block briefly outside them (its start,
    # a page fault on a lock the signaler holds), and such a wait may be the signaler's
    t_b = sum(s["offcpu_total_ns"] for s in tmine if s["waker_comm"] == "wk_signaler"
              and "timer_sleep_fn" in s["user_stack"])
    check(t_b == 0, "wk_timer: none of its sleeps attributed to wk_signaler (%.2f ms)" % (t_b / 1e6))
    # the signaler sleeps between wakes: its own wakeups come from the timer too
    s_irq = sum(s["offcpu_total_ns"] for s in stacks if s["tid"] == signaler["tid"] and s["waker_kind"] == "interrupt")
    check(s_irq >= 0.9 * ITERS * DELAY_MS * 1e6, "wk_signaler's sleeps are woken by interrupts (%.1f ms)" % (s_irq / 1e6))

    kinds = summary.get("waker_kind_total_ns", {})
    check(summary and sum(kinds.values()) == summary["offcpu_total_ns"] and set(kinds) ==
          {"task", "interrupt", "preempted", "unknown"},
          "summary waker_kind_total_ns adds up to offcpu_total_ns (%s)" % kinds)
    dq = summary.get("data_quality", {})
    check(dq.get("map_full") == 0 and dq.get("lost_events") == 0,
          "no map-full drops or lost events (%s)" % {k: dq.get(k) for k in ("map_full", "lost_events", "lost_stacks")})
    check(dq.get("waker_unseen", 1) <= 2, "wakeups recorded for the blocked periods (waker_unseen %s)"
          % dq.get("waker_unseen"))
    check(all(s.get("waker_kind") == "preempted" for s in stacks if s["wait_class"] == "cpu"),
          "periods switched out runnable have waker_kind preempted")

    svg = open(SVG).read() if os.path.exists(SVG) else ""
    check("wk_signaler" in svg and "waker_signal_fn" in svg and "[interrupt]" in svg,
          "--svg: the flame graph draws the wakers (%d bytes)" % len(svg))
    if GO:
        env = dict(os.environ, HOME=TMP, PPROF_TMPDIR=TMP, GOPATH=os.path.join(TMP, "go"),
                   GOCACHE=os.path.join(TMP, "gocache"), GOFLAGS="-mod=mod", GOPROXY="off")
        r = subprocess.run([GO, "tool", "pprof", "-raw", PB], capture_output=True, text=True, timeout=120, env=env)
        body = r.stdout.split("Samples:", 1)[-1].split("Locations", 1)[0]
        total = sum(int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\s+\d+:", body, re.M))
        check(r.returncode == 0 and total == summary.get("offcpu_total_ns"),
              "--pprof: go tool pprof -raw reads it, off_cpu total %d ns = the JSON's %s"
              % (total, summary.get("offcpu_total_ns")))
        check("waker_comm:[wk_signaler]" in body and "waker_kind:[interrupt]" in body
              and re.search(r"waker_stack:\[[^\]]*waker_signal_fn", body) is not None,
              "--pprof: samples carry waker_kind, waker_comm and waker_stack labels")
    else:
        print("info go not installed: the --pprof file is not read back")

# --- 2. folded, kernel stacks only ------------------------------------------------------------
truth, out, err = run_mode(["-f", "-K", "--waker"])
if truth:
    lines = [l for l in out.splitlines() if l.strip()]
    parsed = []
    for l in lines:
        stack, _, value = l.rpartition(" ")
        frames = stack.split(";")
        if not value.isdigit() or any(not f for f in frames) or "--" not in frames:
            check(False, "folded --waker line has frames, a '--' frame and a value: %r" % l)
            continue
        parsed.append((frames, int(value)))
    check(parsed and len(parsed) == len(lines), "%d folded lines parse" % len(parsed))
    waiter = truth["wk_waiter"]
    to_b = [(f, v) for f, v in parsed if f[0] == "wk_waiter" and f[-1] == "wk_signaler"]
    us = sum(v for _, v in to_b)
    check(close_to(us * 1000, waiter),
          "-K folded: wk_waiter;...;--;...;wk_signaler lines %.1f ms vs measured %.1f ms (5%%)"
          % (us / 1e3, waiter["blocked_ns"] / 1e6))
    # the waiter's futex waits (a thread also blocks elsewhere now and then, e.g. on
    # mmap_lock at its start, which the signaler's thread may release: that waker is right)
    fw = [f for f, _ in to_b if any("futex_wait" in x for x in f[:f.index("--")])]
    ok = fw and all(any("futex_wake" in x for x in f[f.index("--") + 1:]) for f in fw) \
        and not any("waker_signal_fn" in f or "waiter_block_fn" in f for f, _ in to_b)
    check(ok, "-K: kernel frames only on both sides, the waker of each futex wait shows futex_wake (%s)"
          % (";".join(fw[0]) if fw else None))
    t_lines = [(f, v) for f, v in parsed if f[0] == "wk_timer"]
    t_irq = sum(v for f, v in t_lines if f[-1] == "[interrupt]")
    t_unk = sum(v for f, v in t_lines if f[-1] == "[unknown]")
    m = re.search(r"waker unseen (\d+)", err)
    unseen = int(m.group(1)) if m else -1
    check(close_to((t_irq + t_unk) * 1000, truth["wk_timer"]) and t_unk * 1000 <= unseen * DELAY_MS * 1.5e6,
          "-K folded: wk_timer's lines ending in [interrupt] %.1f ms (+ %.1f ms [unknown], waker unseen %d) "
          "vs measured %.1f ms (5%%)" % (t_irq / 1e3, t_unk / 1e3, unseen, truth["wk_timer"]["blocked_ns"] / 1e6))
    check("data quality" in err and "data quality" not in out, "the data-quality line goes to stderr")

# --- 3. user stacks only, frame pointers ----------------------------------------------------
truth, out, err = run_mode(["-f", "-U", "--unwind", "fp", "--waker"])
if truth:
    parsed = []
    for l in out.splitlines():
        stack, _, value = l.rpartition(" ")
        if value.isdigit():
            parsed.append((stack.split(";"), int(value)))
    to_b = [(f, v) for f, v in parsed if f[0] == "wk_waiter" and f[-1] == "wk_signaler"]
    in_fn = [f for f, _ in to_b if f[f.index("--") + 1] == "waker_signal_fn"]
    # the waiter's last wait is ended by the signaler's thread function itself (its final
    # FUTEX_WAKE), right after its last waker_signal_fn: one short wait, not a period
    other = sum(v for f, v in to_b if f[f.index("--") + 1] != "waker_signal_fn")
    check(in_fn and other * 1000 < DELAY_MS * 1e6 / 2,
          "-U: the waker part starts in waker_signal_fn (%s), but for the final wake (%d us)"
          % (";".join(in_fn[0]) if in_fn else None, other))
    check("could not be stored" not in err, "-U: no stack lost (%s)" % err.strip()[-160:])
    check(to_b and not any("futex_wake" in x or "try_to_wake_up" in x for f, _ in to_b for x in f),
          "-U: no kernel frames on either side")
    t_irq = [f for f, _ in parsed if f[0] == "wk_timer" and f[-1] == "[interrupt]"]
    check(t_irq and all(f[-2] == "--" for f in t_irq), "-U: the timer's waker part is [interrupt] alone")

# --- 4. text: BCC offwaketime's layout -----------------------------------------------------------
truth, out, err = run_mode(["--waker", "-d"])
if truth:
    check("    waker:           wk_signaler %d\n" % truth["wk_signaler"]["tid"] in out
          and "    --               --\n" in out and "    target:          wk_waiter %d\n" % truth["wk_waiter"]["tid"] in out
          and "    waker:           [interrupt]\n" in out and "off-CPU by waker:" in out,
          "text: waker:/--/target: lines (BCC offwaketime), [interrupt] wakers, the by-waker line")

# --- 5. usage errors, default output unchanged --------------------------------------------------
usage_error([OC, "--waker", "--state", "0"])
r = run([OC, "-j", "-p", str(os.getpid()), "--duration", "300ms"], timeout=60)
recs = ndjson(r.stdout)
check(r.returncode == 0 and recs and all(not any(k.startswith("waker_") for k in x) for x in recs
                                         if x["type"] == "offcputime.stack")
      and "waker_kind_total_ns" not in recs[-1],
      "without --waker: no waker fields (rc %d)" % r.returncode)

shutil.rmtree(TMP, ignore_errors=True)
finish()
