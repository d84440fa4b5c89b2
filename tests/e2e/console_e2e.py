#!/usr/bin/env python3
"""End-to-end test of the real console in a real webview (WebKitGTK), through tauri-driver.

Run inside Xvfb (see .ci/test): it seeds a demo ledger with the real CLI, starts tauri-driver, opens
idemgate-console on that ledger, visits every view (saving a screenshot of each into
docs/screenshots/), resolves a stuck entry with a reason and checks it leaves Stuck and appears in
the Log under the operator's name, purges an expired entry, exports NDJSON and verifies it — in the
app and with the CLI. Standard library only (urllib speaks W3C WebDriver).
"""
import base64
import http.client
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
CONSOLE = os.path.join(TARGET, "debug", "idemgate-console")
CLI = os.path.join(TARGET, "debug", "idemgate")
SHOTS = os.path.join(ROOT, "docs", "screenshots")
DRIVER = "http://127.0.0.1:4444"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
OPERATOR = "e2e-operator"
# The desktop console records the name typed with the account it runs as beside it.
RECORDED = f"{OPERATOR} (OS user {os.environ.get('USER') or os.environ.get('LOGNAME') or pwd.getpwuid(os.getuid()).pw_name})"

passed = 0


# What WebKitWebDriver answers about a node the page has replaced.
REPLACED = ("stale element reference", '"unknown error"')


def check(cond, what):
    global passed
    if not cond:
        raise AssertionError(what)
    passed += 1
    print(f"  ok: {what}", flush=True)


def wd(method, path, body=None, driver=None):
    data = None if body is None else json.dumps(body).encode()
    # tauri-driver reuses a pooled connection to WebKitWebDriver that the latter may have closed;
    # it then drops our request unanswered without having delivered it. Retrying is safe then.
    for attempt in range(4):
        req = urllib.request.Request((driver or DRIVER) + path, data=data, method=method, headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return json.loads(r.read() or b"{}").get("value")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}") from None
        except http.client.RemoteDisconnected:
            if attempt == 3:
                raise
            time.sleep(0.3)


class Session:
    """A WebDriver session: the console app through tauri-driver (`Session(app, args)`), or any
    capabilities on another driver (`Session(capabilities=..., driver=...)`)."""

    def __init__(self, app=None, args=(), capabilities=None, driver=DRIVER):
        self.driver = driver
        caps = capabilities or {"tauri:options": {"application": app, "args": list(args)}}
        v = self.wd("POST", "/session", {"capabilities": {"alwaysMatch": caps}})
        self.id = v["sessionId"]

    def wd(self, method, path, body=None):
        return wd(method, path, body, self.driver)

    def path(self, p):
        return f"/session/{self.id}{p}"

    def js(self, script, *args):
        return self.wd("POST", self.path("/execute/sync"), {"script": script, "args": list(args)})

    def wait(self, script, what, timeout=30, *args):
        end = time.time() + timeout
        while True:
            v = self.js(script, *args)
            if v:
                return v
            if time.time() > end:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.2)

    def find(self, testid):
        self.wait("return !!document.querySelector(`[data-testid='${arguments[0]}']`)", f"[data-testid={testid}]", 30, testid)
        v = self.wd("POST", self.path("/element"), {"using": "css selector", "value": f"[data-testid='{testid}']"})
        return v[ELEMENT]

    def click(self, testid):
        # A stale node took no click: clicking the node now there is safe. An `unknown error`
        # leaves open whether the click landed, so it is not retried.
        self.again(f"clicking {testid}", ("stale element reference",),
                   lambda: self.wd("POST", self.path(f"/element/{self.find(testid)}/click"), {}))

    def click_el(self, el):
        self.wd("POST", self.path(f"/element/{el}/click"), {})

    def nav(self, view):
        """Opens `view` from the sidebar and waits until the page shows it. Every list view has its
        rows and filter input under the same test ids: until the old view's nodes are gone, a
        lookup can return one of them, which the new view then replaces."""
        self.js("for (const c of document.querySelector('[data-testid=main]').children) c.dataset.e2eLeaving = '';")
        self.click(f"nav-{view}")
        self.wait("const m = document.querySelector('[data-testid=main]'); "
                  "return m.dataset.view === arguments[0] && m.children.length > 0 && !m.querySelector(':scope > [data-e2e-leaving]')",
                  f"the {view} view", 30, view)

    def again(self, what, answers, op):
        """Runs `op`, and once more if the driver's error names one of `answers`: a node the page
        replaced between the lookup and the use (WebKitWebDriver says `stale element reference`,
        or at times `unknown error` with no message). `op` looks the node up again."""
        for attempt in (1, 2):
            try:
                return op()
            except RuntimeError as e:
                if attempt == 2 or not any(a in str(e) for a in answers):
                    raise
                print(f"  {what} again: {e}", flush=True)

    def type(self, testid, text):
        def keys():
            el = self.find(testid)
            self.wd("POST", self.path(f"/element/{el}/clear"), {})
            self.wd("POST", self.path(f"/element/{el}/value"), {"text": text})
            # change fires on blur / Enter: send Tab.
            self.wd("POST", self.path(f"/element/{el}/value"), {"text": "\ue004"})
        # Typing again into the node now there is safe (clear, keys, Tab); what follows checks
        # the outcome.
        self.again(f"typing into {testid}", REPLACED, keys)

    def text(self, testid):
        return self.again(f"reading {testid}", REPLACED,
                          lambda: self.wd("GET", self.path(f"/element/{self.find(testid)}/text")))

    def invoke(self, cmd):
        """Calls a Tauri command from the page as the UI would: ["ok", value] or ["err", message]."""
        return self.wd("POST", self.path("/execute/async"), {"script": (
            "const done = arguments[1]; window.__TAURI_INTERNALS__.invoke(arguments[0], {})"
            ".then(v => done(['ok', v]), e => done(['err', String(e && (e.message || e.code) || e)]));"
        ), "args": [cmd]})

    def rows(self):
        return self.js("return [...document.querySelectorAll('[data-testid=entry-row]')].map(r => [r.dataset.entryId, r.textContent])")

    def screenshot(self, name):
        # Two animation frames, so the picture is not one frame stale.
        self.wd("POST", self.path("/execute/async"), {"script": "const done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(() => done(true)));", "args": []})
        png = base64.b64decode(self.wd("GET", self.path("/screenshot")))
        os.makedirs(SHOTS, exist_ok=True)
        with open(os.path.join(SHOTS, f"{name}.png"), "wb") as f:
            f.write(png)
        check(len(png) > 10_000, f"screenshot {name}.png ({len(png)} bytes)")

    def dump(self, name):
        """What the page showed when a check failed: a picture in target/ and, in the log, the
        view, the focused element and the start of the view's text."""
        try:
            with open(os.path.join(TARGET, f"{name}-failure.png"), "wb") as f:
                f.write(base64.b64decode(self.wd("GET", self.path("/screenshot"))))
            state = self.js("const m = document.querySelector('[data-testid=main]'); const a = document.activeElement; "
                            "return [m && m.dataset.view, a && (a.dataset.testid || a.tagName), (m ? m.innerText : '').slice(0, 400)]")
            print(f"  the page at the failure (target/{name}-failure.png): view {state[0]}, focus {state[1]}: {state[2]!r}", flush=True)
        except Exception as e:  # noqa: BLE001 - the failure itself is what gets reported
            print(f"  the page at the failure could not be read: {e}", flush=True)

    def close(self):
        try:
            self.wd("DELETE", self.path(""))
        except Exception:
            pass


def cli(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True)


def wait_for_driver(url):
    """Until the WebDriver server at `url` answers (up to ~10 s; the session start says if not)."""
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/status", timeout=1)
            return
        except Exception:
            time.sleep(0.1)


def demo_ledger(needs, what, prefix, events):
    """A new work directory with a demo ledger of `events` in it, once the files `needs` (built by
    `what`) are there: (work dir, ledger path, the ledger's stuck entries)."""
    for p in needs:
        if not os.path.exists(p):
            sys.exit(f"{p} is missing: build {what} first (see .ci/test)")
    work = tempfile.mkdtemp(prefix=prefix)
    ledger = os.path.join(work, "demo.db")
    r = cli("demo", "--ledger", ledger, "--events", str(events))
    if r.returncode != 0:
        sys.exit(r.stderr)
    return work, ledger, json.loads(cli("entries", "--ledger", ledger, "--stuck", "--json").stdout)


def main():
    work, ledger, stuck_before = demo_ledger((CONSOLE, CLI), "the console and the CLI", "idemgate-e2e-", 5000)
    # A retention policy has run: the log's oldest part is in sealed segments.
    archive = os.path.join(work, "archive")
    os.mkdir(archive)
    config = os.path.join(work, "retention.toml")
    key = os.path.join(work, "checkpoint")
    if cli("keygen", "--out", key, "--name", "e2e.example/idemgate").returncode != 0:
        sys.exit("keygen failed")
    with open(config, "w") as f:
        f.write(f'[server]\nledger = "{ledger}"\nadmin_listen = "off"\nsigning_key_file = "{key}.key"\n\n[retention]\nlog_hot = "60h"\narchive_dir = "{archive}"\n')
    r = cli("retention", "run", "--config", config, "--json")
    if r.returncode != 0:
        sys.exit(r.stderr)
    sealed = json.loads(r.stdout)["archive"]["segments"]
    check(len(sealed) > 0, f"the retention policy sealed {len(sealed)} segment(s)")

    driver_log = open(os.path.join(TARGET, "tauri-driver.log"), "w")
    # A fresh profile (preferences, webview storage) for every run: screenshots start from defaults.
    env = dict(os.environ, XDG_DATA_HOME=os.path.join(work, "data"), XDG_CONFIG_HOME=os.path.join(work, "config"), XDG_CACHE_HOME=os.path.join(work, "cache"))
    driver = subprocess.Popen(["tauri-driver", "--port", "4444", "--native-port", "4445", *(["--native-driver", os.environ["E2E_NATIVE_DRIVER"]] if os.environ.get("E2E_NATIVE_DRIVER") else [])], stdout=driver_log, stderr=subprocess.STDOUT, env=env)
    s = None
    try:
        wait_for_driver(DRIVER)
        s = Session(CONSOLE, ["--ledger", ledger])
        print("console: session open", flush=True)

        # Overview
        s.wait("const e = document.querySelector('[data-testid=stat-stuck] .value'); return e && e.textContent !== ''", "overview stats")
        check(s.text("stat-stuck").startswith(str(len(stuck_before))), f"overview shows {len(stuck_before)} stuck")
        check(OPERATOR not in s.text("ledger-label") and "demo.db" in s.text("ledger-label"), "the ledger from --ledger is open")
        s.type("operator-input", OPERATOR)
        check("log_hot = 60h" in s.text("retention-policy") and "archived through" in s.text("retention-archive"), "the overview shows the retention policy and its last run")
        # The charts as drawn: a line across the plot, its scale, its time axis, and the count of
        # the hour under a real pointer.
        line, plot, top = s.js("const c = document.querySelector('[data-testid=chart-complete]'); "
                               "return [c.querySelector('polyline').getBoundingClientRect().width, "
                               "c.querySelector('svg').getBoundingClientRect().width, "
                               "c.querySelector('[data-testid=chart-complete-y]').firstChild.textContent]")
        check(plot > 100 and line > 0.9 * plot, f"the executions line spans its plot ({line:.0f} of {plot:.0f} px)")
        check(int(top) >= 1, f"the executions chart has a scale (top {top})")
        ticks = s.js("return [...document.querySelector('[data-testid=chart-complete-x]').children]"
                     ".map((e) => { const r = e.getBoundingClientRect(); return [e.textContent, r.left, r.right]; })")
        check(ticks[-1][0] == "now" and all(a[2] <= b[1] for a, b in zip(ticks, ticks[1:])),
              f"the executions chart has a time axis, its labels apart and in order ({ticks})")
        last_hour = s.wd("POST", s.path("/element"), {"using": "css selector", "value": "[data-testid='chart-complete'] rect.hour:last-of-type"})[ELEMENT]
        s.wd("POST", s.path("/actions"), {"actions": [{"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
                                                       "actions": [{"type": "pointerMove", "origin": {ELEMENT: last_hour}, "x": 0, "y": 0}]}]})
        said = s.wait("const t = document.querySelector('[data-testid=chart-complete-readout]').textContent; "
                      "return /\\d\\d:00–\\d\\d:00: \\d+ executions$/.test(t) && t", "an hour's count on hover")
        check(bool(said), f"the hour under the pointer says its count ({said})")
        s.wd("DELETE", s.path("/actions"))
        s.screenshot("overview")

        # Capabilities: the window may call the console's own commands, nothing else.
        ok = s.invoke("ledger_info")
        check(ok[0] == "ok" and "demo.db" in json.dumps(ok[1]), "a granted command answers (ledger_info)")
        for cmd in ["plugin:app|version", "plugin:window|close", "plugin:webview|print"]:
            denied = s.invoke(cmd)
            check(denied[0] == "err" and "not allowed" in denied[1], f"an ungranted command is refused ({cmd}: {denied[1][:60]})")

        # Log
        s.nav("log")
        s.wait("return document.querySelectorAll('[data-testid=entry-row]').length > 10", "log rows")
        s.screenshot("log")

        # Stuck: resolve one (not the destructive one) with a reason
        s.nav("stuck")
        s.wait("return document.querySelectorAll('[data-testid=entry-row]').length > 0", "stuck rows")
        rows = s.rows()
        check(len(rows) == len(stuck_before), f"Stuck lists the {len(stuck_before)} stuck entries")
        head = s.js("return [...document.querySelectorAll('[data-testid=list-header] [role=columnheader]')].map(c => c.textContent)")
        check("idempotency key" in head and "state" in head and "subjects" in head, f"the list names its columns ({', '.join(head)})")
        hover = s.js("const k = document.querySelector('[data-testid=entry-row] [data-testid=row-key]'); return [k.title, k.textContent]")
        check(hover[0] != "" and hover[0] == hover[1], f"a row's key is whole on hover ({hover[0]})")
        s.screenshot("stuck")
        target = next(r for r in rows if "⚠" not in r[1])
        entry_id = target[0]
        el = wd("POST", s.path("/element"), {"using": "css selector", "value": f"[data-testid='entry-row'][data-entry-id='{entry_id}']"})[ELEMENT]
        s.click_el(el)
        s.find("action-resolve")
        offered = s.js("return ['resolve', 'purge', 'replay'].map(a => document.querySelector(`[data-testid=action-${a}]`)).map(b => [b.disabled, b.title])")
        check(offered[0] == [False, ""] and offered[1][0] and "purge needs a completed, released or failed entry" in offered[1][1],
              f"a stuck entry is resolved, not purged, and Purge says why ({offered[1][1]})")
        check(offered[2][0] and "embedded proxy" in offered[2][1],
              f"with the embedded proxy stopped, Replay is disabled and says what it needs ({offered[2][1]})")
        s.screenshot("entry")
        s.click("action-resolve")
        s.find("action-dialog")
        check(entry_id in s.text("preview-keys"), "the dialog previews the entry it will touch")
        s.type("external-ref-input", "ch_e2e_found")
        s.type("reason-input", "found the charge in the processor dashboard")
        s.click("confirm-button")
        s.wait("const m = document.querySelector('[data-testid=dialog-message]'); return m && /done/.test(m.textContent)", "resolve done")
        s.click("cancel-button")
        s.nav("stuck")
        s.wait("return document.querySelectorAll('[data-testid=entry-row]').length > 0", "stuck rows again")
        ids = [r[0] for r in s.rows()]
        check(entry_id not in ids and len(ids) == len(stuck_before) - 1, f"entry {entry_id} left Stuck")

        # Log: the resolution, under the operator's name
        s.nav("log")
        s.type("log-operator", OPERATOR)
        s.wait("const r = document.querySelector('[data-testid=entry-row]'); return r && r.textContent.includes(arguments[0])", "the operator's event", 30, OPERATOR)
        first = s.rows()[0]
        check(first[0] == entry_id and "resolve" in first[1] and "found the charge" in first[1], "the Log shows the resolve with the operator's name and reason")

        # Stuck: a bulk resolve of two selected entries, previewed and run by the operations layer
        s.nav("stuck")
        s.wait("return document.querySelectorAll('[data-testid=row-select]').length > 1", "selectable stuck rows")
        picks = [r[0] for r in s.rows() if "⚠" not in r[1]][:2]
        check(len(picks) == 2, "two stuck entries on routes that are not destructive")
        for pid in picks:
            box = wd("POST", s.path("/element"), {"using": "css selector", "value": f"[data-testid='entry-row'][data-entry-id='{pid}'] [data-testid='row-select']"})[ELEMENT]
            s.click_el(box)
        s.click("bulk-resolve")
        s.find("action-dialog")
        previewed = s.text("preview-keys")
        check(all(pid in previewed for pid in picks) and previewed.count("·") == 2, "the bulk dialog previews exactly the two selected entries")
        s.type("external-ref-input", "ch_e2e_bulk")
        s.type("reason-input", "bulk: both charges found in the processor dashboard")
        s.click("confirm-button")
        s.wait("const m = document.querySelector('[data-testid=dialog-message]'); return m && /done/.test(m.textContent)", "bulk resolve done")
        check("2 of 2 done" in s.text("dialog-message"), f"the bulk resolve reports both done ({s.text('dialog-message')})")
        s.click("cancel-button")
        for pid in picks:
            shown = json.loads(cli("show", "--ledger", ledger, pid, "--json").stdout)
            check(shown["state"] == "completed" and shown["resolved_by"] == RECORDED, f"entry {pid} is completed by the bulk resolve, by {RECORDED}")
        bulk_events = json.loads(cli("log", "--ledger", ledger, "--kind", "resolve", "--operator", OPERATOR, "--search", "bulk: both", "--json").stdout)
        check(sorted(str(e["entry_id"]) for e in bulk_events) == sorted(picks), "each entry's resolve is logged under the operator and the reason")

        # An MCP tool call held for an operator: found by its tool, shown as route · tool with its arguments
        s.nav("stuck")
        s.wait("return document.querySelectorAll('[data-testid=entry-row]').length > 0", "stuck rows for the tool filter")
        s.type("filter-input", "tool:refund")
        s.wait("const r = [...document.querySelectorAll('[data-testid=entry-row]')]; return r.length === 1 && r[0].textContent.includes('tools · refund')", "the held tool call, alone")
        s.click("entry-row")
        s.find("tool-call")
        heading = s.js("return document.querySelector('.entry-head h1').textContent")
        check("tools · refund" in heading, f"the entry is headed route · tool ({heading})")
        call = s.text("tool-call")
        check('"amount":500' in call, f"the entry shows the call's arguments ({call})")
        s.screenshot("mcp-call")

        # Collisions: the field-level diff
        s.nav("collisions")
        s.wait("return document.querySelectorAll('[data-testid=entry-row]').length > 0", "collision rows")
        s.screenshot("collisions")
        s.click("entry-row")
        s.wait("return document.querySelectorAll('[data-testid=collision-diff] tbody tr').length > 0", "a collision diff")
        check("/amount" in s.text("collision-diff"), "the diff names the changed field")
        s.screenshot("collision-diff")

        # Expiries: purge one expired entry
        s.nav("expiries")
        s.wait("return document.querySelectorAll('[data-testid=entry-row]').length > 0", "expired rows")
        s.screenshot("expiries")
        purge_id = s.rows()[0][0]
        s.click("entry-row")
        s.click("action-purge")
        s.find("action-dialog")
        s.type("reason-input", "retention: expired entries are purged after review")
        s.click("confirm-button")
        s.wait("const m = document.querySelector('[data-testid=dialog-message]'); return m && /done/.test(m.textContent)", "purge done")
        s.click("cancel-button")
        check(cli("show", "--ledger", ledger, purge_id).returncode == 1, f"entry {purge_id} is purged")
        purges = json.loads(cli("log", "--ledger", ledger, "--kind", "purge", "--operator", OPERATOR, "--json").stdout)
        check(len(purges) == 1 and str(purges[0]["entry_id"]) == purge_id, "the purge is in the log with the operator's name")

        # Incidents: titled in the customer's terms; reviewed with a reason
        s.nav("incidents")
        s.find("incident")
        title = s.text("incident-title")
        check(" · charges · " in title and " USD · agents " in title and " apart" in title, f"an incident reads in the business's terms ({title})")
        s.screenshot("incidents")
        s.click("incident-review")
        s.find("action-dialog")
        s.type("reason-input", "refunded the second charge")
        s.click("confirm-button")
        s.wait("const m = document.querySelector('[data-testid=dialog-message]'); return m && /done/.test(m.textContent)", "review done")
        s.click("cancel-button")
        s.wait("return document.querySelector('[data-testid=incident-reviewed]') !== null", "the reviewed incident")
        reviews = json.loads(cli("log", "--ledger", ledger, "--kind", "review", "--json").stdout)
        check(len(reviews) == 1 and reviews[0]["reason"] == "refunded the second charge", "the review is logged with its reason")

        # Approvals: the inbox of held refunds; one approved (its second approval), one rejected
        waiting = json.loads(cli("approvals", "--ledger", ledger, "--open", "--json").stdout)
        s.wait("const b = document.querySelector('[data-testid=approvals-badge]'); return b && b.textContent !== ''", "the approvals badge")
        check(s.text("approvals-badge") == str(len(waiting)), f"the badge counts the {len(waiting)} calls waiting")
        half = next(w for w in waiting if len(w["approval"]["approved_by"]) == 1)
        other = next(w for w in waiting if w["id"] != half["id"] and not w["approval"]["approved_by"])
        # This OS account approves one on the CLI: the console, run by the same account, no
        # longer offers to approve it, says why, and still offers to reject it.
        cli("approve", "--ledger", ledger, str(other["id"]), "--operator", "cli-operator", "--reason", "first look")
        s.nav("approvals")
        s.wait(f"return document.querySelectorAll('[data-testid=approval]').length === {len(waiting)}", "the held calls")
        s.screenshot("approvals")
        mine = f"[data-testid=approval][data-entry-id=\"{other['id']}\"]"
        why = s.js(f"const b = document.querySelector('{mine} [data-testid=approval-approve]'); return b.disabled ? b.title : ''")
        check(why.endswith(f" already approved entry {other['id']}; another operator must"), f"Approve is off for the account that approved, and says why ({why})")
        check(s.js(f"return !document.querySelector('{mine} [data-testid=approval-reject]').disabled"), "Reject stays on for it")
        said = s.js(f"return document.querySelector('{mine} [data-testid=approval-not-yours]').textContent")
        check(said == f"You may not approve it: {why}", f"the panel says so ({said})")
        for entry, verb, reason in [(half, "approve", "amount checked against the returned order"), (other, "reject", "the agent misread the ticket")]:
            button = f"[data-testid=approval][data-entry-id=\"{entry['id']}\"] [data-testid=approval-{verb}]"
            s.wait(f"return document.querySelector('{button}') !== null", f"the call to {verb}")
            s.js(f"document.querySelector('{button}').click()")
            s.find("action-dialog")
            s.type("reason-input", reason)
            s.click("confirm-button")
            s.wait("const m = document.querySelector('[data-testid=dialog-message]'); return m && /approve: done|reject: done/.test(m.textContent)", f"{verb} done")
            s.click("cancel-button")
        s.wait(f"return document.querySelectorAll('[data-testid=approval]').length === {len(waiting) - 2}", "the decided calls leave the inbox")
        for kind, entry, reason in [("approved", half, "amount checked against the returned order"), ("rejected", other, "the agent misread the ticket")]:
            logged = json.loads(cli("log", "--ledger", ledger, "--kind", kind, "--entry", str(entry["id"]), "--json").stdout)
            check(len(logged) >= 1 and logged[0]["operator"].startswith(f"{OPERATOR} (OS user ") and logged[0]["reason"] == reason,
                  f"the log shows the {kind} call with the operator and the reason ({logged[0]['operator'] if logged else None})")

        # A customer's double charge from the search box, in at most three actions
        actions = 0
        s.click("search-input"); actions += 1
        s.type("search-input", "cus_41000"); actions += 1  # typed, then Tab: the search runs
        s.wait("return document.querySelectorAll('[data-testid=row-duplicate]').length > 0", "the customer's charges, the double charge marked")
        rows = s.rows()
        check(len(rows) == 3 and all("cus_41000" in r[1] for r in rows), f"every charge of cus_41000, with its subjects ({len(rows)} rows)")
        s.screenshot("search")
        dup = wd("POST", s.path("/element"), {"using": "css selector", "value": "[data-testid='entry-row']:has([data-testid='row-duplicate'])"})[ELEMENT]
        s.click_el(dup); actions += 1
        s.wait("const h = document.querySelector('.entry-head h1'); return h && /cus_41000|charges/.test(document.body.textContent) && document.querySelector('[data-testid=action-resolve]')", "the double charge's entry")
        dup_of = s.js("const k = [...document.querySelectorAll('.kv')].find(k => k.firstChild.textContent === 'duplicate of'); return k ? k.lastChild.textContent : ''")
        subjects = s.js("const k = [...document.querySelectorAll('.kv')].find(k => k.firstChild.textContent === 'subjects'); return k ? k.lastChild.textContent : ''")
        check(dup_of.isdigit() and "customer=cus_41000" in subjects, f"the entry shows the customer ({subjects}) and the charge it duplicates (#{dup_of})")
        check(actions <= 3, f"reached in {actions} actions")

        # Export NDJSON and verify it
        s.nav("export")
        out = os.path.join(work, "audit.ndjson")
        s.type("export-path", out)
        s.click("action-export")
        s.wait("const e = document.querySelector('[data-testid=export-result]'); return e && e.textContent.includes('sha256')", "export done", 60)
        check(os.path.exists(out) and os.path.exists(out + ".manifest.json"), "the export and its manifest were written")
        s.type("verify-path", out)
        s.click("action-verify")
        s.wait("const e = document.querySelector('[data-testid=verify-result]'); return e && e.textContent.includes('\"ok\": true')", "verify done", 60)
        s.screenshot("export")
        # The ledger still holds the heads its manifest recorded (verify --against, in the console)
        s.click("action-verify-against")
        s.wait("const e = document.querySelector('[data-testid=verify-result]'); return e && e.textContent.includes('\"heads\"') && e.textContent.includes('\"ok\": true')", "check against the ledger done", 60)
        check(cli("verify", "--export", out).returncode == 0, "the CLI verifies the console's export")

        # The archive: its segments, verified with the live log after them
        check(s.js("return document.querySelector('[data-testid=archive-dir]').value") == archive, "the archive directory is the policy's")
        s.click("action-archive-verify")
        s.wait("const e = document.querySelector('[data-testid=archive-verdict]'); return e && e.textContent.startsWith('OK')", "archive verified", 60)
        rows = s.js("return document.querySelectorAll('[data-testid=segment-row]').length")
        check(rows == len(sealed), f"every segment is listed ({rows})")
        check("by e2e.example/idemgate" in s.text("segment-signed"), "a segment shows its signed head")
        s.js("document.querySelector('[data-testid=archive-panel]').scrollIntoView()")
        s.screenshot("archive")
        check(cli("verify", "--ledger", ledger, "--archive", archive, "--public-key", key + ".pub").returncode == 0, "the CLI verifies the whole history too, with the public key")

        # Dark mode: the page and the charts change colour, and the lines still show on it.
        s.nav("overview")
        colours = "const p = document.querySelector('[data-testid=chart-complete] polyline'); if (!p) return null; " \
                  "return [getComputedStyle(document.body).backgroundColor, getComputedStyle(p).stroke]"
        light = s.wait(colours, "the overview's charts")
        s.click("theme-toggle")
        s.find("stat-stuck")
        dark = s.wait(colours, "the overview's charts, dark")
        check(dark[0] != light[0], f"dark mode changes the background ({light[0]} -> {dark[0]})")
        check(dark[1] not in ("none", dark[0]), f"the chart line shows on the dark background ({dark[1]} on {dark[0]})")
        s.screenshot("overview-dark")
    except Exception:
        if s:
            s.dump("e2e")
        raise
    finally:
        if s:
            s.close()
        driver.terminate()
        driver.wait(timeout=10)
        # tauri-driver does not always take its native driver and the app down with it.
        subprocess.run(["pkill", "-f", "WebKitWebDriver --port=4445"], check=False)
        subprocess.run(["pkill", "-f", CONSOLE], check=False)
    # Reached only when every check passed: a failed run keeps its ledger and profile to look at.
    shutil.rmtree(work, ignore_errors=True)


def run(main_fn):
    """Runs an e2e script's main and reports as .ci/test counts it: `e2e: N passed, M failed`."""
    try:
        main_fn()
    except Exception as e:  # noqa: BLE001 - report and fail
        print(f"e2e: FAILED: {e}", flush=True)
        print(f"e2e: {passed} passed, 1 failed")
        sys.exit(1)
    print(f"e2e: {passed} passed, 0 failed")


if __name__ == "__main__":
    run(main)
