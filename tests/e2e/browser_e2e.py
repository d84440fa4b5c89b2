#!/usr/bin/env python3
"""End-to-end test of the console in a real browser (WebKitGTK's MiniBrowser, through
WebKitWebDriver), served by `idemgate serve` (server.console_dir) and talking to its admin API.

Run inside Xvfb (see .ci/test), after the UI is built (ui/dist) and the CLI (target/debug). It
seeds a demo ledger, serves it with two operators (an admin and a viewer, their tokens made by
`idemgate token new`), opens the console with the admin's token in the URL's fragment, and checks
what differs from the desktop console: no ledger to open and no embedded proxy; who is signed in;
a release lands in the ledger under the token's operator, with no name typed; a held call that
operator approved is not offered to them again; an export is made on
the server as an admin-API job, and the file and manifest the server offers verify with the CLI; a
manifest chosen in the page is checked against the server's ledger; signed in as the viewer, the
console offers no purge, and the admin API refuses one. Standard library only.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import console_e2e as e2e  # noqa: E402 - the WebDriver session and checks are shared
from console_e2e import CLI, ROOT, TARGET, Session, check, cli  # noqa: E402
from py_support import serve_addresses  # noqa: E402 - tests/py_support.py

DRIVER = "http://127.0.0.1:4446"
OPERATOR = "browser-operator"
VIEWER = "browser-viewer"
TOKEN = ""  # the operator's, made in main()
DIST = os.path.join(ROOT, "ui", "dist")


def minibrowser():
    found = glob.glob("/usr/lib/*/webkit2gtk-4.1/MiniBrowser")
    if not found:
        sys.exit("MiniBrowser is missing: it comes with libwebkit2gtk-4.1-0 (the console's build deps)")
    return found[0]


def admin(addr, method, path, body=None, token=None):
    req = urllib.request.Request(f"http://{addr}{path}", method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"authorization": f"Bearer {token or TOKEN}", "content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def token_new(name, role):
    """An operator's token and the configuration lines that let it in, from `idemgate token new`."""
    made = json.loads(cli("token", "new", "--name", name, "--role", role, "--json").stdout)
    return made["token"], f'[[operators]]\nname = "{name}"\nrole = "{role}"\ntoken_hash = "{made["token_hash"]}"\n'


def main():
    work, ledger, stuck_before = e2e.demo_ledger((CLI, os.path.join(DIST, "index.html")), "the CLI and the UI",
                                                 "idemgate-browser-e2e-", 3000)
    os.mkdir(os.path.join(work, "spool"))
    global TOKEN
    TOKEN, operator_lines = token_new(OPERATOR, "admin")
    viewer_token, viewer_lines = token_new(VIEWER, "viewer")
    config = os.path.join(work, "idemgate.toml")
    with open(config, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:0"\nadmin_listen = "127.0.0.1:0"\nledger = "{ledger}"\n'
                f'console_dir = "{DIST}"\nexport_dir = "{work}/spool"\n\n{operator_lines}\n{viewer_lines}')
    serve_log = open(os.path.join(TARGET, "browser-e2e-serve.log"), "w")
    # Only the operators' tokens: no shared admin token.
    env_serve = {k: v for k, v in os.environ.items() if k != "IDEMGATE_ADMIN_TOKEN"}
    serve = subprocess.Popen([CLI, "serve", "--config", config], stdout=subprocess.PIPE, stderr=serve_log, text=True, env=env_serve)
    proxy, addr = serve_addresses(serve)
    driver_log = open(os.path.join(TARGET, "browser-e2e-driver.log"), "w")
    # A fresh profile for the browser: nothing remembered from another run.
    env = dict(os.environ, XDG_DATA_HOME=os.path.join(work, "data"), XDG_CONFIG_HOME=os.path.join(work, "config"),
               XDG_CACHE_HOME=os.path.join(work, "cache"), HOME=work)
    driver = subprocess.Popen(["WebKitWebDriver", "--port=4446"], stdout=driver_log, stderr=subprocess.STDOUT, env=env)
    s = None
    try:
        e2e.wait_for_driver(DRIVER)
        s = Session(capabilities={"browserName": "MiniBrowser", "webkitgtk:browserOptions": {"binary": minibrowser(), "args": ["--automation"]}}, driver=DRIVER)
        print("browser: session open", flush=True)
        s.wd("POST", s.path("/window/rect"), {"width": 1280, "height": 800})
        s.wd("POST", s.path("/url"), {"url": f"http://{addr}/console/#token={TOKEN}"})

        # Overview: the server's ledger; nothing to open, start or stop from here
        s.wait("const e = document.querySelector('[data-testid=stat-stuck] .value'); return e && e.textContent !== ''", "overview stats")
        check(s.text("stat-stuck").startswith(str(len(stuck_before))), f"overview shows {len(stuck_before)} stuck, through the admin API")
        check(s.js("return location.hash") == "", "the token is taken out of the URL")
        check(s.text("ledger-label") == f"ledger: {ledger} (idemgate serve at http://{addr})", "the label names the server's ledger and the server")
        check(s.js("return !document.querySelector('[data-testid=ledger-input]') && !document.querySelector('[data-testid=proxy-panel]')"),
              "no ledger to open and no embedded proxy in a browser")
        check(s.text("signed-in") == f"{OPERATOR} · admin", "the header says who is signed in, and their role")
        check(s.js("return !document.querySelector('[data-testid=operator-input]')"), "no name to type: the token names the operator")

        # Stuck: release one, with a reason; it lands in the ledger under the token's operator
        s.nav("stuck")
        s.wait("return document.querySelectorAll('[data-testid=entry-row]').length > 0", "stuck rows")
        rows = s.rows()
        check(len(rows) == len(stuck_before), f"Stuck lists the {len(stuck_before)} stuck entries")
        entry_id = next(r for r in rows if "⚠" not in r[1])[0]
        el = s.wd("POST", s.path("/element"), {"using": "css selector", "value": f"[data-testid='entry-row'][data-entry-id='{entry_id}']"})[e2e.ELEMENT]
        s.click_el(el)
        s.wait("const e = document.querySelector('[data-testid=curl]'); return e && e.textContent.startsWith('curl')", "the entry's request as curl")
        check(f"'http://{proxy}/" in s.text("curl"), f"Copy as curl sends it through the server's proxy, {proxy}")
        # The server runs with no routes: nothing may reach the entry's upstream, and the view
        # says why rather than offering what the server would refuse.
        reach = s.js("return ['release', 'replay', 'reconcile'].map(a => document.querySelector(`[data-testid=action-${a}]`)).map(b => [b.disabled, b.title])")
        check(reach[0] == [False, ""] and all(b[0] and "which this configuration does not have" in b[1] for b in reach[1:]),
              f"Replay and Reconcile are disabled on a route the server does not have, and say why ({reach[2][1]})")
        s.click("action-release")
        s.find("action-dialog")
        s.type("reason-input", "processor confirms it never ran")
        s.click("confirm-button")
        s.wait("const m = document.querySelector('[data-testid=dialog-message]'); return m && /done/.test(m.textContent)", "release done")
        s.click("cancel-button")
        shown = json.loads(cli("show", "--ledger", ledger, entry_id, "--json").stdout)
        check(shown["state"] == "released" and shown["resolved_by"] == OPERATOR,
              f"entry {entry_id} is released in the ledger, by {OPERATOR}")

        # Approvals: a call this operator approved through the admin API (the first of the two its
        # policy needs) is not offered to them again; the panel says why, and Reject stays on.
        _, _, body = admin(addr, "GET", "/admin/v1/approvals?open=true")
        fresh = next(w for w in json.loads(body) if not w["approval"]["approved_by"])
        status, _, body = admin(addr, "POST", f"/admin/v1/approvals/{fresh['id']}/approve", {"reason": "amount checked"})
        check(status == 200 and json.loads(body)["approved_by"] == [OPERATOR], f"{OPERATOR} approves entry {fresh['id']} through the admin API")
        s.nav("approvals")
        mine = f"[data-testid=approval][data-entry-id=\"{fresh['id']}\"]"
        s.wait(f"return document.querySelector('{mine}') !== null", "the approved call in the inbox")
        why = f"{OPERATOR} already approved entry {fresh['id']}; another operator must"
        shown = s.js(f"const p = document.querySelector('{mine}'); const a = p.querySelector('[data-testid=approval-approve]'); "
                     "const n = p.querySelector('[data-testid=approval-not-yours]'); "
                     "return [a.disabled, a.title, p.querySelector('[data-testid=approval-reject]').disabled, n && n.textContent]")
        check(shown == [True, why, False, f"You may not approve it: {why}"],
              f"Approve is off for the token's operator who approved, and says why; Reject stays on ({shown})")

        # Export: a job on the server; the file and manifest it offers verify with the CLI
        s.nav("export")
        check(s.js("return !document.querySelector('[data-testid=export-path]') && !document.querySelector('[data-testid=verify-path]')"),
              "no server path is asked for")
        s.click("action-export")
        s.wait("const e = document.querySelector('[data-testid=export-result]'); return e && e.textContent.includes('sha256')", "export done", 60)
        manifest = json.loads(s.text("export-result"))
        _, _, body = admin(addr, "GET", "/admin/v1/exports")
        jobs = json.loads(body)
        check(len(jobs) == 1 and jobs[0]["state"] == "done" and jobs[0]["manifest"] == manifest,
              "the export is the server's job, and the page shows its manifest")
        s.screenshot("browser-export")
        out = os.path.join(work, manifest["file"])
        for url, path in ((jobs[0]["file_url"], out), (jobs[0]["manifest_url"], out + ".manifest.json")):
            _, _, body = admin(addr, "GET", url)
            with open(path, "wb") as f:
                f.write(body)
        check(cli("verify", "--export", out).returncode == 0, "the CLI verifies the export the server made")

        # Check against the ledger, with a manifest chosen in the page
        chooser = s.find("against-file")
        s.wd("POST", s.path(f"/element/{chooser}/value"), {"text": out + ".manifest.json"})
        s.click("action-verify-against")
        s.wait("const e = document.querySelector('[data-testid=verify-result]'); return e && e.textContent.includes('\"heads\"')", "check against the ledger done", 60)
        report = json.loads(s.text("verify-result"))
        check(report["ok"] and all(held for _, held in report["heads"]), "the server's ledger holds the manifest's heads")

        # A viewer: signed in, reading, and offered no purge; the admin API refuses one all the same
        s.wd("POST", s.path("/url"), {"url": f"http://{addr}/console/?as=viewer#token={viewer_token}"})
        s.wait("const e = document.querySelector('[data-testid=signed-in]'); return e && e.textContent.includes('viewer')", "signed in as the viewer")
        check(s.text("signed-in") == f"{VIEWER} · viewer", "the header names the viewer")
        s.nav("expiries")
        s.wait("return document.querySelectorAll('[data-testid=entry-row]').length > 0", "expired rows")
        purge = s.find("action-purge")
        check(s.js("return document.querySelector('[data-testid=action-purge]').disabled"), "Purge all matching is disabled for a viewer")
        check("needs the admin role" in s.js("return document.querySelector('[data-testid=action-purge]').title"), "and says which role it needs")
        try:
            s.click_el(purge)  # a driver may refuse to click a disabled button; either way nothing opens
        except Exception:
            pass
        check(s.js("return !document.querySelector('[data-testid=action-dialog]')"), "a click on it opens no purge")
        s.screenshot("browser-viewer")
        expired = [r[0] for r in s.rows()]
        _, _, before = admin(addr, "GET", "/admin/v1/stats")
        status, _, body = admin(addr, "POST", "/admin/v1/purge", {"target": "ids", "ids": [int(expired[0])], "reason": "trying"}, token=viewer_token)
        check(status == 403 and json.loads(body)["code"] == "forbidden", f"the admin API refuses the viewer's purge ({status})")
        _, _, after = admin(addr, "GET", "/admin/v1/stats")
        check(json.loads(before)["head"] == json.loads(after)["head"], "and the ledger is as it was")
        check(json.loads(cli("show", "--ledger", ledger, expired[0], "--json").stdout)["id"] == int(expired[0]), f"entry {expired[0]} is still there")
    except Exception:
        if s:
            s.dump("browser-e2e")
        raise
    finally:
        if s:
            s.close()
        driver.terminate()
        driver.wait(timeout=10)
        serve.terminate()
        serve.wait(timeout=40)
    check(not os.listdir(os.path.join(work, "spool")), "the server removed its export spool when it stopped")
    # Reached only when every check passed: a failed run keeps its ledger to look at.
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    e2e.run(main)
