#!/usr/bin/python3
"""A loopback HTTP/1.1 proxy in front of one Elasticsearch/OpenSearch node.

For tests: it counts what goes through, can record every exchange, and can
inject faults on demand.  Python standard library only.

As a class (pytest fixtures):

    p = Proxy(upstream_port).start()       # p.port is where clients connect
    p.stats()  -> {"requests": n, "request_bytes": b, "faults": f, "by_method": {...}}
    p.reset_stats()
    p.record("exchanges.jsonl")            # or Proxy(..., record=path); record(None) stops
    p.pause(); ...; p.resume()             # hold requests until resumed
    p.fail_next(3, status=503)             # next 3 requests: an engine-shaped error
    p.reset_next(2)                        # next 2 requests: connection reset, no answer
    p.set_latency(0.2)                     # seconds added before each forwarded request
    p.stop()

As a command:

    proxy.py --upstream PORT [--port P] [--port-file F] [--record FILE]

and the same controls over HTTP on the proxy itself (never forwarded):
    GET  /_proxy/stats          POST /_proxy/reset_stats
    POST /_proxy/pause          POST /_proxy/resume
    POST /_proxy/fail?n=N&status=503|429
    POST /_proxy/reset?n=N      POST /_proxy/latency?seconds=S
    POST /_proxy/record?file=F  (no file: stop recording)

Recorded lines are JSON objects: method, path (with query), content_type,
request_body, status, response_body (bodies as UTF-8 text), and "fault" (the
injected fault's name) for answers the proxy made up instead of the node.
"""

import argparse
import http.client
import http.server
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse

_ERRORS = {
    429: ("es_rejected_execution_exception",
          "rejected execution of coordinating operation (injected by the test proxy)"),
    503: ("unavailable_shards_exception",
          "primary shard is not active (injected by the test proxy)"),
}

# Hop-by-hop headers are the proxy's own business on each side.
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
        "trailer", "upgrade", "content-length", "host"}


def error_body(status):
    """An Elasticsearch-shaped error document for STATUS."""
    etype, reason = _ERRORS.get(status, ("exception", "injected by the test proxy"))
    cause = {"type": etype, "reason": reason}
    return json.dumps({"error": {"root_cause": [cause], **cause}, "status": status}).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "treelockfs-test-proxy"

    def log_message(self, fmt, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        # the status line and headers, then the body, are two writes: with
        # Nagle's algorithm the second waits for the client's delayed ACK
        # (40 ms on Linux) and the proxy would add that to every answer
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.upstream = None
        self.server.proxy._track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.proxy._track(self.connection, False)
            if self.upstream is not None:
                self.upstream.close()

    def _body(self):
        n = self.headers.get("Content-Length")
        if n is not None:
            return self.rfile.read(int(n))
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(parts)
        return b""

    def _reply(self, status, body, ctype="application/json; charset=UTF-8", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self):
        # SO_LINGER 0: close() sends RST, as a crashed node would.
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close_connection = True
        try:
            self.connection.close()
        except OSError:
            pass

    def _handle(self):
        p = self.server.proxy
        body = self._body()
        if self.path.startswith("/_proxy/"):
            status, out = p._control(self.command, self.path)
            self._reply(status, json.dumps(out).encode())
            return
        fault = p._admit(self.command, len(body))
        if fault == "reset":
            p._log(self, body, None, None, fault)
            self._reset()
            return
        if fault is not None:
            status = fault
            out = error_body(status)
            p._log(self, body, status, out, str(status))
            self._reply(status, out)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        for attempt in (0, 1):
            if self.upstream is None:
                self.upstream = http.client.HTTPConnection(p.upstream_host, p.upstream_port,
                                                           timeout=p.upstream_timeout)
            try:
                if self.upstream.sock is None:
                    self.upstream.connect()
                    self.upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.upstream.request(self.command, self.path, body=body if body or
                                      self.command in ("POST", "PUT") else None,
                                      headers=headers)
                r = self.upstream.getresponse()
                out = r.read()
                break
            except (http.client.HTTPException, OSError):
                # A kept-alive upstream connection may have gone stale: one
                # retry on a fresh one, then behave like the dead node.
                self.upstream.close()
                self.upstream = None
                if attempt == 1 or p._upstream_down():
                    p._log(self, body, None, None, "upstream")
                    self._reset()
                    return
        p._log(self, body, r.status, out, None)
        keep = [(k, v) for k, v in r.getheaders() if k.lower() not in _HOP
                and k.lower() != "content-type"]
        self._reply(r.status, out, r.getheader("Content-Type"), keep)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _handle


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # a client that hangs up mid-answer (a mount unmounted, a timed-out
        # request) is part of the weather the proxy exists for, not a fault
        # of its own: no traceback for it
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class Proxy:
    """A proxy on 127.0.0.1 in front of 127.0.0.1:UPSTREAM_PORT."""

    def __init__(self, upstream_port, port=0, record=None, upstream_host="127.0.0.1",
                 upstream_timeout=60.0):
        self.upstream_host = upstream_host
        self.upstream_port = int(upstream_port)
        self.upstream_timeout = upstream_timeout
        self._want_port = port
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._running.set()
        self._conns = set()
        self._fail = []         # pending injected faults, in order: status or "reset"
        self._latency = 0.0
        self._rec = None
        self._server = None
        self._thread = None
        self.reset_stats()
        if record:
            self.record(record)

    # --- life ----------------------------------------------------------------
    def start(self):
        self._server = _Server(("127.0.0.1", self._want_port), _Handler)
        self._server.proxy = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="test-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._running.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            with self._lock:
                conns = list(self._conns)
            for c in conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._server = None
        self.record(None)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    # --- statistics ------------------------------------------------------------
    def stats(self):
        with self._lock:
            return {"requests": self._requests, "request_bytes": self._bytes,
                    "faults": self._faults, "by_method": dict(self._by_method)}

    def reset_stats(self):
        with self._lock:
            self._requests = 0
            self._bytes = 0
            self._faults = 0
            self._by_method = {}

    # --- recording -------------------------------------------------------------
    def record(self, path):
        """Append every exchange to the JSON-lines file PATH (None: stop)."""
        with self._lock:
            if self._rec is not None:
                self._rec.close()
            self._rec = open(path, "a", encoding="utf-8") if path else None

    def _log(self, h, body, status, out, fault):
        with self._lock:
            if self._rec is None:
                return
            line = {"method": h.command, "path": h.path,
                    "content_type": h.headers.get("Content-Type"),
                    "request_body": body.decode("utf-8", "replace"),
                    "status": status,
                    "response_body": out.decode("utf-8", "replace") if out is not None else None}
            if fault:
                line["fault"] = fault
            self._rec.write(json.dumps(line) + "\n")
            self._rec.flush()

    # --- faults ----------------------------------------------------------------
    def pause(self):
        """Hold every request that arrives until resume()."""
        self._running.clear()

    def resume(self):
        self._running.set()

    def fail_next(self, n=1, status=503):
        """Answer the next N requests with STATUS (503, 429, ...) and an
        engine-shaped error body, without forwarding them."""
        with self._lock:
            self._fail.extend([int(status)] * int(n))

    def reset_next(self, n=1):
        """Reset the connection of the next N requests, unanswered."""
        with self._lock:
            self._fail.extend(["reset"] * int(n))

    def clear_faults(self):
        with self._lock:
            self._fail.clear()
            self._latency = 0.0
        self.resume()

    def set_latency(self, seconds):
        """Delay each forwarded request by SECONDS (0: none)."""
        with self._lock:
            self._latency = float(seconds)

    def _admit(self, method, nbytes):
        self._running.wait()
        with self._lock:
            self._requests += 1
            self._bytes += nbytes
            self._by_method[method] = self._by_method.get(method, 0) + 1
            fault = self._fail.pop(0) if self._fail else None
            if fault is not None:
                self._faults += 1
            delay = self._latency
        if fault is None and delay > 0:
            time.sleep(delay)
        return fault

    def _upstream_down(self):
        try:
            socket.create_connection((self.upstream_host, self.upstream_port), 1).close()
            return False
        except OSError:
            return True

    def _track(self, conn, add):
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    # --- control over HTTP (command mode) ------------------------------------------
    def _control(self, method, path):
        u = urllib.parse.urlsplit(path)
        q = dict(urllib.parse.parse_qsl(u.query))
        op = u.path[len("/_proxy/"):]
        if op == "stats":
            return 200, self.stats()
        if method not in ("POST", "PUT"):
            return 405, {"error": "use POST for " + op}
        if op == "reset_stats":
            self.reset_stats()
        elif op == "pause":
            self.pause()
        elif op == "resume":
            self.resume()
        elif op == "fail":
            self.fail_next(int(q.get("n", 1)), int(q.get("status", 503)))
        elif op == "reset":
            self.reset_next(int(q.get("n", 1)))
        elif op == "latency":
            self.set_latency(float(q.get("seconds", 0)))
        elif op == "clear":
            self.clear_faults()
        elif op == "record":
            self.record(q.get("file") or None)
        else:
            return 404, {"error": "unknown control " + op}
        return 200, {"acknowledged": True}


def main(argv=None):
    ap = argparse.ArgumentParser(description="loopback test proxy in front of one node")
    ap.add_argument("--upstream", type=int, required=True, help="the node's HTTP port")
    ap.add_argument("--port", type=int, default=0, help="port to listen on (0: any)")
    ap.add_argument("--port-file", help="write the listening port here once ready")
    ap.add_argument("--record", help="append exchanges to this JSON-lines file")
    a = ap.parse_args(argv)
    p = Proxy(a.upstream, port=a.port, record=a.record).start()
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % p.port)
        os.replace(tmp, a.port_file)
    else:
        print(p.port, flush=True)
    done = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: done.set())
    done.wait()
    p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
