"""The hostile neighbour's and the hostile receivers' programs (stdlib only; their source is passed
with ``-c``, as uid ``nobody`` in the hostile tier and ``benchmarks/bench_hostile_neighbour.py``,
as this user elsewhere).

:data:`HOG` ``<port> <threads>``: each thread holds one connection to ``127.0.0.1:<port>`` and opens
a new one the moment it is closed, never sending a byte; prints ``holding`` once started.
:data:`RECEIVERS`: two HTTP servers on loopback, one answering every POST 200 with an endless
body, one answering a byte every 2 s; prints their two ports.  Both run until killed.
"""

from __future__ import annotations

__all__ = ["HOG", "RECEIVERS"]

HOG = """
import socket, sys, threading, time
port, n = int(sys.argv[1]), int(sys.argv[2])
def hold():
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            while s.recv(512):
                pass
            s.close()
        except OSError:
            time.sleep(0.001)
for _ in range(n):
    threading.Thread(target=hold, daemon=True).start()
print("holding", flush=True)
threading.Event().wait()  # until killed
"""

RECEIVERS = """
import http.server, sys, threading, time
class Endless(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()
        chunk = b"x" * 65536
        try:
            while True:
                self.wfile.write(chunk)
        except OSError:
            pass
    def log_message(self, *a): pass
class Trickle(Endless):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            self.wfile.write(b"H"); self.wfile.flush()
            while True:
                time.sleep(2); self.wfile.write(b"T"); self.wfile.flush()
        except OSError:
            pass
servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), k) for k in (Endless, Trickle)]
for s in servers:
    threading.Thread(target=s.serve_forever, daemon=True).start()
print(" ".join(str(s.server_address[1]) for s in servers), flush=True)
threading.Event().wait()  # until killed
"""
