"""A small Hugging Face Hub on 127.0.0.1: the endpoints huggingface_hub calls to create a
repository and upload a folder through the LFS protocol, for tests (HF_ENDPOINT).

Endpoints (as huggingface_hub 1.x calls them; Xet storage is not implemented, so
clients run with HF_HUB_DISABLE_XET=1):

- ``POST /api/repos/create``: ``{name, organization, visibility, type}``; 409 if it exists
- ``POST /api/validate-yaml``: the README's front matter (checked before a commit)
- ``GET /api/models/{ns}/{name}``: repository info (create_repo's fallback on 401/403)
- ``POST /api/models/{ns}/{name}/preupload/{rev}``: upload mode per file (lfs | regular)
- ``POST /{ns}/{name}.git/info/lfs/objects/batch``: LFS batch; one upload URL per new object
- ``PUT /lfs-upload/{oid}?key=``: the object's bytes (checked against its sha256)
- ``POST /lfs-verify``: the object arrived
- ``POST /api/models/{ns}/{name}/commit/{rev}``: NDJSON commit (header, file, lfsFile), applied
  all at once or not at all

Tokens map to user names; a user writes to its own namespace and its organizations'.
`fail(method, pattern, status, times)` makes the next matching requests fail.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

TOKEN = "hf_studioTestToken0123456789abcdef"  # a token the tests' local Hub knows
LFS_SUFFIXES = (".safetensors", ".bin", ".png", ".zip", ".pt")
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"


@dataclass
class Repo:
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)  # summaries, oldest first
    head: str = "0" * 40


@dataclass
class Failure:
    method: str
    pattern: re.Pattern
    status: int
    times: int


class LocalHub:
    def __init__(self, users: dict[str, str], orgs: dict[str, set[str]] | None = None):
        self.users = users  # token -> user name
        self.orgs = orgs or {}  # user name -> organizations it may write to
        self.repos: dict[str, Repo] = {}
        self.objects: dict[str, bytes] = {}  # LFS store, by sha256
        self.upload_keys: dict[str, str] = {}  # oid -> one-time upload key
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self.tokens_seen: set[str] = set()
        self._failures: list[Failure] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, method: str, pattern: str, status: int, times: int = 1) -> None:
        """The next `times` requests `method` whose path matches `pattern` answer `status`."""
        self._failures.append(Failure(method, re.compile(pattern), status, times))

    def _injected(self, method: str, path: str) -> int | None:
        with self._lock:
            for failure in self._failures:
                if failure.times > 0 and failure.method == method and failure.pattern.search(path):
                    failure.times -= 1
                    return failure.status
        return None

    def may_write(self, user: str, namespace: str) -> bool:
        return namespace == user or namespace in self.orgs.get(user, set())

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            # --- plumbing -----------------------------------------------------------

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            self.rfile.readline()
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _send(self, status: int, payload: object = None, headers: dict | None = None):
                body = json.dumps(payload if payload is not None else {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)
                hub.requests.append((self.command, self.path, status))

            def _error(self, status: int, message: str, code: str | None = None):
                headers = {"X-Error-Message": message}
                if code:
                    headers["X-Error-Code"] = code
                self._send(status, {"error": message}, headers)

            def _user(self) -> str | None:
                """The token's user, or None after answering 401."""
                auth = self.headers.get("Authorization", "")
                token = auth[7:] if auth.startswith("Bearer ") else None
                if token:
                    hub.tokens_seen.add(token)
                if token not in hub.users:
                    self._error(401, INVALID_CREDENTIALS)
                    return None
                return hub.users[token]

            def _repo(self, repo_id: str, user: str, write: bool = True) -> Repo | None:
                repo = hub.repos.get(repo_id)
                if repo is None or (repo.private and not hub.may_write(user, repo_id.split("/")[0])):
                    self._error(404, "Repository not found", "RepoNotFound")
                    return None
                if write and not hub.may_write(user, repo_id.split("/")[0]):
                    self._error(403, f"You don't have the rights to write to {repo_id}")
                    return None
                return repo

            def _dispatch(self, routes) -> None:
                body = self._body()
                path = self.path.split("?")[0]
                status = hub._injected(self.command, path)
                if status is not None:
                    self._error(status, f"injected failure {status}")
                    return
                for pattern, handler in routes:
                    match = re.fullmatch(pattern, path)
                    if match:
                        handler(body, *match.groups())
                        return
                self._error(404, f"no route for {self.command} {path}")

            def do_GET(self) -> None:
                self._dispatch([(r"/api/models/([^/]+/[^/]+)(?:/revision/[^/]+)?", self.repo_info)])

            def do_POST(self) -> None:
                self._dispatch([
                    (r"/api/repos/create", self.create_repo),
                    (r"/api/validate-yaml", self.validate_yaml),
                    (r"/api/models/([^/]+/[^/]+)/preupload/([^/]+)", self.preupload),
                    (r"/api/models/([^/]+/[^/]+)/commit/([^/]+)", self.commit),
                    (r"/([^/]+/[^/]+)\.git/info/lfs/objects/batch", self.lfs_batch),
                    (r"/lfs-verify", self.lfs_verify),
                ])

            def do_PUT(self) -> None:
                self._dispatch([(r"/lfs-upload/([0-9a-f]{64})", self.lfs_upload)])

            # --- endpoints ------------------------------------------------------------

            def create_repo(self, body: bytes) -> None:
                user = self._user()
                if user is None:
                    return
                request = json.loads(body)
                namespace = request.get("organization") or user
                repo_id = f"{namespace}/{request['name']}"
                if not hub.may_write(user, namespace):
                    self._error(403, f'You don\'t have the rights to create a model under the '
                                     f'namespace "{namespace}"')
                    return
                url = f"{hub.url}/{repo_id}"
                if repo_id in hub.repos:
                    self._send(409, {"error": "You already created this model repo", "url": url})
                    return
                hub.repos[repo_id] = Repo(private=request.get("visibility") == "private")
                self._send(200, {"url": url, "name": repo_id})

            def validate_yaml(self, body: bytes) -> None:
                """The model card's front matter must be a YAML mapping with list tags."""
                content = json.loads(body)["content"]
                errors = []
                try:
                    meta = yaml.safe_load(content.split("---")[1]) \
                        if content.startswith("---") else {}
                    if not isinstance(meta, dict) or not isinstance(meta.get("tags", []), list):
                        errors.append({"message": "metadata must be a mapping; tags a list"})
                except yaml.YAMLError as exc:
                    errors.append({"message": f"invalid YAML: {exc}"})
                self._send(400 if errors else 200, {"errors": errors, "warnings": []})

            def repo_info(self, _body: bytes, repo_id: str) -> None:
                user = self._user()
                repo = user and self._repo(repo_id, user, write=False)
                if repo:
                    self._send(200, {"id": repo_id, "private": repo.private, "sha": repo.head})

            def preupload(self, body: bytes, repo_id: str, _revision: str) -> None:
                user = self._user()
                repo = user and self._repo(repo_id, user)
                if not repo:
                    return
                files = [{"path": f["path"], "shouldIgnore": False, "oid": None,
                          "uploadMode": "lfs" if f["path"].endswith(LFS_SUFFIXES)
                          or f["size"] >= 10_000_000 else "regular"}
                         for f in json.loads(body)["files"]]
                self._send(200, {"files": files, "commitOid": repo.head})

            def lfs_batch(self, body: bytes, repo_id: str) -> None:
                user = self._user()
                if not (user and self._repo(repo_id, user)):
                    return
                objects = []
                for obj in json.loads(body)["objects"]:
                    entry = {"oid": obj["oid"], "size": obj["size"]}
                    if obj["oid"] not in hub.objects:
                        key = hub.upload_keys.setdefault(obj["oid"], secrets.token_hex(8))
                        entry["actions"] = {
                            "upload": {"href": f"{hub.url}/lfs-upload/{obj['oid']}?key={key}"},
                            "verify": {"href": f"{hub.url}/lfs-verify"}}
                    objects.append(entry)
                self._send(200, {"transfer": "basic", "objects": objects})

            def lfs_upload(self, body: bytes, oid: str) -> None:
                key = self.path.partition("key=")[2]
                if hub.upload_keys.get(oid) != key:
                    self._error(403, "bad upload key")
                elif hashlib.sha256(body).hexdigest() != oid:
                    self._error(400, "the content does not match its sha256")
                else:
                    hub.objects[oid] = body
                    self._send(200)

            def lfs_verify(self, body: bytes) -> None:
                if self._user() is None:
                    return
                request = json.loads(body)
                stored = hub.objects.get(request["oid"])
                if stored is None or len(stored) != request["size"]:
                    self._error(404, "object not uploaded")
                else:
                    self._send(200)

            def commit(self, body: bytes, repo_id: str, _revision: str) -> None:
                user = self._user()
                repo = user and self._repo(repo_id, user)
                if not repo:
                    return
                files, summary = dict(repo.files), ""
                for line in body.splitlines():
                    item = json.loads(line)
                    value = item["value"]
                    if item["key"] == "header":
                        summary = value["summary"]
                    elif item["key"] == "file":
                        files[value["path"]] = base64.b64decode(value["content"])
                    elif item["key"] == "lfsFile":
                        if value["oid"] not in hub.objects:
                            self._error(422, f"LFS object of {value['path']} was not uploaded")
                            return
                        files[value["path"]] = hub.objects[value["oid"]]
                    else:
                        self._error(400, f"unsupported commit operation {item['key']}")
                        return
                oid = hashlib.sha1(json.dumps(sorted((p, hashlib.sha256(b).hexdigest())
                                                     for p, b in files.items())).encode()
                                   + repo.head.encode()).hexdigest()
                repo.files, repo.head = files, oid
                repo.commits.append(summary)
                self._send(200, {"commitUrl": f"{hub.url}/{repo_id}/commit/{oid}",
                                 "commitOid": oid, "pullRequestUrl": None})

        return Handler
