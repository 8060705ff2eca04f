#!/usr/bin/env python3
"""fleet_index.py RUN_DIR: one index page across the hosts of a fleet run.

RUN_DIR is where contrib/ansible/runbook.yml fetched each host's runbook report
directory, as HOST.tar.gz; the play hands this script the run's hosts and, for a host
where a step failed, the step and why (--hosts, saved as hosts.json). It unpacks each
HOST.tar.gz into RUN_DIR/HOST/ and writes RUN_DIR/index.html (each host, its status,
its top findings, its data quality, links to its report.html and run.json) and
RUN_DIR/fleet.json (the same, for programs). One line per host on stdout.

Everything that comes from a host is untrusted: the archive is unpacked by hand
(regular files with plain names only, no links, no paths, size caps, O_EXCL|O_NOFOLLOW),
run.json and report.md are read with size caps, and every string from them is
escaped in the page, which also forbids scripts (Content-Security-Policy). A host's
own report.html is the host's content: the index only links to it.

Exit status: 0 when the index is written (whatever the hosts' status), 1 when it
cannot be, 2 for bad usage. Python 3 standard library only.
"""
import argparse
import html
import json
import os
import re
import stat
import sys
import tarfile
import tempfile
import urllib.parse

HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,200}$")
FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
MAX_MEMBERS = 2000            # entries in one host's archive
MAX_FILE = 256 << 20          # one file of a report
MAX_TOTAL = 1 << 30           # one host's report, unpacked
MAX_JSON = 16 << 20           # run.json, report.md, hosts.json
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # a host's escape sequences stay off the terminal
MAX_TEXT = 400                # characters of one string from a host shown in the page
# the losses runbook marks findings with (tools/runbook/rank.cpp losses_text); used
# when run.json predates its per-tool "losses"
LOSS_KEYS = ("lost_events", "lost_samples", "lost_stacks", "unmatched_begin", "unmatched_end", "map_full",
             "dropped_periods", "threads_untracked")
# report.md's finding lines, for a run.json without "findings" (bpfdiag before 0.3.1)
MD_FINDING = re.compile(r"^- \[( |x)\] (.*) — \*\*(.*)\*\* \(([\w-]+)\)$")


def text(v, limit=MAX_TEXT):
    """A host-supplied value as a bounded one-line string."""
    s = v if isinstance(v, str) else json.dumps(v) if v is not None else ""
    s = " ".join(CONTROL.sub("?", s).split())
    return s if len(s) <= limit else s[:limit - 1] + "…"


def read_capped(dir_fd, name, cap=MAX_JSON):
    """A regular file's bytes (no symlink followed, at most cap bytes), or raises OSError/ValueError."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("%s is not a regular file" % name)
        if st.st_size > cap:
            raise ValueError("%s is %d bytes, over %d" % (name, st.st_size, cap))
        chunks, size = [], 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            size += len(b)
            if size > cap:
                raise ValueError("%s is over %d bytes" % (name, cap))
            chunks.append(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json(dir_fd, name):
    try:
        return json.loads(read_capped(dir_fd, name).decode("utf-8", errors="replace"))
    except RecursionError:
        raise ValueError("%s nests too deep" % name) from None


def unpack(run_fd, host):
    """HOST.tar.gz -> HOST/ (made here; left as it is when it exists: a second run of
    this script). Returns (files, skipped entries, error or None)."""
    try:
        os.mkdir(host, 0o755, dir_fd=run_fd)
    except FileExistsError:
        return None, [], None
    dest = os.open(host, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=run_fd)
    files, skipped, total = [], [], 0
    try:
        fd = os.open(host + ".tar.gz", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=run_fd)
        with os.fdopen(fd, "rb") as raw, tarfile.open(fileobj=raw, mode="r:gz") as tar:
            for n, m in enumerate(tar):
                if n >= MAX_MEMBERS:
                    skipped.append("more than %d entries" % MAX_MEMBERS)
                    break
                name = m.name[2:] if m.name.startswith("./") else m.name
                if name in ("", ".") and m.isdir():
                    continue
                if not m.isreg() or not FILE_RE.match(name):
                    skipped.append(text(m.name, 80))
                    continue
                if m.size > MAX_FILE or total + m.size > MAX_TOTAL:
                    skipped.append("%s (%d bytes)" % (name, m.size))
                    continue
                src = tar.extractfile(m)
                try:
                    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                                  dir_fd=dest)
                except FileExistsError:
                    skipped.append(name + " (twice)")
                    continue
                with os.fdopen(out, "wb") as o:
                    left = m.size
                    while left > 0:
                        b = src.read(min(left, 1 << 20))
                        if not b:
                            break
                        o.write(b)
                        left -= len(b)
                total += m.size
                files.append(name)
    except (OSError, tarfile.TarError, EOFError, ValueError) as e:
        return files, skipped, "its report archive cannot be read: %s" % text(str(e), 200)
    finally:
        os.close(dest)
    return files, skipped, None


def findings_of(run, host_fd):
    """[{tool, text, number, problem, failure, context}] from run.json, else report.md."""
    got = []
    if isinstance(run.get("findings"), list):
        for f in run["findings"]:
            if isinstance(f, dict):
                got.append({"tool": text(f.get("tool"), 40), "text": text(f.get("text")),
                            "number": text(f.get("number"), 200), "problem": f.get("problem") is True,
                            "failure": f.get("failure") is True, "context": f.get("context") is True})
        return got, "run.json"
    try:
        md = read_capped(host_fd, "report.md").decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return got, "none"
    inside, ctx = False, False
    for line in md.splitlines():
        if line == "## Findings":
            inside = True
            continue
        if inside and line.startswith("## "):
            break
        if inside and line.startswith("### Context"):
            ctx = True
        m = MD_FINDING.match(line) if inside else None
        if m:
            got.append({"tool": text(m.group(4), 40), "text": text(m.group(2)), "number": text(m.group(3), 200),
                        "problem": m.group(1) == " " and not ctx, "failure": " failed" in m.group(2),
                        "context": ctx})
    return got, "report.md"


def data_quality(run):
    """One line per thing that weakens the host's report; [] when nothing does."""
    lines = []
    tools = run.get("tools") if isinstance(run.get("tools"), list) else []
    for t in tools:
        if not isinstance(t, dict):
            continue
        name = text(t.get("name"), 40)
        status = text(t.get("status"), 80)
        if status != "exit 0":
            err = text(t.get("error"), 200) if t.get("error") else ""
            lines.append("%s: %s%s" % (name, status or "no status", (" — " + err) if err else ""))
        losses = t.get("losses")
        if not isinstance(losses, str):
            dq = t.get("data_quality") if isinstance(t.get("data_quality"), dict) else {}
            losses = ", ".join("%s %d" % (k, dq[k]) for k in LOSS_KEYS
                               if isinstance(dq.get(k), int) and not isinstance(dq.get(k), bool) and dq[k] > 0)
        if losses:
            lines.append("%s lost data: %s" % (name, text(losses, 200)))
    if not tools:
        lines.append("run.json lists no tools")
    if run.get("interrupted") is True:
        lines.append("the window was cut short (interrupted)")
    if run.get("attach_timeout") is True:
        lines.append("not every tool attached in time")
    return lines


def host_entry(run_fd, host, failure):
    e = {"host": host, "status": "no result", "reason": "", "step": "", "report": None, "run_json": None,
         "findings": [], "problems": 0, "fine": 0, "context": 0, "data_quality": [], "skipped_files": []}
    if not HOST_RE.match(host):
        e.update(status="failed", reason="the host name cannot name a file: not fetched")
        return e
    names = set(os.listdir(run_fd))
    if isinstance(failure, dict):
        reason = text(failure.get("error"), 600)
        if failure.get("stderr") and text(failure.get("stderr")) not in reason:
            reason += (": " if reason else "") + text(failure.get("stderr"))
        e.update(status="failed", step=text(failure.get("step"), 120), reason=reason or "failed (no message)")
        return e
    if host + ".tar.gz" in names:
        files, skipped, err = unpack(run_fd, host)
        e["skipped_files"] = skipped
        if err:
            e.update(status="bad report", reason=err)
            return e
    elif host not in names:
        e["reason"] = "the host never reported (unreachable, or the play stopped before it got here)"
        return e
    try:
        host_fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=run_fd)
    except OSError as ex:
        e.update(status="bad report", reason="its report directory cannot be opened: %s" % ex.strerror)
        return e
    try:
        try:
            run = read_json(host_fd, "run.json")
            if not isinstance(run, dict) or run.get("suite") != "bpfdiag":
                raise ValueError("not a bpfdiag run.json")
        except (OSError, ValueError) as ex:
            e.update(status="bad report", reason="its run.json cannot be read: %s" % text(str(ex), 200))
            return e
        present = set(os.listdir(host_fd))
        quote = urllib.parse.quote(host, safe="")
        e["run_json"] = quote + "/run.json"
        if "report.html" in present:
            e["report"] = quote + "/report.html"
        fs, source = findings_of(run, host_fd)
    finally:
        os.close(host_fd)
    opts = run.get("options") if isinstance(run.get("options"), dict) else {}
    pids = opts.get("pid") if isinstance(opts.get("pid"), list) else []
    kernel = run.get("kernel") if isinstance(run.get("kernel"), dict) else {}
    window = None
    if all(isinstance(run.get(k), int) for k in ("window_start_ns", "window_end_ns")):
        window = (run["window_end_ns"] - run["window_start_ns"]) / 1e9
    problems = [f for f in fs if f["problem"] and not f["context"]]
    e.update(status="ok", runbook=text(run.get("runbook"), 80), version=text(run.get("version"), 40),
             nodename=text(run.get("host"), 80), kernel=text(kernel.get("release"), 80),
             target=("PID " + ",".join(text(p, 12) for p in pids[:20]) + (" and more" if len(pids) > 20 else "")
                     if pids else "the whole machine") + (" with children" if opts.get("children") is True else ""),
             window_s=window, start=text(run.get("start_time"), 40), findings=problems, findings_from=source,
             problems=len(problems), fine=sum(1 for f in fs if not f["problem"] and not f["context"]),
             context=sum(1 for f in fs if f["context"]), data_quality=data_quality(run))
    if e["skipped_files"]:
        e["data_quality"].append("entries of the archive not unpacked: " + ", ".join(e["skipped_files"][:5]))
    return e


CSS = ("body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}"
       "h1{font-size:1.5em}table{border-collapse:collapse;width:100%}"
       "td,th{border:1px solid #ccc;padding:.35em .5em;text-align:left;vertical-align:top}"
       "tr.ok td.status{background:#eaf6ec}tr.failed td.status,tr.bad td.status,tr.none td.status{background:#fdecea}"
       "ul{margin:0;padding-left:1.1em}.num{font-weight:bold}.tool,.small{color:#555;font-size:.9em}"
       ".tool{font-family:monospace}li.warn{color:#8a4b00}")


def render(entries, meta):
    h = html.escape
    ok = sum(1 for e in entries if e["status"] == "ok")
    bad = [e for e in entries if e["status"] != "ok"]
    runbooks = sorted({e.get("runbook") for e in entries if e.get("runbook")})
    o = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
         '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">',
         "<title>bpfdiag fleet: %d hosts</title><style>%s</style></head><body>\n" % (len(entries), CSS),
         "<h1>bpfdiag fleet: %s</h1>\n" % h(", ".join(runbooks) or "no report"),
         '<p id="summary">%d hosts: %d ok, %d failed%s. Started %s.</p>\n' % (
             len(entries), ok, len(bad),
             (" (" + ", ".join(h(e["host"]) for e in bad) + ")") if bad else "", h(text(meta.get("started"), 40))),
         "<table>\n<tr><th>host</th><th>status</th><th>top findings</th><th>data quality</th><th>report</th></tr>\n"]
    for e in entries:
        cls = {"ok": "ok", "failed": "failed", "bad report": "bad"}.get(e["status"], "none")
        o.append('<tr class="host %s" id="host-%s" data-host="%s" data-status="%s">' % (
            cls, h(e["host"]), h(e["host"]), h(e["status"])))
        info = ""
        if e["status"] == "ok":
            info = '<br><span class="small">%s, kernel %s, bpfdiag %s</span>' % (
                h(e.get("nodename", "")), h(e.get("kernel", "")), h(e.get("version", "")))
        o.append("<td>%s%s</td>" % (h(e["host"]), info))
        if e["status"] == "ok":
            win = "%.1f s" % e["window_s"] if e.get("window_s") is not None else "?"
            o.append('<td class="status">ok<br><span class="small">%s on %s, %s window</span></td>' % (
                h(e.get("runbook", "")), h(e.get("target", "")), h(win)))
        else:
            step = (" at step &ldquo;%s&rdquo;" % h(e["step"])) if e["step"] else ""
            o.append('<td class="status">%s%s: %s</td>' % (h(e["status"]), step, h(e["reason"])))
        if e["status"] == "ok":
            if e["findings"]:
                items = ['<li class="finding" data-tool="%s">%s — <span class="num">%s</span> <span class="tool">(%s)</span></li>'
                         % (h(f["tool"]), h(f["text"]), h(f["number"]), h(f["tool"])) for f in e["findings"][:meta["top"]]]
                more = e["problems"] - min(e["problems"], meta["top"])
                if more:
                    items.append('<li class="small">and %d more problem%s in its report</li>' % (more, "s" * (more > 1)))
                o.append("<td><ul>%s</ul></td>" % "".join(items))
            else:
                o.append("<td>no problem found (%d measured and fine)</td>" % e["fine"])
            dq = e["data_quality"]
            o.append("<td>%s</td>" % (
                '<ul>%s</ul>' % "".join('<li class="warn">%s</li>' % h(l) for l in dq) if dq
                else "complete: every tool ran to the end, nothing lost"))
            links = []
            if e["report"]:
                links.append('<a class="report" href="%s">report.html</a>' % h(e["report"]))
            links.append('<a class="runjson" href="%s">run.json</a>' % h(e["run_json"]))
            o.append("<td>%s</td>" % "<br>".join(links))
        else:
            o.append("<td></td><td></td><td></td>")
        o.append("</tr>\n")
    o.append("</table>\n<p class=\"small\">Each host's report.html is that host's own page, as its bpfdiag wrote it."
             " fleet.json has this table for programs.</p>\n</body></html>\n")
    return "".join(o)


def write_atomic(run_fd, name, data):
    fd, tmp = tempfile.mkstemp(prefix="." + name + ".", dir="/proc/self/fd/%d" % run_fd)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join("/proc/self/fd/%d" % run_fd, name))


def main(argv):
    ap = argparse.ArgumentParser(prog="fleet_index.py",
                                 description="Unpack a fleet run's host reports and write index.html and fleet.json.",
                                 epilog="example: fleet_index.py bpfdiag-fleet/fleet-20261128T010000Z-abcd1234")
    ap.add_argument("run_dir", metavar="RUN_DIR", help="the run's directory on the controller (runbook.yml makes it)")
    ap.add_argument("--hosts", metavar="JSON",
                    help='the run\'s hosts, {"hosts": [HOST...], "failures": {HOST: {"run": RUN_DIR, "step": ..., '
                         '"error": ...}}, "started": TIME}, or - to read it from stdin (runbook.yml does); saved as '
                         'RUN_DIR/hosts.json. Default: RUN_DIR/hosts.json, else the hosts that left a report')
    ap.add_argument("--top", type=int, default=3, metavar="N", help="findings shown per host (default 3)")
    a = ap.parse_args(argv)
    if not 1 <= a.top <= 50:
        ap.error("--top must be 1-50")
    try:
        os.makedirs(a.run_dir, mode=0o700, exist_ok=True)  # no host fetched a report: nothing made it
        run_fd = os.open(a.run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        print("fleet_index.py: cannot open %s: %s" % (a.run_dir, e.strerror), file=sys.stderr)
        return 1
    meta = {"top": a.top}
    if a.hosts is not None:
        try:
            listed = json.loads(sys.stdin.read(MAX_JSON + 1) if a.hosts == "-" else a.hosts)
            if not isinstance(listed, dict) or not isinstance(listed.get("hosts"), list):
                raise ValueError("not an object with a list of hosts")
        except ValueError as e:
            ap.error("--hosts: %s" % e)
        try:
            write_atomic(run_fd, "hosts.json", json.dumps(listed, indent=2) + "\n")
        except OSError as e:
            print("fleet_index.py: cannot write hosts.json in %s: %s" % (a.run_dir, e.strerror), file=sys.stderr)
            return 1
    try:
        listed = read_json(run_fd, "hosts.json")
        if not isinstance(listed, dict):
            raise ValueError("hosts.json is not an object")
        hosts = [h for h in listed.get("hosts", []) if isinstance(h, str)]
        failures = listed.get("failures") if isinstance(listed.get("failures"), dict) else {}
        meta["started"] = listed.get("started")
    except (OSError, ValueError):
        # no list of hosts: the hosts that left a report here
        hosts = sorted(n[:-len(".tar.gz")] for n in os.listdir(run_fd) if n.endswith(".tar.gz"))
        failures = {}
    # a failure recorded for another run (a fact cache keeps facts across runs) is not this run's
    here = os.path.realpath(a.run_dir)
    failures = {h: f for h, f in failures.items()
                if isinstance(f, dict) and isinstance(f.get("run"), str) and os.path.realpath(f["run"]) == here}
    entries = [host_entry(run_fd, h, failures.get(h)) for h in dict.fromkeys(hosts)]
    fleet = {"suite": "bpfdiag", "type": "fleet", "started": meta.get("started"), "hosts": entries}
    try:
        write_atomic(run_fd, "fleet.json", json.dumps(fleet, indent=2) + "\n")
        write_atomic(run_fd, "index.html", render(entries, meta))
    except OSError as e:
        print("fleet_index.py: cannot write the index in %s: %s" % (a.run_dir, e.strerror), file=sys.stderr)
        return 1
    for e in entries:
        if e["status"] == "ok":
            top = e["findings"][0] if e["findings"] else None
            print("%s: ok, %d problem(s)%s%s" % (
                e["host"], e["problems"], (": " + top["text"] + " — " + top["number"] + " (" + top["tool"] + ")")
                if top else "", "; data quality: " + "; ".join(e["data_quality"]) if e["data_quality"] else ""))
        else:
            print("%s: %s%s: %s" % (e["host"], e["status"], (" at '%s'" % e["step"]) if e["step"] else "", e["reason"]))
    print("index: %s" % os.path.join(os.path.abspath(a.run_dir), "index.html"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
