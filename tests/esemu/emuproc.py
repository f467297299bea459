"""Start and drive the emulator in a subprocess (importable by other tests).

    from emuproc import Emulator
    emu = Emulator(flavor="es8")
    emu.start(["--latency-ms", "5"])
    ... emu.url ...
    emu.admin("POST", "/_esemu/fail", {"count": 1, "kind": "503"})
    emu.restart()      # same port, same --data file
    emu.stop()

Only the standard library is used; the emulator runs under the same Python
interpreter as the caller (``sys.executable``).
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ESEMU = os.path.join(os.path.dirname(os.path.abspath(__file__)), "esemu.py")


class Emulator(object):
    def __init__(self, flavor="es8", data=None, workdir=None, python=None):
        self.flavor = flavor
        self.workdir = workdir or tempfile.mkdtemp(prefix="esemu-")
        self.data = data
        self.python = python or sys.executable
        self.proc = None
        self.port = None
        self.args = []
        self.scheme = "http"

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % (self.scheme, self.port)

    def start(self, extra_args=None, port=None, timeout=15.0):
        if extra_args is not None:
            self.args = list(extra_args)
        if "--tls-cert" in self.args:
            self.scheme = "https"
        port_file = os.path.join(self.workdir, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        cmd = [self.python, ESEMU, "--port", str(port if port is not None else (self.port or 0)),
               "--port-file", port_file, "--flavor", self.flavor]
        if self.data:
            cmd += ["--data", self.data]
        cmd += self.args
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("esemu exited with status %s" % self.proc.returncode)
            try:
                with open(port_file) as f:
                    text = f.read().strip()
                if text:
                    self.port = int(text)
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("esemu did not start within %.0fs" % timeout)

    def stop(self, kill=False):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def restart(self, kill=False):
        """Stop and start again on the same port with the same arguments."""
        port = self.port
        self.stop(kill=kill)
        deadline = time.monotonic() + 10
        while True:
            try:
                return self.start(port=port)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def admin(self, method, path, body=None):
        """Call the /_esemu/ admin API; returns the decoded JSON answer."""
        if not path.startswith("/"):
            path = "/" + path
        if not path.startswith("/_esemu/"):
            path = "/_esemu" + path
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        ctx = None
        if self.scheme == "https":
            import ssl
            ctx = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"null")

    def stats(self):
        return self.admin("GET", "/_esemu/stats")

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
