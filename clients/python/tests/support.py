"""A real burnrate server per test module, keys through its CLI, and a small HTTP proxy
that misbehaves on purpose. Nothing here mocks burnrate."""

from __future__ import annotations

import atexit
import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
START_DEADLINE = 90.0
STOP_DEADLINE = 15.0

# Test prices (PRICES_FILE): USD per million tokens, chosen so costs are exact decimals.
TEST_MODEL = "burnrate-python-test-model"
TEST_PRICES = {"input": 2.0, "output": 8.0, "cache_read": 0.5, "cache_write": 4.0}


def node_binary() -> str:
    """BURNRATE_NODE, else the repo's Node 24 (npm devDependency), else node on PATH."""
    explicit = os.environ.get("BURNRATE_NODE")
    if explicit:
        return explicit
    local = os.path.join(REPO_ROOT, "node_modules", ".bin", "node")
    if os.access(local, os.X_OK):
        return local
    found = shutil.which("node")
    if not found:
        raise RuntimeError("no node found: run npm install at the repo root or set BURNRATE_NODE")
    return found


def unique(prefix: str) -> str:
    return "%s-%s" % (prefix, uuid.uuid4().hex[:12])


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# Servers still running when the interpreter exits (an interrupted run) are stopped then.
_LIVE: Set[BurnrateServer] = set()


@atexit.register
def _stop_live_servers() -> None:
    for server in list(_LIVE):
        server.stop()


class BurnrateServer:
    """`node bin/burnrate.js serve` on a fresh DATA_DIR and a free port."""

    def __init__(self) -> None:
        self.node = node_binary()
        self.data_dir = tempfile.mkdtemp(prefix="burnrate-py-test-")
        self.address = ""
        self._proc: Optional[subprocess.Popen[str]] = None
        self._lines: List[str] = []
        self._ready = threading.Event()

    def _env(self) -> Dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            # The embedded default, whatever the developer's shell points at.
            if not k.startswith("CLICKHOUSE_") and k not in ("REDIS_URL", "PRICES_FILE", "METRICS_PORT")
        }
        prices = os.path.join(self.data_dir, "prices.json")
        with open(prices, "w") as f:
            json.dump({"models": {TEST_MODEL: TEST_PRICES}}, f)
        env.update(
            DATA_DIR=self.data_dir,
            PORT="0",
            HOST="127.0.0.1",
            LOG_LEVEL="info",
            PRICES_FILE=prices,
            # Per-key limits of reads and config are not under test here (429 is, via a proxy).
            READS_RATE_LIMIT="100000",
            CONFIG_RATE_LIMIT="100000",
            # Event lists trail POST /events by the shipping interval (1 s by default).
            SHIP_INTERVAL_MS="50",
            # A call after a pause is ignored at once (no grace): the flag without a 60 s wait.
            PAUSE_GRACE_MS="0",
        )
        return env

    def start(self) -> BurnrateServer:
        self._proc = subprocess.Popen(
            [self.node, "bin/burnrate.js", "serve"],
            cwd=REPO_ROOT,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        _LIVE.add(self)
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(START_DEADLINE) or not self.address:
            output = "\n".join(self._lines[-30:])
            self.stop()
            raise RuntimeError("burnrate did not start within %.0fs:\n%s" % (START_DEADLINE, output))
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:  # drained to the end so the pipe never fills
            if len(self._lines) < 2000:
                self._lines.append(line.rstrip("\n"))
            if not self._ready.is_set():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("msg") == "burnrate is serving":
                    self.address = str(entry["address"])
                    self._ready.set()
        self._ready.set()  # exited: start() reports the output

    def create_key(self, user: str, rate_limit: int = 100000) -> str:
        """A key of `user`, allowed `rate_limit` events a minute (tests are not throttled by default)."""
        result = subprocess.run(
            [self.node, "bin/burnrate.js", "keys", "create", "--user", user, "--rate-limit", str(rate_limit)],
            cwd=REPO_ROOT,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError("keys create failed (%d): %s" % (result.returncode, result.stderr))
        return result.stdout.strip().splitlines()[-1].strip()

    def stop(self) -> None:
        _LIVE.discard(self)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_DEADLINE)
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)


class Api:
    """Direct HTTP to burnrate for assertions and operator actions (not the client under test)."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url
        self.api_key = api_key

    def call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("x-api-key", self.api_key)
        if data is not None:
            req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def drained(self, deadline: float = 10.0) -> None:
        """Waits until /readyz says the journal holds nothing not yet readable in ClickHouse."""
        end = time.monotonic() + deadline
        while True:
            status, body = self.call("GET", "/readyz")
            if status == 200 and (body.get("journal") or {}).get("rows", 0) == 0:
                return
            if time.monotonic() > end:
                raise AssertionError("the journal did not drain within %.0f s: %d %r" % (deadline, status, body))
            time.sleep(0.025)

    def agent(self, agent_id: str) -> Dict[str, Any]:
        """The agent as burnrate shows it, once every acknowledged event is readable."""
        self.drained()
        status, body = self.call("GET", "/agents/" + urllib.parse.quote(agent_id, safe=""))
        if status != 200:
            raise AssertionError("GET /agents/%s: %d %r" % (agent_id, status, body))
        return body  # type: ignore[no-any-return]

    def agent_status(self, agent_id: str) -> int:
        return self.call("GET", "/agents/" + urllib.parse.quote(agent_id, safe=""))[0]

    def set_paused(self, agent_id: str, is_paused: bool) -> None:
        status, body = self.call("POST", "/config/pause", {"agent_id": agent_id, "is_paused": is_paused})
        if status != 200 or body.get("is_paused") is not is_paused:
            raise AssertionError("POST /config/pause: %d %r" % (status, body))


def dead_url() -> str:
    """An http URL on which nothing listens (a port just bound and closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return "http://127.0.0.1:%d" % port


class Seen:
    """One request as the proxy saw it, and the answer it got upstream (when forwarded)."""

    def __init__(self, method: str, path: str, body: Any, at: float) -> None:
        self.method = method
        self.path = path
        self.body = body
        self.at = at
        self.status: Optional[int] = None
        self.headers: Dict[str, str] = {}
        self.answer: Any = None


# A plan decides what the proxy does with the n-th request (1-based) of a method and path:
# "forward", "drop" (forward, read the answer, close the client's connection unanswered),
# "stall" (forward, then hold the answer back for STALL_SECONDS and close unanswered),
# or (status, headers, body) to answer itself.
Plan = Callable[[str, str, int], Any]
STALL_SECONDS = 2.0


class Proxy:
    """A real HTTP proxy between the client and burnrate (http.server in a thread)."""

    def __init__(self, upstream: str, plan: Plan) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.plan = plan
        self.seen: List[Seen] = []
        self._counts: Dict[Tuple[str, str], int] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                proxy._handle(self)

            def do_POST(self) -> None:
                proxy._handle(self)

            def do_DELETE(self) -> None:
                proxy._handle(self)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def requests(self, method: str, path: str) -> List[Seen]:
        with self._lock:
            return [s for s in self.seen if s.method == method and s.path.split("?")[0] == path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length) if length else b""
        path = h.path.split("?")[0]
        seen = Seen(h.command, h.path, json.loads(raw) if raw else None, time.monotonic())
        with self._lock:
            key = (h.command, path)
            self._counts[key] = n = self._counts.get(key, 0) + 1
            self.seen.append(seen)
        action = self.plan(h.command, path, n)
        if action in ("forward", "drop", "stall"):
            status, headers, body = self._forward(h, raw)
            with self._lock:
                seen.status, seen.headers = status, {k.lower(): v for k, v in headers.items()}
                seen.answer = json.loads(body) if body else None
            if action == "stall":
                time.sleep(STALL_SECONDS)
            if action != "forward":
                # The event reached burnrate and was stored; the client never hears so.
                h.close_connection = True
                return
        else:
            status, headers, body = action
        h.send_response(status)
        for name, value in headers.items():
            h.send_header(name, value)
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _forward(self, h: http.server.BaseHTTPRequestHandler, raw: bytes) -> Tuple[int, Dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=10)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() in ("x-api-key", "content-type", "accept")}
            conn.request(h.command, h.path, body=raw if raw else None, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            keep = {k: v for k, v in resp.getheaders() if k.lower() in ("content-type", "retry-after")}
            return resp.status, keep, body
        finally:
            conn.close()


def problem(status: int, code: str, retry_after: Optional[int] = None) -> Tuple[int, Dict[str, str], bytes]:
    headers = {"content-type": "application/problem+json"}
    if retry_after is not None:
        headers["retry-after"] = str(retry_after)
    body = json.dumps({"type": "about:blank", "title": code, "status": status, "code": code, "detail": code})
    return status, headers, body.encode()


class ModuleServer:
    """setUpModule/tearDownModule helpers: one server and one key per test module."""

    def __init__(self) -> None:
        self.server: Optional[BurnrateServer] = None
        self.key = ""
        self.url = ""

    def start(self, user: str) -> None:
        server = BurnrateServer().start()
        try:
            self.key = server.create_key(user)
        except BaseException:
            server.stop()
            raise
        self.server, self.url = server, server.address

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    @property
    def api(self) -> Api:
        return Api(self.url, self.key)
