#!/usr/bin/env python3
"""Doc lint: every built tool has a man page with BCC's sections, its SYNOPSIS equals
the USAGE line of --help, and --help has EXAMPLES. The OPTIONS section lists exactly
the options of the tool's table, with the same flags and argument: for the suite's
tools as the tool registry gives them (`doctor --list -j`), for the utilities
(flamegraph, runbook) as their generated --help lists them. Needs no root."""
import glob
import os
import re

from harness import *

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[A-Za-z])(?![\w-])")


def man_option_tags(text):
    """The tag line of every .TP entry in the OPTIONS section, plain ("-p PID, --pid PID")."""
    m = re.search(r"^\.SH OPTIONS\n(.*?)(?=^\.SH )", text, re.M | re.S)
    lines = m.group(1).split("\n") if m else []
    return [re.sub(r"\\f[BIRP]", "", lines[i + 1]).replace("\\-", "-")
            for i, l in enumerate(lines) if l.startswith(".TP") and i + 1 < len(lines)]


def help_options(help_text):
    """The options of a generated --help (its OPTIONS block) as the registry gives them."""
    body = help_text.split("OPTIONS:\n", 1)[-1].split("\nEXAMPLES:")[0]
    out = []
    for line in body.splitlines():
        m = re.match(r"^ {2,6}(?:-(\w))?(?:, |  )?(?:--([a-z][a-z0-9-]*))?(?: (\S+))?", line)
        if m and line.lstrip().startswith("-") and (m.group(1) or m.group(2)):
            out.append({"short": m.group(1) or "", "long": m.group(2) or "", "arg": m.group(3) or ""})
    return out


def check_options_section(t, text, options):
    """Every option appears in one OPTIONS entry with all its flags and its argument,
    and the section names no flag the table does not have."""
    tags = man_option_tags(text)
    check(tags, "%s: man OPTIONS section has entries" % t)
    wanted = set()
    for o in options:
        flags = [f for f in ("-" + o["short"] if o["short"] else "", "--" + o["long"] if o["long"] else "") if f]
        wanted |= set(flags)
        entries = [tag for tag in tags if all(f in FLAG.findall(tag) for f in flags)]
        ok = bool(entries) and (not o["arg"] or any(
            re.search(re.escape(f) + r"[ =]" + re.escape(o["arg"]) + r"(?![\w\[.])", tag)
            for tag in entries for f in flags))
        check(ok, "%s: man OPTIONS lists %s%s (got %r)" % (
            t, ", ".join(flags), " " + o["arg"] if o["arg"] else "", entries[:1]))
    extra = sorted(set(f for tag in tags for f in FLAG.findall(tag)) - wanted)
    check(not extra, "%s: man OPTIONS names only options the tool has (extra: %s)" % (t, extra))


registry = {}
if os.path.exists(tool("doctor")):
    r = run([tool("doctor"), "--list", "-j"])
    check(r.returncode == 0, "doctor --list -j exits 0 (%s)" % r.stderr.strip()[:200])
    recs = ndjson(r.stdout, "doctor")
    registry = {rec["tool"]: rec for rec in recs if rec.get("type") == "doctor.tool"}
    check(len(registry) >= 8 and all(rec["final"] for rec in recs),
          "doctor --list -j: %d doctor.tool records (%s)" % (len(registry), " ".join(registry)))

SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "REQUIREMENTS", "OPTIONS", "EXAMPLES",
            "FIELDS", "OVERHEAD", "SOURCE", "OS", "STABILITY", "SEE ALSO"]

tools = sorted(os.path.basename(d.rstrip("/")) for d in glob.glob(os.path.join(SRC, "tools", "*/")))
check(len(tools) > 0, "found tools: %s" % ", ".join(tools))
for t in tools:
    man = os.path.join(SRC, "man", "man8", t + ".8")
    check(os.path.exists(man), "%s: man page exists" % t)
    if not os.path.exists(man):
        continue
    text = open(man).read()
    found = re.findall(r'^\.SH "?([A-Z ]+?)"?\s*$', text, re.M)
    # ENVIRONMENT (after OPTIONS, as man-pages(7) orders it): required where user
    # stacks are named, which DEBUGINFOD_URLS changes (issue 24)
    symbolizes = t in ("profile", "offcputime", "lockstat", "pmheld", "threadpool")
    want = SECTIONS[:5] + ["ENVIRONMENT"] + SECTIONS[5:] if symbolizes else SECTIONS
    check(found == want, "%s: man sections in order (got %s)" % (t, found))
    if symbolizes:
        check("DEBUGINFOD_URLS" in text and "DEBUGINFOD_CACHE_PATH" in text,
              "%s: ENVIRONMENT names DEBUGINFOD_URLS and DEBUGINFOD_CACHE_PATH" % t)
    m = re.search(r"^\.SH SYNOPSIS\n\.B (.*)$", text, re.M)
    synopsis = m.group(1).replace("\\-", "-").strip() if m else None
    exe = tool(t)
    if not os.path.exists(exe):
        check(False, "%s: binary built" % t)
        continue
    r = run([exe, "--help"])
    check(r.returncode == 0, "%s --help exits 0" % t)
    usage = re.search(r"^USAGE: (.*)$", r.stdout, re.M)
    check(usage is not None and synopsis == usage.group(1).strip(),
          "%s: man SYNOPSIS matches --help USAGE (%r vs %r)" % (t, synopsis, usage.group(1) if usage else None))
    if t in registry:
        check(registry[t]["usage"] == synopsis, "%s: man SYNOPSIS matches the registry's usage" % t)
        check_options_section(t, text, registry[t]["options"])
    else:
        check(t in ("flamegraph", "runbook", "bpfdiag"), "%s: in the tool registry (doctor --list -j)" % t)
        check_options_section(t, text, help_options(r.stdout))
    check("EXAMPLES:" in r.stdout and re.search(r"^  %s.*# " % t, r.stdout, re.M) is not None,
          "%s --help has EXAMPLES with comments" % t)
    # under 80 columns (the USAGE line is one line by design: it must equal the man SYNOPSIS)
    wide = [l for l in r.stdout.splitlines() if len(l) > 80 and not l.startswith("USAGE: ")]
    check(not wide, "%s --help fits 80 columns (too wide: %r)" % (t, wide[:2]))
    # every long option in --help is documented in the man page
    for opt in sorted(set(re.findall(r"(--[a-z][a-z-]+)", r.stdout))):
        check(opt.replace("-", "\\-") in text or opt in text, "%s: man page documents %s" % (t, opt))
finish()
