"""A small HTTP/1.1 file server answering Range requests (Python's
http.server does not): serves the files of ROOT on 127.0.0.1:PORT.
Usage: python3 bench/range_server.py ROOT PORT"""

import http.server
import os
import sys

root, port = sys.argv[1], int(sys.argv[2])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.serve(False)

    def do_GET(self):
        self.serve(True)

    def serve(self, body):
        try:
            f = open(os.path.join(root, os.path.basename(self.path)), "rb")
        except OSError:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            start, end = 0, size - 1
            want = self.headers.get("Range")
            if want:
                a, b = want.split("=", 1)[1].split("-", 1)
                start, end = int(a), min(int(b) if b else size - 1, size - 1)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            if body:
                f.seek(start)
                self.wfile.write(f.read(end - start + 1))


http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
