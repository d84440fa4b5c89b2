"""Sends a body over the route's limit the way most agent SDKs do, the whole body and then the
read, with Python's http.client and with requests; prints one JSON line per try: the client, the
status and the problem's code, or the error the client met.

Usage: /usr/bin/python3 oversized.py URL BYTES TRIES
"""

import http.client
import json
import sys
import urllib.parse

import requests

url, size, tries = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
body = b'{"amount": 1, "pad": "' + b"x" * size + b'"}'
u = urllib.parse.urlsplit(url)


def headers(i: int, client: str) -> dict:
    return {
        "content-type": "application/json",
        "idempotency-key": f"big-{client}-{i}",
        "x-agent-id": "agent-7",
    }


for i in range(tries):
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        c.request("POST", u.path, body=body, headers=headers(i, "http.client"))
        r = c.getresponse()
        print(json.dumps({"client": "http.client", "status": r.status, "code": json.loads(r.read())["code"]}))
        c.close()
    except Exception as e:  # what the client met instead of an answer
        print(json.dumps({"client": "http.client", "error": repr(e)}))
    try:
        r = requests.post(url, data=body, headers=headers(i, "requests"), timeout=30)
        print(json.dumps({"client": "requests", "status": r.status_code, "code": r.json()["code"]}))
    except Exception as e:
        print(json.dumps({"client": "requests", "error": repr(e)}))
