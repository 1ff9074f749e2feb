"""A small Hub served on 127.0.0.1 for the pull and push tests (`hub` fixture, registered in conftest.py).

`FakeHub` implements the endpoints that huggingface_hub calls for create_repo, create_branch,
model_info, list_repo_tree, validate-yaml, preupload, commit (NDJSON, every file "regular", so
inline base64 and no LFS) and file download (HEAD/GET of /{repo}/resolve/{rev}/{path}), keeps
repos in memory and records every request. No test reaches the real Hub: the endpoint, cache and
token path are pointed at the test's own, and name resolution of any other host fails.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import pytest


def _sha(files: dict) -> str:
    h = hashlib.sha1()
    for k in sorted(files):
        h.update(k.encode() + b"\0" + files[k] + b"\0")
    return h.hexdigest()


class FakeHub:
    """In-memory Hub: repos -> branches -> files; `requests` records (method, path, query)."""

    def __init__(self):
        self.repos: dict[str, dict[str, dict[str, bytes]]] = {}
        self.commits: list[dict] = []  # every commit received: repo, revision, message, files, deleted, create_pr
        self.requests: list[tuple[str, str, dict]] = []
        self.fail: dict[str, object] = {}  # endpoint name -> HTTP status or "close"
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def add_repo(self, repo_id: str, files: dict[str, bytes] | None = None) -> str:
        self.repos[repo_id] = {"main": dict(files or {})}
        return _sha(self.repos[repo_id]["main"])

    def paths(self, method: str | None = None) -> list[str]:
        return [p for m, p, _ in self.requests if method is None or m == method]

    def _handler(hub):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, status, body=b"", headers=None, error_code=None):
                if isinstance(body, (dict, list)):
                    body = json.dumps(body).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                if error_code:
                    self.send_header("X-Error-Code", error_code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _failing(self, name) -> bool:
                how = hub.fail.get(name)
                if how is None:
                    return False
                if how == "close":  # read the request, then hang up without an answer
                    self._body()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return True
                self._send(int(how), {"error": f"injected {how}"})
                return True

            def _branch(self, repo, rev):
                if repo not in hub.repos:
                    self._send(404, {"error": "Repository not found"}, error_code="RepoNotFound")
                    return None
                branches = hub.repos[repo]
                rev = unquote(rev)
                for files in branches.values():
                    if rev == _sha(files):
                        return rev, files
                if rev not in branches:
                    self._send(404, {"error": "Invalid rev id"}, error_code="RevisionNotFound")
                    return None
                return rev, branches[rev]

            def do_HEAD(self):
                self.do_GET()

            def do_GET(self):
                u = urlsplit(self.path)
                hub.requests.append((self.command, u.path, parse_qs(u.query)))
                parts = u.path.strip("/").split("/")
                if parts[:2] == ["api", "models"]:
                    repo = "/".join(parts[2:4])
                    rest = parts[4:]
                    if not rest or rest[0] == "revision":
                        if self._failing("info"):
                            return
                        found = self._branch(repo, rest[1] if rest else "main")
                        if found:
                            files = found[1]
                            self._send(200, {"id": repo, "sha": _sha(files), "private": False,
                                             "siblings": [{"rfilename": f} for f in sorted(files)]})
                        return
                    if rest[0] == "tree":
                        found = self._branch(repo, rest[1])
                        if found:
                            files = found[1]
                            self._send(200, [{"type": "file", "path": f, "size": len(b),
                                              "oid": hashlib.sha1(b).hexdigest()} for f, b in sorted(files.items())])
                        return
                if "resolve" in parts:
                    i = parts.index("resolve")
                    repo, rev, path = "/".join(parts[:i]), parts[i + 1], unquote("/".join(parts[i + 2:]))
                    found = self._branch(repo, rev)
                    if not found:
                        return
                    files = found[1]
                    if path not in files:
                        self._send(404, {"error": "Entry not found"}, {"X-Repo-Commit": _sha(files)},
                                   error_code="EntryNotFound")
                        return
                    body = files[path]
                    self._send(200, body, {"X-Repo-Commit": _sha(files),
                                           "ETag": f'"{hashlib.sha1(body).hexdigest()}"'})
                    return
                self._send(404, {"error": f"no route {u.path}"})

            def do_POST(self):
                u = urlsplit(self.path)
                query = parse_qs(u.query)
                hub.requests.append(("POST", u.path, query))
                parts = u.path.strip("/").split("/")
                if u.path == "/api/repos/create":
                    if self._failing("create"):
                        return
                    d = json.loads(self._body())
                    repo = f"{d['organization']}/{d['name']}" if d.get("organization") else d["name"]
                    with hub.lock:
                        if repo in hub.repos:
                            self._send(409, {"error": "You already created this model repo", "url": f"{hub.url}/{repo}"})
                            return
                        hub.repos[repo] = {"main": {".gitattributes": b"*.safetensors filter=lfs\n"}}
                        hub.created = dict(d)
                    self._send(200, {"url": f"{hub.url}/{repo}"})
                    return
                if u.path == "/api/validate-yaml":
                    self._body()
                    self._send(200, {"errors": [], "warnings": []})
                    return
                repo, kind, rev = "/".join(parts[2:4]), parts[4], unquote("/".join(parts[5:]))
                if kind == "branch":
                    self._body()
                    found = self._branch(repo, "main")
                    if found:
                        hub.repos[repo].setdefault(rev, dict(found[1]))
                        self._send(200, {})
                    return
                if kind == "preupload":
                    d = json.loads(self._body())
                    if self._branch(repo, rev):
                        self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                                    "oid": None} for f in d["files"]]})
                    return
                if kind == "commit":
                    if self._failing("commit"):
                        return
                    lines = [json.loads(x) for x in self._body().splitlines() if x.strip()]
                    found = self._branch(repo, rev)
                    if not found:
                        return
                    header = lines[0]["value"]
                    added = {x["value"]["path"]: base64.b64decode(x["value"]["content"])
                             for x in lines if x["key"] == "file"}
                    deleted = [x["value"]["path"] for x in lines if x["key"] == "deletedFile"]
                    create_pr = query.get("create_pr") == ["1"]
                    with hub.lock:
                        files = {k: v for k, v in found[1].items() if k not in deleted} | added
                        hub.commits.append({"repo": repo, "revision": rev, "message": header["summary"],
                                            "files": added, "deleted": deleted, "create_pr": create_pr,
                                            "other": [x["key"] for x in lines[1:] if x["key"] not in ("file", "deletedFile")]})
                        if create_pr:
                            n = sum(c["create_pr"] for c in hub.commits)
                            hub.repos[repo][f"refs/pr/{n}"] = files
                        else:
                            hub.repos[repo][rev] = files
                    sha = _sha(files)
                    self._send(200, {"commitUrl": f"{hub.url}/{repo}/commit/{sha}", "commitOid": sha,
                                     "pullRequestUrl": f"{hub.url}/{repo}/discussions/{n}" if create_pr else None})
                    return
                self._send(404, {"error": f"no route {u.path}"})

        return Handler


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A FakeHub that huggingface_hub talks to; nothing else can be resolved, let alone reached."""
    from huggingface_hub import constants

    server = FakeHub()
    home = tmp_path / "hf_home"
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    # huggingface_hub read these at import time: point them at the test's hub, cache and (absent) token.
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    real = socket.getaddrinfo

    def local_only(host, *a, **k):
        if host not in ("127.0.0.1", "localhost"):
            raise OSError(f"test tried to resolve {host}")
        return real(host, *a, **k)

    monkeypatch.setattr(socket, "getaddrinfo", local_only)
    yield server
    server.close()

