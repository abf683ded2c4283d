"""Check that the built documentation renders in headless Chromium.

Opens the site's index, the user guide's "Choosing an algorithm" page and one
API page (``dqkm.KMeans``) in headless Chromium (Debian's ``chromium``) and
checks, for each: the document title, the navigation (links to the site's
sections), no missing-reference markers (an unresolved cross-reference, a
docutils error message) and no message on the browser console (a JavaScript
error, a file that failed to load).  Exits with status 1 and one line per
problem when a page fails; usage::

    python docs/check_rendered.py docs/_build/html [--chromium /usr/bin/chromium]
"""

import argparse
import json
import os
import posixpath
import re
import select
import shutil
import subprocess
import sys
import time

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--no-first-run"]

#: page -> text its <title> must contain
PAGES = {
    "index.html": "dqkm",
    "user_guide/choosing.html": "Choosing an algorithm",
    "api/generated/dqkm.KMeans.html": "dqkm.KMeans",
}

#: links every page's navigation must hold (top-level sections of the site)
NAV_LINKS = ("getting_started.html", "user_guide/index.html", "api/index.html")

_NAV = re.compile(r"<nav\b.*?</nav>", re.S)
_HREF = re.compile(r'href="([^"]*)"')
_TITLE = re.compile(r"<title>(.*?)</title>", re.S)
_XREF = re.compile(r"(<a\b[^>]*>\s*)?<(?:code|span)\b[^>]*class=\"[^\"]*\bxref\b")


def find_chromium(explicit=None):
    """Path of the Chromium executable, or None when it is not installed."""
    for cand in ([explicit] if explicit else []) + ["chromium", "chromium-browser",
                                                     "google-chrome"]:
        path = shutil.which(cand) if cand and not os.path.isabs(cand) else cand
        if path and os.path.exists(path):
            return path
    return None


class _DevTools:
    """The DevTools protocol over ``--remote-debugging-pipe`` (file descriptors 3 and 4)."""

    def __init__(self, chromium, timeout):
        self._to_r, to_w = os.pipe()      # we write commands into to_w; Chromium reads fd 3
        from_r, self._from_w = os.pipe()  # Chromium writes fd 4; we read from_r
        self._w, self._r = os.fdopen(to_w, "wb", buffering=0), os.fdopen(from_r, "rb", 0)
        self.timeout = timeout
        self._buf, self._id, self.events = b"", 0, []
        self.proc = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=self._dup_fds)
        os.close(self._to_r)
        os.close(self._from_w)

    def _dup_fds(self):  # in the child: our pipe ends become its fds 3 (in) and 4 (out)
        r, w = os.dup(self._to_r), os.dup(self._from_w)
        os.dup2(r, 3)
        os.dup2(w, 4)

    def _message(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = self._r.read(65536)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method, session=None, **params):
        """Send one command; return its result (events that arrive meanwhile are kept)."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self._w.write(json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method, deadline):
        """Wait for an event named ``method`` (events seen already count)."""
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._message(deadline))

    def close(self):
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._w.close()
        self._r.close()


def _console_problems(events):
    """Console errors and warnings, uncaught exceptions and failed loads among ``events``."""
    out = []
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning",
                                                                           "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in
                            params.get("args", []))
            out.append(f"console.{params['type']}: {args}")
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            out.append("uncaught: " + d.get("exception", {}).get("description", d.get("text", "")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            out.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
    return out


def render(chromium, path, timeout=120):
    """``(dom, console_problems)`` of ``path`` opened in headless Chromium."""
    url = "file://" + os.path.abspath(path)
    tools = _DevTools(chromium, timeout)
    try:
        target = tools.send("Target.createTarget", url="about:blank")["targetId"]
        session = tools.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            tools.send(f"{domain}.enable", session)
        tools.events.clear()
        tools.send("Page.navigate", session, url=url)
        tools.wait_for("Page.loadEventFired", time.monotonic() + timeout)
        time.sleep(0.5)  # let the theme's scripts run after the load event
        dom = tools.send("Runtime.evaluate", session,
                         expression="document.documentElement.outerHTML")["result"]["value"]
        tools.send("Runtime.evaluate", session, expression="0")  # collect late events
        return dom, _console_problems(tools.events)
    finally:
        tools.close()


def problems(page, dom, console, expected_title):
    """What is wrong with one rendered page (an empty list when it rendered)."""
    out = []
    title = _TITLE.search(dom)
    if not title or expected_title not in title.group(1):
        found = title.group(1).strip() if title else "no <title>"
        out.append(f"{page}: title {found!r} does not contain {expected_title!r}")
    navs = _NAV.findall(dom)
    targets = {posixpath.normpath(posixpath.join(posixpath.dirname(page), h.split("#")[0]))
               for nav in navs for h in _HREF.findall(nav) if h and not h.startswith("#")}
    if not navs:
        out.append(f"{page}: no <nav> element")
    for link in NAV_LINKS:
        if link not in targets:
            out.append(f"{page}: navigation has no link to {link}")
    unresolved = [m.group(0) for m in _XREF.finditer(dom) if not m.group(1)]
    if unresolved:
        out.append(f"{page}: {len(unresolved)} cross-reference(s) without a target, "
                   f"first: {unresolved[0][-80:]!r}")
    if 'class="system-message"' in dom or 'class="problematic"' in dom:
        out.append(f"{page}: a docutils error message is rendered in the page")
    out += [f"{page}: browser console: {msg}" for msg in console]
    return out


def check(html_dir, chromium):
    """Every problem found on the checked pages of the site built in ``html_dir``."""
    found = []
    for page, expected_title in PAGES.items():
        path = os.path.join(html_dir, page)
        if not os.path.exists(path):
            found.append(f"{page}: not built (no {path})")
            continue
        dom, console = render(chromium, path)
        found += problems(page, dom, console, expected_title)
    return found


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("html_dir", help="the built site, e.g. docs/_build/html")
    p.add_argument("--chromium", help="Chromium executable (default: found on PATH)")
    a = p.parse_args(argv)
    chromium = find_chromium(a.chromium)
    if chromium is None:
        p.error("Chromium was not found: install Debian's 'chromium' package "
                "(apt-get install chromium) or pass --chromium PATH")
    found = check(a.html_dir, chromium)
    for line in found:
        print(line)
    if found:
        return 1
    print(f"rendered: {', '.join(PAGES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
