"""The hostile user's listener, run as ``nobody`` (stdlib only; its source is passed with ``-c``).

``listener.py <dir> <mode> <probe port> <clock header>``: binds 127.0.0.1 on any port, writes it to
``<dir>/port``, and answers every ``GET`` with ``<dir>/body.json``.  It appends each request's
headers to ``<dir>/headers.jsonl``; when one carries ``Authorization`` it replays that header at
once to the real probe's kill switch (``POST /v1/disable`` on ``<probe port>``, with the probe's
own ``Host``) and appends the status it got.  Mode ``clock``: the first answer carries an ETag,
every later one is a bodiless 304 whose ``Poolwatch-Clock`` is ``<clock header>``.
"""

import http.client
import http.server
import json
import sys
from pathlib import Path

HOME, MODE, PROBE_PORT, CLOCK = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
BODY = (HOME / "body.json").read_bytes()
SEEN = HOME / "headers.jsonl"


def replay(authorization: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", PROBE_PORT, timeout=5)
    try:
        headers = {"Host": f"127.0.0.1:{PROBE_PORT}", "Authorization": authorization}
        conn.request("POST", "/v1/disable", headers=headers)
        return conn.getresponse().status
    except OSError:
        return -1
    finally:
        conn.close()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answered = 0

    def do_GET(self) -> None:
        record = {"path": self.path, "headers": dict(self.headers.items())}
        if "Authorization" in self.headers and PROBE_PORT:
            record["replayed"] = replay(self.headers["Authorization"])
        with SEEN.open("a") as out:
            out.write(json.dumps(record) + "\n")
        Handler.answered += 1
        if MODE == "clock" and Handler.answered > 1:
            self.send_response(304)
            self.send_header("Poolwatch-Clock", CLOCK)
            self.send_header("ETag", '"t1"')
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.send_header("ETag", '"t1"')
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args: object) -> None:
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
(HOME / "port").write_text(str(server.server_address[1]))
server.serve_forever()
