"""ldtm_docker_proxy: the Docker API as far as the UI's "Terminate" needs it, and no further.

DockerRunLauncher.terminate, in the webserver, asks GET /version (the client's handshake), then the run's
container by its 64-hex id (GET /containers/<id>/json) and stops it (POST /containers/<id>/stop). This
proxy passes exactly those, and the last two only for a container the run launcher made for this
deployment (labels `dagster/run_id` and RUN_LABEL, which deploy/docker/dagster.yaml gives every run
container): PostgreSQL, the daemon or any other container is refused (403) whoever knows its id. An
inspect answer leaves without the container's environment (`Config.Env`: the run's secrets) and its
mounts' host paths. Everything else, listing, creating, exec, images, volumes, is refused. Only this
container and the daemon hold the Docker socket (root on the host); the webserver does not.

Standard library only; one request at a time is enough for a button. Run: python3 docker_socket_proxy.py.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SOCKET = os.environ.get("DOCKER_SOCKET", "/var/run/docker.sock")
PORT = int(os.environ.get("PROXY_PORT", "2375"))
RUN_LABEL = "ldtm.run"  # set on every run container by the run launcher's container_kwargs
PING = re.compile(r"^/(v[0-9.]+/)?(_ping|version)$")
CONTAINER = re.compile(r"^/v[0-9.]+/containers/([0-9a-f]{64})/(json|stop)$")
# Of an inspect answer, what the client reads (state, labels, image) and nothing that carries a secret.
HIDDEN_CONFIG = ("Env", "Cmd", "Entrypoint")


class _UnixConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(SOCKET)


def docker(method: str, path: str, body: bytes | None = None) -> tuple[int, dict, bytes]:
    conn = _UnixConnection("docker")
    try:
        conn.request(method, path, body=body, headers={"Host": "docker", "Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def run_container(version_path: str, cid: str) -> dict | None:
    """The container's inspect answer when it is one of this deployment's run containers, else None."""
    status, _, body = docker("GET", f"{version_path}/containers/{cid}/json")
    if status != 200:
        return None
    info = json.loads(body)
    labels = (info.get("Config") or {}).get("Labels") or {}
    return info if "dagster/run_id" in labels and RUN_LABEL in labels else None


def scrubbed(info: dict) -> bytes:
    config = dict(info.get("Config") or {})
    for key in HIDDEN_CONFIG:
        config.pop(key, None)
    out = {k: v for k, v in info.items() if k not in ("Mounts", "HostConfig", "Args", "Path")}
    out["Config"] = config
    return json.dumps(out).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ldtm_docker_proxy"

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _refuse(self) -> None:
        self._send(403, b'{"message": "not allowed through ldtm_docker_proxy"}')

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if PING.match(parts.path) and self.command in ("GET", "HEAD"):
            status, headers, answer = docker(self.command, self.path)
            return self._send(status, answer, headers.get("Content-Type", "application/json"))
        match = CONTAINER.match(parts.path)
        if not match:
            return self._refuse()
        cid, action = match.groups()
        if (action, self.command) not in (("json", "GET"), ("stop", "POST")):
            return self._refuse()
        version_path = parts.path.split("/containers/")[0]
        info = run_container(version_path, cid)
        if info is None:
            return self._refuse()  # not a run container of this deployment (or none at all)
        if action == "json":
            return self._send(200, scrubbed(info))
        query = f"?{parts.query}" if parts.query else ""
        status, headers, answer = docker("POST", f"{version_path}/containers/{cid}/stop{query}", body)
        self.log_message(
            "stopped run container %s (%s): %s", cid[:12], info["Config"]["Labels"]["dagster/run_id"], status
        )
        return self._send(status, answer, headers.get("Content-Type", "application/json"))

    def do_GET(self) -> None:  # noqa: N802 - the http.server interface
        self._handle()

    def do_HEAD(self) -> None:  # noqa: N802
        self._handle()

    def do_POST(self) -> None:  # noqa: N802
        self._handle()

    def do_PUT(self) -> None:  # noqa: N802
        self._refuse()

    def do_DELETE(self) -> None:  # noqa: N802
        self._refuse()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the http.server interface
        sys.stdout.write(f"{self.address_string()} {format % args}\n")
        sys.stdout.flush()


def main() -> None:
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)  # noqa: S104 - the compose network only (not published)
    print(f"ldtm_docker_proxy on :{PORT} -> {SOCKET}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
