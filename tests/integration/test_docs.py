#!/usr/bin/env python3
"""Doc lint: every built tool has a man page with BCC's sections, its SYNOPSIS equals
the USAGE line of --help, and --help has EXAMPLES. Needs no root."""
import glob
import os
import re

from harness import *

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
    check(found == SECTIONS, "%s: man sections in order (got %s)" % (t, found))
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
    check("EXAMPLES:" in r.stdout and re.search(r"^  %s.*# " % t, r.stdout, re.M) is not None,
          "%s --help has EXAMPLES with comments" % t)
    # under 80 columns (the USAGE line is one line by design: it must equal the man SYNOPSIS)
    wide = [l for l in r.stdout.splitlines() if len(l) > 80 and not l.startswith("USAGE: ")]
    check(not wide, "%s --help fits 80 columns (too wide: %r)" % (t, wide[:2]))
    # every long option in --help is documented in the man page
    for opt in sorted(set(re.findall(r"(--[a-z][a-z-]+)", r.stdout))):
        check(opt.replace("-", "\\-") in text or opt in text, "%s: man page documents %s" % (t, opt))
finish()
