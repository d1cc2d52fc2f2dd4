#!/usr/bin/env python3
"""A small HTTP service written in Python, sold through tollgate-proxy (see proxy.toml beside it).

It knows nothing of payments: the proxy answers 402, settles, and forwards paid requests here.
It reads who paid from the proxy's signed identity headers (checked with the shared secret in
TOLLGATE_PROXY_SECRET, when set), and reports usage of its metered route in a header.

    python3 upstream.py [--port 9000]

Routes:
    GET  /forecast?city=Paris   a forecast (sold at a fixed price)
    GET  /summary?words=N       N words of text; reports X-Usage-Words: N (metered)
    GET  /stream-summary?words=N   the same, streamed; X-Usage-Words in a trailer at the end
    GET  /events?n=5&ms=200     server-sent events, one every ms milliseconds
    POST /upload                counts and hashes the body as it streams in
    GET  /whoami                who paid, from the signed identity headers
    GET  /echo/...              the request as received (method, path, headers)
    GET  /status                free
    GET  /slow?ms=N, /hangup, /bad-usage, /huge-usage   misbehaving on purpose (tests)
    POST /careless              answers without reading the body (tests)
"""

import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

SECRET = os.environ.get("TOLLGATE_PROXY_SECRET", "")
PREFIX = "X-Tollgate-"
FIELDS = ["Payer", "Amount", "Asset", "Network", "Transaction", "Payment-Id", "Nonce"]
TOLERANCE_SECS = 300
SEEN = {}  # nonce -> when it was seen (replays within the tolerance are refused)
SEEN_LOCK = threading.Lock()
WORDS = "the quick brown fox jumps over the lazy dog while rain falls softly on the old town".split()


def paid_by(handler):
    """The identity headers, if their signature is the proxy's (see tollgate_proxy::identity)."""
    signature = handler.headers.get(PREFIX + "Signature")
    if not SECRET or not signature:
        return None
    parts = dict(p.strip().split("=", 1) for p in signature.split(",") if "=" in p)
    values = [handler.headers.get(PREFIX + f, "") for f in FIELDS]
    text = "\n".join(["tollgate-proxy-identity-v1", handler.command, handler.path] + values)
    timestamp = parts.get("t", "")
    mac = hmac.new(SECRET.encode(), f"{timestamp}.{text}".encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac, parts.get("v1", "")) or abs(time.time() - int(timestamp or 0)) > TOLERANCE_SECS:
        return None
    now, nonce = time.time(), values[-1]
    with SEEN_LOCK:
        for seen in [n for n, at in SEEN.items() if now - at > TOLERANCE_SECS]:
            del SEEN[seen]
        if not nonce or nonce in SEEN:
            return None
        SEEN[nonce] = now
    return dict(zip([f.lower() for f in FIELDS], values))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, value, headers=()):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, v in headers:
            self.send_header(name, v)
        self.end_headers()
        self.wfile.write(body)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def read_exactly(self, size):
        """Yields the next `size` bytes of the request body as they arrive."""
        while size:
            data = self.rfile.read(min(size, 65536))
            if not data:
                return
            size -= len(data)
            yield data

    def read_body(self):
        """Yields the request body as it arrives (Content-Length or chunked)."""
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            yield from self.read_exactly(int(self.headers.get("Content-Length", "0")))
            return
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return
            yield from self.read_exactly(size)
            self.rfile.readline()

    def do_GET(self):
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if url.path == "/forecast":
            city = query.get("city", "Paris")
            self.send_json(200, {"city": city, "forecast": "sunny, 21 C", "paid_by": paid_by(self)})
        elif url.path == "/summary":
            n = max(0, min(int(query.get("words", "10")), 10_000))
            text = " ".join(WORDS[i % len(WORDS)] for i in range(n))
            self.send_json(200, {"summary": text}, [("X-Usage-Words", str(n))])
        elif url.path == "/stream-summary":
            # Streamed, one word at a time; the words written go in a trailer at the end.
            n = max(0, min(int(query.get("words", "10")), 10_000))
            ms = int(query.get("ms", "10"))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Trailer", "X-Usage-Words")
            self.end_headers()
            for i in range(n):
                self.chunk((WORDS[i % len(WORDS)] + " ").encode())
                time.sleep(ms / 1000)
            self.wfile.write(f"0\r\nX-Usage-Words: {n}\r\n\r\n".encode())
        elif url.path == "/events":
            n, ms = int(query.get("n", "5")), int(query.get("ms", "200"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(n):
                self.chunk(f"id: {i}\ndata: {{\"tick\": {i}, \"at\": {time.time():.3f}}}\n\n".encode())
                time.sleep(ms / 1000)
            self.wfile.write(b"0\r\n\r\n")
        elif url.path == "/whoami":
            self.send_json(200, {"paid_by": paid_by(self)})
        elif url.path.startswith("/echo"):
            self.send_json(200, {"method": self.command, "path": self.path, "headers": dict(self.headers.items())})
        elif url.path == "/status":
            self.send_json(200, {"status": "up"})
        elif url.path == "/slow":
            time.sleep(int(query.get("ms", "5000")) / 1000)
            self.send_json(200, {"slow": True})
        elif url.path == "/hangup":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"only part of it")
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
        elif url.path == "/bad-usage":
            self.send_json(200, {"summary": "..."}, [("X-Usage-Words", "lots")])
        elif url.path == "/huge-usage":
            self.send_json(200, {"summary": "..."}, [("X-Usage-Words", "99999999")])
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self):
        url = urlsplit(self.path)
        if url.path == "/upload":
            digest, count = hashlib.sha256(), 0
            for data in self.read_body():
                digest.update(data)
                count += len(data)
            self.send_json(200, {"bytes": count, "sha256": digest.hexdigest(), "paid_by": paid_by(self)})
        elif url.path == "/careless":
            # Answers without reading the body, as careless services do: what is left of it
            # would be read as the next request if the connection were kept.
            self.send_json(200, {"careless": True})
        elif url.path.startswith("/echo"):
            body = b"".join(self.read_body())
            self.send_json(200, {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body.decode("utf-8", "replace")})
        else:
            for _ in self.read_body():
                pass
            self.send_json(404, {"error": "not found"})


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client (the proxy) that cut a request off is not this service's error


def main():
    port = 9000
    if "--port" in sys.argv:
        port = int(sys.argv[sys.argv.index("--port") + 1])
    server = QuietServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
