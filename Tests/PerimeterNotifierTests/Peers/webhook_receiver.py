#!/usr/bin/env python3
"""A webhook receiver for the notifier's tests (a test peer, not part of the product).

Verifies the Standard Webhooks signature (webhook-id, webhook-timestamp, webhook-signature;
written from the spec at standardwebhooks.com, independently of the notifier's code) and the
legacy X-Perimeter-Signature (HMAC-SHA256 of the body), both with --secret (whsec_ + base64:
the key is the decoded bytes; anything else: its UTF-8 bytes), keeps the
Idempotency-Keys it has accepted, and answers from a plan: --plan "500,200" answers the
first request for a key 500 and later ones 200; "429:1" is a 429 with Retry-After: 1;
"slow:0.5" waits 0.5 s then answers 200. The last entry repeats.
Prints "listening PORT" on stdout, then one JSON line per request:
{"key", "attempt", "status", "signature": "ok"|"bad"|"missing" (legacy), "standard": "ok"|"bad"|"missing",
"webhook_id", "timestamp", "new": true|false, "received" and "t" (the request's arrival and its
answer, Unix seconds), "port" (the client's port: one per connection), "body": {...}}. A request
fails either check: 401. Connections are kept open between requests (HTTP/1.1 keep-alive), as
receivers commonly do.
"""
import argparse, base64, hashlib, hmac, json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--secret", required=True)
parser.add_argument("--plan", default="200")
args = parser.parse_args()
plan = args.plan.split(",")
key_bytes = base64.b64decode(args.secret[6:]) if args.secret.startswith("whsec_") else args.secret.encode()


def verify_standard(headers, body):
    """Standard Webhooks 1.0.0, symmetric: v1,base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)),
    possibly several space-separated signatures; compared in constant time."""
    msg_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not msg_id or not timestamp or not signatures:
        return "missing"
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key_bytes, signed, hashlib.sha256).digest()).decode()
    for candidate in signatures.split(" "):
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return "ok"
    return "bad"
lock = threading.Lock()
seen_requests = {}   # key -> number of requests so far
accepted = set()     # keys acknowledged with a 2xx


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        received = time.time()
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        key = self.headers.get("Idempotency-Key", "")
        given = self.headers.get("X-Perimeter-Signature", "")
        expected = "sha256=" + hmac.new(key_bytes, body, hashlib.sha256).hexdigest()
        signature = "missing" if not given else ("ok" if hmac.compare_digest(given, expected) else "bad")
        with lock:
            n = seen_requests.get(key, 0)
            seen_requests[key] = n + 1
        step = plan[min(n, len(plan) - 1)]
        status, extra = 200, {}
        if step.startswith("slow:"):
            # Sleep, not a clock: a slow receiver, as the test scripts it; the notifier's timeouts meet it in real time.
            time.sleep(float(step[5:]))
        elif step.startswith("429"):
            status = 429
            if ":" in step:
                extra["Retry-After"] = step.split(":", 1)[1]
        else:
            status = int(step)
        standard = verify_standard(self.headers, body)
        if signature != "ok" or standard != "ok":
            status = 401
        new = False
        if 200 <= status < 300:
            with lock:
                new = key not in accepted
                accepted.add(key)
        try:
            parsed = json.loads(body)
        except Exception:
            parsed = None
        line = json.dumps({"key": key, "attempt": self.headers.get("X-Perimeter-Attempt"), "status": status,
                           "signature": signature, "standard": standard,
                           "webhook_id": self.headers.get("webhook-id"),
                           "timestamp": int(self.headers.get("webhook-timestamp") or 0),
                           "new": new, "received": received, "t": time.time(),
                           "port": self.client_address[1], "body": parsed})
        # One write per record under the lock: print() writes the text and the newline apart, so
        # two handler threads printing at once made one line of two records and lost both.
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        reply = b'{"ok":true}' if status < 300 else b'{"ok":false}'
        self.send_response(status)
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


class Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A client gone before its answer (a notifier killed with -9) is expected here. The
        # default prints a traceback to stderr, which shares the tests' pipe, in many writes
        # outside the lock: a record written meanwhile landed mid-line and was lost.
        with lock:
            sys.stderr.write("answer to %s:%d not sent: %s\n" % (client_address + (sys.exc_info()[1],)))
            sys.stderr.flush()


server = Server(("127.0.0.1", 0), Handler)
print("listening %d" % server.server_address[1], flush=True)
server.serve_forever()
