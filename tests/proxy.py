"""A minimal authenticating HTTP proxy for tests (plain GET forwarding and CONNECT tunnels).

It only relays what a build asks for; it records each request's method, target and credentials.
"""
from __future__ import annotations

import base64
import http.client
import select
import socket
import socketserver
import threading
import urllib.parse


class Proxy:
    def __init__(self, user: str, password: str):
        self.expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.requests: list[tuple[str, str, bool]] = []  # (method, target, authorised)
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline().decode("latin-1").strip()
                if not line:
                    return
                method, target, _ = line.split(" ", 2)
                headers = {}
                while True:
                    h = self.rfile.readline().decode("latin-1")
                    if h in ("\r\n", "\n", ""):
                        break
                    k, _, v = h.partition(":")
                    headers[k.strip().lower()] = v.strip()
                ok = headers.get("proxy-authorization") == proxy.expected
                proxy.requests.append((method, target, ok))
                if not ok:
                    self.wfile.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                                     b"Proxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n")
                    return
                if method == "CONNECT":
                    host, _, port = target.partition(":")
                    upstream = socket.create_connection((host, int(port or 443)), timeout=60)
                    self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    self.wfile.flush()
                    self._relay(self.connection, upstream)
                    return
                url = urllib.parse.urlsplit(target)
                conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
                body = self.rfile.read(int(headers["content-length"])) if "content-length" in headers else None
                fwd = {k: v for k, v in headers.items() if k not in ("proxy-authorization", "proxy-connection")}
                conn.request(method, url.path + (f"?{url.query}" if url.query else ""), body=body, headers=fwd)
                resp = conn.getresponse()
                data = resp.read()
                self.wfile.write(f"HTTP/1.1 {resp.status} {resp.reason}\r\n".encode())
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.wfile.write(f"{k}: {v}\r\n".encode())
                self.wfile.write(f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)

            @staticmethod
            def _relay(a: socket.socket, b: socket.socket) -> None:
                socks = [a, b]
                try:
                    while True:
                        readable, _, _ = select.select(socks, [], [], 120)
                        if not readable:
                            return
                        for s in readable:
                            data = s.recv(65536)
                            if not data:
                                return
                            (b if s is a else a).sendall(data)
                finally:
                    b.close()

        class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    def __enter__(self) -> Proxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
