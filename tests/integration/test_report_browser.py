#!/usr/bin/env python3
"""runbook's report.html and a flame graph in headless Chromium (Debian's chromium,
chromium-driver, python3-selenium), opened from disk with no network: screenshots of
both; the report shows its findings and its flame graph inline and fetches nothing but
data:/file: URLs; in the SVG a click on a frame zooms it to full width, Reset zoom
undoes it, and a search shows the match count and share the folded stacks predict.
Under CI=true missing Chromium is a failure, not a skip."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, need, require_built, require_root, skip, workload  # noqa: E402
from runbook_util import RUNBOOK, findings, run_runbook  # noqa: E402

require_root()
require_built(RUNBOOK, workload("mutex_contention"))
CHROMIUM = need("chromium", "chromium")
DRIVER = need("chromedriver", "chromium-driver")
try:
    import selenium  # noqa: F401
except ImportError:  # Debian's python3-selenium, when python3 is not Debian's own
    sys.path.append("/usr/lib/python3/dist-packages")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from selenium.webdriver.support import expected_conditions as EC
except ImportError:
    skip("python3-selenium not installed (scripts/install-deps installs python3-selenium)")

TMP = tempfile.mkdtemp(prefix="bpfdiag-browser-test-")
out = os.path.join(TMP, "report")
go = os.path.join(TMP, "go")
w = subprocess.Popen([workload("mutex_contention"), "--go-file", go, "--threads", "4", "--hold-us", "500",
                      "--gap-us", "200", "--hold-mode", "sleep", "--duration-ms", "1500"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
w.stderr.readline()
rc, so, se, attached = run_runbook(["lock-contention", "-p", str(w.pid), "-d", "60", "-o", out],
                                   on_attached=lambda: open(go, "w").close())
w.communicate(timeout=60)
check(rc == 0 and os.path.exists(os.path.join(out, "report.html")), "runbook wrote report.html (rc %d)" % rc)

FN = re.compile(r"(^|::)update_cache(\(|$)")
names = set()
if os.path.exists(os.path.join(out, "offcputime.folded")):
    for line in open(os.path.join(out, "offcputime.folded")):
        names |= {f for f in line.rsplit(" ", 1)[0].split(";") if FN.search(f)}
check(len(names) == 1, "the folded off-CPU stacks name update_cache (%s)" % sorted(names))
NAME = sorted(names)[0] if names else "update_cache"

opts = webdriver.ChromeOptions()
opts.binary_location = CHROMIUM
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1300,1000",
          "--no-proxy-server", "--host-resolver-rules=MAP * ~NOTFOUND", "--disable-background-networking",
          "--disable-component-update", "--disable-default-apps", "--disable-sync", "--no-first-run",
          "--user-data-dir=" + os.path.join(TMP, "profile")):
    opts.add_argument(a)
drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
try:
    # --- report.html ------------------------------------------------------------------
    drv.get("file://" + os.path.join(out, "report.html"))
    shot = os.path.join(TMP, "report.png")
    drv.save_screenshot(shot)
    check(os.path.getsize(shot) > 20000, "report.html screenshot (%d bytes)" % os.path.getsize(shot))
    items = drv.find_elements(By.CSS_SELECTOR, "li.finding")
    md = findings(out)
    check(len(items) == len(md) > 0 and "cache_lock" in items[0].text,
          "report.html shows the %d findings of report.md, the first names cache_lock (%r)"
          % (len(md), items[0].text[:100] if items else None))
    heads = [h.text for h in drv.find_elements(By.TAG_NAME, "h2")]
    check(heads[:3] == ["Findings", "Method and scope", "CPU and run queue"] and heads[-1] == "How to rerun",
          "report.html sections %s" % heads)
    # one flame graph per stack tool of the runbook (offcputime, lockstat, pmheld), inline
    allf = drv.find_elements(By.CSS_SELECTOR, "iframe.flamegraph")
    titles = [f.get_attribute("title") for f in allf]
    frames = [f for f in allf if f.get_attribute("title") == "offcputime flame graph"]
    check(len(frames) == 1 and all(f.get_attribute("src").startswith("data:image/svg+xml;base64,") for f in allf)
          and set(titles) == {"offcputime flame graph", "lockstat flame graph", "pmheld flame graph"},
          "report.html inlines the off-CPU, lock and hold flame graphs (%s)" % titles)
    res = drv.execute_script("return performance.getEntriesByType('resource').map(function(e){return e.name;})")
    check(all(r.startswith(("data:", "file:")) for r in res), "report.html loads nothing from the network (%s)" % res[:3])
    html = open(os.path.join(out, "report.html")).read()
    check(not re.search(r"(src|href)=[\"']?(https?:)?//", html), "report.html has no remote src/href")
    if frames:  # the inlined flame graph is live: zoom inside the iframe
        drv.switch_to.frame(frames[0])
        ok = drv.execute_script("return window.flame && window.flame.zoom(arguments[0])", NAME)
        z = drv.execute_script("return document.documentElement.getAttribute('data-zoomed')")
        check(ok and z == NAME, "the inlined flame graph zooms (data-zoomed %r)" % z)
        drv.switch_to.default_content()

    # --- the flame graph SVG on its own -------------------------------------------------
    svgp = os.path.join(out, "offcputime.svg")
    drv.get("file://" + svgp)
    shot = os.path.join(TMP, "flame.png")
    drv.save_screenshot(shot)
    check(os.path.getsize(shot) > 10000, "flame graph screenshot (%d bytes)" % os.path.getsize(shot))
    W = int(drv.execute_script("return +document.documentElement.getAttribute('data-w')"))
    # labels fit their frames as the browser draws them (issue 21: <= 5% overflowing)
    over, shown = drv.execute_script(
        "var o=0,n=0;document.querySelectorAll('g.f').forEach(function(g){var t=g.querySelector('text');"
        "if(!t.textContent)return;n++;if(t.getComputedTextLength()>+g.querySelector('rect').getAttribute('width'))o++;});"
        "return [o,n];")
    check(shown > 0 and over <= 0.05 * shown, "flame graph labels overflowing their frame: %d of %d" % (over, shown))
    target = None
    for g in drv.find_elements(By.CSS_SELECTOR, "g.f"):
        # the label may be cut to fit the frame; the title holds the whole name
        if g.find_element(By.TAG_NAME, "title").get_attribute("textContent").startswith(NAME + " ("):
            target = g
            break
    check(target is not None, "the flame graph has an update_cache frame")
    if target is not None:
        rect = target.find_element(By.TAG_NAME, "rect")
        w0 = float(rect.get_attribute("width"))
        rect.click()
        zoomed = drv.execute_script("return document.documentElement.getAttribute('data-zoomed')")
        w1 = float(rect.get_attribute("width"))
        check(zoomed == NAME and abs(w1 - (W - 20)) < 0.5 and w1 > w0,
              "click on update_cache zooms it to full width (%.1f -> %.1f px, data-zoomed %r)" % (w0, w1, zoomed))
        drv.find_element(By.ID, "unzoom").click()
        w2 = float(rect.get_attribute("width"))
        check(abs(w2 - w0) < 0.01 and drv.execute_script(
            "return document.documentElement.getAttribute('data-zoomed')") is None, "Reset zoom restores it")
    # search through the page's own button and prompt
    drv.find_element(By.ID, "search").click()
    WebDriverWait(drv, 5).until(EC.alert_is_present())
    alert = drv.switch_to.alert
    alert.send_keys("update_cache")
    alert.accept()
    shown = drv.find_element(By.ID, "matched").get_attribute("textContent")
    m = re.match(r"Matched: ([\d.]+)% \((\d+) frames\)", shown)
    # what the folded stacks predict: share of the total through update_cache, and how
    # many distinct frames (call paths) end in it
    total, through, paths = 0, 0, set()
    for line in open(os.path.join(out, "offcputime.folded")):
        stack, v = line.rstrip("\n").rsplit(" ", 1)
        fr = [f for f in stack.split(";") if f != "-"]
        total += int(v)
        hit = [i for i, f in enumerate(fr) if FN.search(f)]
        if hit:
            through += int(v)
            for i in hit:
                paths.add(tuple(fr[:i + 1]))
    pct = 100.0 * through / total if total else 0
    check(m is not None and int(m.group(2)) == len(paths) and abs(float(m.group(1)) - pct) <= 0.15,
          "search 'update_cache' shows %r; the folded stacks give %.1f%% in %d frames" % (shown, pct, len(paths)))
    drv.save_screenshot(os.path.join(TMP, "flame-search.png"))
finally:
    drv.quit()
import harness  # noqa: E402
if harness._failures:
    print("kept for inspection: " + TMP)
else:
    shutil.rmtree(TMP, ignore_errors=True)
finish()
