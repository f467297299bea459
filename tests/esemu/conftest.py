"""Fixtures: an emulator subprocess per test module (tests/backend_fixtures.py,
shared with the integration tests)."""

import json
import os
import socket
import sys
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from backend_fixtures import emulator_fixture  # noqa: E402


class Client(object):
    """A tiny raw HTTP client: returns (status, headers, decoded body)."""

    def __init__(self, base):
        self.base = base
        host, port = base.split("//")[1].split(":")
        self.host, self.port = host, int(port)

    def request(self, method, path, body=None, ctype="application/json", headers=None, raw=False):
        import http.client
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        h = dict(headers or {})
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else (
                body.encode() if isinstance(body, str) else json.dumps(body).encode())
            if ctype:
                h.setdefault("Content-Type", ctype)
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        payload = r.read()
        hdrs = r.getheaders()
        conn.close()
        if raw:
            return r.status, hdrs, payload
        try:
            decoded = json.loads(payload) if payload else None
        except ValueError:
            decoded = payload
        return r.status, dict((k.lower(), v) for k, v in hdrs), decoded

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def head(self, path, **kw):
        return self.request("HEAD", path, **kw)


emu8 = emulator_fixture("es8")
emu7 = emulator_fixture("es7")


@pytest.fixture
def es(emu8):
    """A raw client on a freshly reset es8 emulator."""
    emu8.admin("POST", "/_esemu/reset")
    return Client(emu8.url)


@pytest.fixture
def es7(emu7):
    emu7.admin("POST", "/_esemu/reset")
    return Client(emu7.url)


@pytest.fixture
def esemu_url(emu8):
    """The base URL of a running (reset) emulator."""
    emu8.admin("POST", "/_esemu/reset")
    yield emu8.url
