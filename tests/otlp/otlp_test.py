"""idemgate's spans, as an OTLP receiver no one here wrote reads them: `idemgate serve` with
`[telemetry]` pointed at a receiver on loopback that decodes each export with the
`opentelemetry-proto` package (the OpenTelemetry project's generated protobuf classes), in front of
an upstream that counts its side effects and sees the `traceparent` it is sent.

Prints one line per scenario and `otlp: N passed, M failed`; exits non-zero on any failure.

Usage: python otlp_test.py IDEMGATE_BIN   (run by tests/otlp/run.sh, which installs the package)
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import traceback
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from py_support import eventually, serve_listening  # noqa: E402

TOKEN = "otlp-test-admin-token-0123456789abcdef"
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
# What an MCP client sends in a message's params._meta instead.
MCP_TRACE = "0af7651916cd43dd8448eb211c80319c"
MCP_SPAN = "b7ad6b7169203331"


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP traces receiver: every span exported to it, with its resource's attributes."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.lock = threading.Lock()
        self.spans = []
        self.posts = []


class ReceiverHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        req = ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            self.server.posts.append((self.path, self.headers["Content-Type"]))
            for rs in req.resource_spans:
                resource = attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.server.spans.append((resource, s))
        out = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


class Upstream(ThreadingHTTPServer):
    """A payments tool over HTTP (`/v1/charges`) and MCP (`/mcp`): counts charges, keeps the
    `traceparent` of each, and answers 500 to a charge that asks for it."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), UpstreamHandler)
        self.lock = threading.Lock()
        self.charges = 0
        self.traceparents = []


class UpstreamHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        with self.server.lock:
            self.server.charges += 1
            self.server.traceparents.append(self.headers.get("traceparent"))
        if self.path.startswith("/mcp"):
            declined = body.get("params", {}).get("arguments", {}).get("amount", 0) > 10_000
            text = "card declined" if declined else "charged"
            out = {"jsonrpc": "2.0", "id": body.get("id"),
                   "result": {"content": [{"type": "text", "text": text}], "isError": declined}}
            return self.answer(200, out)
        if body.get("fail"):
            return self.answer(500, {"error": "the processor failed mid-charge"})
        self.answer(201, {"id": "ch_1", "amount": body.get("amount")})

    def answer(self, status, obj):
        out = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def attrs(kvs) -> dict:
    """OTLP attributes as a dict of plain values."""
    out = {}
    for kv in kvs:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


def serve(srv: ThreadingHTTPServer) -> None:
    threading.Thread(target=srv.serve_forever, daemon=True).start()


class Stack:
    """The receiver, the upstream, and `idemgate serve` in front of the upstream."""

    def __init__(self, idemgate: str):
        self.dir = tempfile.mkdtemp(prefix="idemgate-otlp-")
        self.receiver, self.upstream = Receiver(), Upstream()
        serve(self.receiver)
        serve(self.upstream)
        up = f"http://127.0.0.1:{self.upstream.server_address[1]}"
        cfg = os.path.join(self.dir, "idemgate.toml")
        with open(cfg, "w") as f:
            f.write(f"""
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{os.path.join(self.dir, "ledger.db")}"

[telemetry]
otlp_endpoint = "http://127.0.0.1:{self.receiver.server_address[1]}"
service_name = "payments-gateway"

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "{up}"
effect = "write"

[[routes]]
name = "tools"
path = "/mcp"
upstream = "{up}"
protocol = "mcp"
""")
        self.log = open(os.path.join(self.dir, "serve.log"), "w")
        env = {**os.environ, "IDEMGATE_ADMIN_TOKEN": TOKEN, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        self.proc = subprocess.Popen([idemgate, "serve", "--config", cfg], env=env,
                                     stdout=subprocess.PIPE, text=True, stderr=self.log)
        self.port, _ = serve_listening(self.proc)

    def post(self, path: str, body: dict, headers: dict) -> tuple:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def server_spans(self, **match) -> list:
        """The server spans received whose attributes include `match`."""
        with self.receiver.lock:
            spans = list(self.receiver.spans)
        return [(res, s) for res, s in spans if s.kind == Span.SPAN_KIND_SERVER
                and all(attrs(s.attributes).get(k) == v for k, v in match.items())]

    def children(self, parent: Span) -> dict:
        """The spans under `parent`, by name (a list each, in start order)."""
        with self.receiver.lock:
            spans = [s for _, s in self.receiver.spans
                     if s.trace_id == parent.trace_id and s.parent_span_id == parent.span_id]
        out = {}
        for s in sorted(spans, key=lambda s: s.start_time_unix_nano):
            out.setdefault(s.name, []).append(s)
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.receiver.shutdown()
        self.upstream.shutdown()


def check_within(parent: Span, kids: list) -> None:
    for k in kids:
        assert parent.start_time_unix_nano <= k.start_time_unix_nano, (k.name, "starts before")
        assert k.end_time_unix_nano <= parent.end_time_unix_nano, (k.name, "ends after")


def a_write_and_its_retry(stack: Stack) -> None:
    key = "charge-otlp-1"
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    for _ in range(2):
        status, _, _ = stack.post("/v1/charges", {"amount": 500},
                                  {"Idempotency-Key": key, "traceparent": traceparent})
        assert status == 201, status
    assert stack.upstream.charges == 1, stack.upstream.charges
    spans = eventually("two spans of the route charges",
                       lambda: len(stack.server_spans(**{"idemgate.route": "charges"})) >= 2
                       and stack.server_spans(**{"idemgate.route": "charges"}))
    by_outcome = {attrs(s.attributes)["idemgate.outcome"]: (res, s) for res, s in spans}
    res, first = by_outcome["executed"]
    _, retry = by_outcome["replayed"]
    assert res["service.name"] == "payments-gateway", res
    assert res["service.instance.id"], res
    a = attrs(first.attributes)
    assert first.name == "POST /v1/charges", first.name
    assert first.trace_id.hex() == CLIENT_TRACE and first.parent_span_id.hex() == CLIENT_SPAN, \
        "the client's traceparent is the span's parent"
    assert a["http.request.method"] == "POST" and a["http.route"] == "/v1/charges", a
    assert a["http.response.status_code"] == 201 and a["idemgate.replayed"] is False, a
    assert a["idemgate.key.hash"] == hashlib.sha256(key.encode()).hexdigest(), a
    assert key not in json.dumps(a), "the key itself is never exported"
    assert a["idemgate.entry.id"] > 0, a
    kids = stack.children(first)
    claim, up, commit = kids["ledger claim"][0], kids["upstream"][0], kids["ledger commit"][0]
    assert attrs(claim.attributes)["idemgate.claim"] == "claimed", attrs(claim.attributes)
    assert up.kind == Span.SPAN_KIND_CLIENT and attrs(up.attributes)["http.response.status_code"] == 201
    assert attrs(commit.attributes)["idemgate.commit"] == "complete", attrs(commit.attributes)
    assert claim.end_time_unix_nano <= up.start_time_unix_nano <= up.end_time_unix_nano \
        <= commit.start_time_unix_nano, "claim, then the upstream, then the commit"
    check_within(first, [claim, up, commit])
    sent = stack.upstream.traceparents[0]
    assert sent == f"00-{CLIENT_TRACE}-{first.span_id.hex()}-01", \
        f"the upstream's parent is idemgate's span: {sent}"
    b = attrs(retry.attributes)
    assert b["idemgate.replayed"] is True and b["http.response.status_code"] == 201, b
    assert b["idemgate.key.hash"] == a["idemgate.key.hash"], b
    assert "upstream" not in stack.children(retry), "a replay sends nothing upstream"
    assert stack.receiver.posts[0] == ("/v1/traces", "application/x-protobuf"), stack.receiver.posts


def an_unknown_outcome_is_an_error(stack: Stack) -> None:
    status, _, _ = stack.post("/v1/charges", {"amount": 700, "fail": True},
                              {"Idempotency-Key": "charge-otlp-2"})
    assert status == 502, status
    want = hashlib.sha256(b"charge-otlp-2").hexdigest()
    [(_, s)] = eventually("the failed charge's span",
                          lambda: stack.server_spans(**{"idemgate.key.hash": want}))
    a = attrs(s.attributes)
    assert a["idemgate.outcome"] == "outcome-unknown" and a["error.type"] == "outcome-unknown", a
    assert a["http.response.status_code"] == 502, a
    assert s.status.code == Status.STATUS_CODE_ERROR, s.status
    kids = stack.children(s)
    up = attrs(kids["upstream"][0].attributes)
    assert up["error.type"] == "outcome-unknown" and up["idemgate.why"] == "upstream 500", up
    assert attrs(kids["ledger commit"][0].attributes)["idemgate.commit"] == "unknown"


def an_mcp_tool_call_and_its_retry(stack: Stack) -> None:
    """The call's `params._meta.traceparent` is its span's parent, before the HTTP header's (one
    HTTP request may carry another caller's message); without one, the header's is."""
    headers = {"Accept": "application/json, text/event-stream",
               "Mcp-Protocol-Version": "2025-11-25", "Mcp-Session-Id": "session-otlp",
               "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
    before = stack.upstream.charges
    for rid in (7, 8):
        params = {"name": "charge", "arguments": {"amount": 900}}
        if rid == 7:
            params["_meta"] = {"traceparent": f"00-{MCP_TRACE}-{MCP_SPAN}-01"}
        call = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
        status, _, body = stack.post("/mcp", call, headers)
        assert status == 200 and json.loads(body)["result"]["content"][0]["text"] == "charged", body
    assert stack.upstream.charges == before + 1, "the retry ran nothing upstream"
    spans = eventually("two spans of tools/call charge",
                       lambda: len(stack.server_spans(**{"gen_ai.tool.name": "charge"})) >= 2
                       and stack.server_spans(**{"gen_ai.tool.name": "charge"}))
    by_id = {attrs(s.attributes)["jsonrpc.request.id"]: s for _, s in spans}
    first, retry = by_id["7"], by_id["8"]
    a = attrs(first.attributes)
    assert first.name == "tools/call charge", first.name
    assert (first.trace_id.hex(), first.parent_span_id.hex()) == (MCP_TRACE, MCP_SPAN), \
        "the message's own trace context is the span's parent"
    assert (retry.trace_id.hex(), retry.parent_span_id.hex()) == (CLIENT_TRACE, CLIENT_SPAN), \
        "without one, the header's is"
    assert a["mcp.method.name"] == "tools/call" and a["gen_ai.operation.name"] == "execute_tool", a
    assert a["mcp.session.id"] == "session-otlp" and a["mcp.protocol.version"] == "2025-11-25", a
    assert a["idemgate.route"] == "tools" and a["idemgate.outcome"] == "executed", a
    assert {"ledger claim", "upstream", "ledger commit"} <= set(stack.children(first)), \
        stack.children(first).keys()
    b = attrs(retry.attributes)
    assert b["idemgate.outcome"] == "replayed" and b["idemgate.replayed"] is True, b
    assert b["idemgate.key.hash"] == a["idemgate.key.hash"], b
    assert "error.type" not in a, a


def a_tool_s_own_failure_is_an_error_type(stack: Stack) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-11-25"}
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "charge", "arguments": {"amount": 20_000}}}
    status, _, body = stack.post("/mcp", call, headers)
    assert status == 200 and json.loads(body)["result"]["isError"] is True, body
    [(_, s)] = eventually("the declined charge's span",
                          lambda: stack.server_spans(**{"jsonrpc.request.id": "9"}))
    a = attrs(s.attributes)
    assert a["error.type"] == "tool_error" and a["idemgate.outcome"] == "executed", a


SCENARIOS = [a_write_and_its_retry, an_unknown_outcome_is_an_error, an_mcp_tool_call_and_its_retry,
             a_tool_s_own_failure_is_an_error_type]


def main() -> int:
    stack = Stack(sys.argv[1])
    passed = failed = 0
    try:
        for scenario in SCENARIOS:
            name = scenario.__name__.replace("_", " ")
            try:
                scenario(stack)
                passed += 1
                print(f"ok   {name}")
            except Exception:
                failed += 1
                print(f"FAIL {name}")
                traceback.print_exc()
    finally:
        stack.stop()
    if failed:
        print(open(stack.log.name).read()[-4000:])
    print(f"otlp: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
