#!/usr/bin/env python3
"""A fake payments tool to put idemgate in front of (standard library only).

POST /v1/charges charges a card: every request that reaches it is one charge, counted per
Idempotency-Key. `X-Fault: drop` charges and then drops the connection without answering (the
"response lost" case). GET /v1/charges?idempotency_key=K says whether K was charged (a reconcile
probe). POST /v1/refunds refunds, counted alike, and, when PROCESSOR_AUTH is set, only with that
Authorization (the credential idemgate adds; the agent never holds it). GET /_charges shows the
counts.  Usage: fake-tool.py [PORT]   (default 9000, 127.0.0.1)
"""
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

charges = {}
lock = threading.Lock()


class Tool(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/_charges":
            with lock:
                return self.reply(200, charges)
        if url.path == "/v1/charges":
            key = parse_qs(url.query).get("idempotency_key", [""])[0]
            with lock:
                n = charges.get(key, 0)
            return self.reply(200 if n else 404, {"idempotency_key": key, "charged": n})
        return self.reply(200, {"object": "customer", "path": url.path})

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        args = json.loads(self.rfile.read(length) or b"{}")
        key = self.headers.get("idempotency-key", "")
        processor = os.environ.get("PROCESSOR_AUTH")
        if self.path == "/v1/refunds" and processor and self.headers.get("authorization") != processor:
            return self.reply(401, {"error": "refunds take the processor's credential"})
        with lock:
            charges[key] = charges.get(key, 0) + 1
            n = sum(charges.values())
        if self.headers.get("x-fault") == "drop":
            self.close_connection = True
            self.connection.close()
            return
        kind = "re" if self.path == "/v1/refunds" else "ch"
        self.reply(201, {"id": f"{kind}_{n:04d}", "amount": args.get("amount"), "status": "succeeded"})

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    ThreadingHTTPServer(("127.0.0.1", port), Tool).serve_forever()
