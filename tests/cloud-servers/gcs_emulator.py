"""gcp-storage-emulator (PyPI) with the object calls of GCS's XML API that
the Rust `object_store` crate makes, for the cloud store tests.

gcp-storage-emulator serves the JSON API well (buckets, listing, uploads)
but its XML API stops at a bare GET and PUT: no ETag or Last-Modified on
GET (object_store refuses a GET without them), no HEAD, no If-Match, no
ETag on PUT, no XML listing (GET /<bucket>?list-type=2) and no XML
multipart upload (POST ?uploads, PUT ?partNumber, POST ?uploadId, DELETE
?uploadId). This wrapper answers those calls for `/<bucket>` and
`/<bucket>/<object>` paths from the emulator's own storage (objects
written either way are the same objects) and leaves every other path to
the emulator. A ranged GET costs no copy or hash of the whole object (the
ETag comes from the MD5 stored when the object was written), as on GCS.

    python gcs_emulator.py --port PORT [--bucket NAME]...

prints "ready <port>" once it accepts connections and serves until killed.
GET /_tzr/uploads answers the number of multipart uploads in progress.
"""

from __future__ import annotations

import argparse
import base64
import email.utils
import hashlib
import re
import sys
import threading
import uuid
from datetime import datetime, timezone
from functools import partial
from http import HTTPStatus, server
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

from gcp_storage_emulator import server as gse
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import buckets, objects

XML_OBJECT = re.compile(r"^/(?P<bucket>[-.\w]+)/(?P<object>.*[^/])$")
XML_BUCKET = re.compile(r"^/(?P<bucket>[-.\w]+)/?$")
NOT_XML = ("/storage/", "/upload/", "/download/", "/batch/", "/b/", "/_tzr/")


class Uploads:
    """Multipart uploads in progress: id -> (bucket, object, {part: bytes})."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[str, tuple[str, str, dict[int, bytes]]] = {}


class Handler(gse.RequestHandler):
    protocol_version = "HTTP/1.1"

    def __init__(self, storage, uploads: Uploads, *args, **kwargs):
        self.uploads = uploads
        super().__init__(storage, *args, **kwargs)

    # Dispatch: XML object paths here, the rest to the emulator.

    def _target(self):
        parts = urlsplit(self.path)
        if parts.path.startswith(NOT_XML):
            return None
        match = XML_OBJECT.fullmatch(parts.path)
        if not match:
            return None
        query = parse_qs(parts.query, keep_blank_values=True)
        return unquote(match["bucket"]), unquote(match["object"]), query

    def do_HEAD(self):
        target = self._target()
        if target is None:
            return self._reply(HTTPStatus.NOT_IMPLEMENTED)
        self._get(*target, head=True)

    def do_GET(self):
        if urlsplit(self.path).path == "/_tzr/uploads":
            with self.uploads.lock:
                return self._reply(HTTPStatus.OK, str(len(self.uploads.open)).encode())
        parts = urlsplit(self.path)
        bucket = XML_BUCKET.fullmatch(parts.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        if bucket and "list-type" in query:
            return self._list(unquote(bucket["bucket"]), query)
        target = self._target()
        if target is None:
            return super().do_GET()
        self._get(*target, head=False)

    def do_PUT(self):
        target = self._target()
        if target is None:
            return super().do_PUT()
        bucket, name, query = target
        data = self._body()
        if "uploadId" in query:
            with self.uploads.lock:
                upload = self.uploads.open.get(query["uploadId"][0])
                if upload is None:
                    return self._reply(HTTPStatus.NOT_FOUND, b"<Error><Code>NoSuchUpload</Code></Error>")
                upload[2][int(query["partNumber"][0])] = data
            return self._reply(HTTPStatus.OK, headers={"ETag": _etag(data)})
        self._store(bucket, name, data, self.headers.get("Content-Type", "application/octet-stream"))

    def do_POST(self):
        target = self._target()
        if target is None:
            return super().do_POST()
        bucket, name, query = target
        body = self._body()
        if "uploads" in query:
            upload_id = uuid.uuid4().hex
            with self.uploads.lock:
                self.uploads.open[upload_id] = (bucket, name, {})
            xml = (
                "<InitiateMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key>"
                "<UploadId>{}</UploadId></InitiateMultipartUploadResult>"
            ).format(bucket, name, upload_id)
            return self._reply(HTTPStatus.OK, xml.encode(), {"Content-Type": "application/xml"})
        if "uploadId" in query:
            with self.uploads.lock:
                upload = self.uploads.open.pop(query["uploadId"][0], None)
            if upload is None:
                return self._reply(HTTPStatus.NOT_FOUND, b"<Error><Code>NoSuchUpload</Code></Error>")
            numbers = [int(n) for n in re.findall(rb"<PartNumber>\s*(\d+)\s*</PartNumber>", body)]
            if any(n not in upload[2] for n in numbers):
                return self._reply(HTTPStatus.BAD_REQUEST, b"<Error><Code>InvalidPart</Code></Error>")
            data = b"".join(upload[2][n] for n in numbers)
            etag = self._save(bucket, name, data, "application/octet-stream")
            if etag is None:
                return self._reply(HTTPStatus.NOT_FOUND)
            xml = (
                "<CompleteMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key>"
                "<ETag>{}</ETag></CompleteMultipartUploadResult>"
            ).format(bucket, name, etag)
            return self._reply(HTTPStatus.OK, xml.encode(), {"Content-Type": "application/xml"})
        self._reply(HTTPStatus.NOT_IMPLEMENTED)

    def do_DELETE(self):
        target = self._target()
        if target is None:
            return super().do_DELETE()
        bucket, name, query = target
        self._body()
        if "uploadId" in query:
            with self.uploads.lock:
                self.uploads.open.pop(query["uploadId"][0], None)
            return self._reply(HTTPStatus.NO_CONTENT)
        try:
            self.storage.delete_file(bucket, name)
        except NotFound:
            return self._reply(HTTPStatus.NOT_FOUND)
        self._reply(HTTPStatus.NO_CONTENT)

    # The XML object calls.

    def _get(self, bucket, name, query, head):
        try:
            obj = self.storage.get_file_obj(bucket, name)
            data = self.storage.get_file(bucket, name)
        except NotFound:
            return self._reply(HTTPStatus.NOT_FOUND, b"<Error><Code>NoSuchKey</Code></Error>")
        etag = _stored_etag(obj) or _etag(data)
        wanted = self.headers.get("If-Match")
        if wanted and wanted.strip() != "*" and etag not in [t.strip() for t in wanted.split(",")]:
            return self._reply(HTTPStatus.PRECONDITION_FAILED, b"<Error><Code>PreconditionFailed</Code></Error>")
        headers = {
            "ETag": etag,
            "Last-Modified": _http_date(obj.get("updated")),
            "Accept-Ranges": "bytes",
            "Content-Type": obj.get("contentType") or "application/octet-stream",
            "x-goog-generation": str(obj.get("generation", "1")),
        }
        status = HTTPStatus.OK
        ranged = re.fullmatch(r"\s*bytes=(\d+)-(\d*)\s*", self.headers.get("Range", "") or "")
        if ranged:
            start = int(ranged[1])
            end = min(len(data), int(ranged[2]) + 1) if ranged[2] else len(data)
            if start >= len(data) or start >= end:
                headers = {"Content-Range": "bytes */{}".format(len(data))}
                return self._reply(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, b"", headers)
            headers["Content-Range"] = "bytes {}-{}/{}".format(start, end - 1, len(data))
            # A view: a range costs no copy of the object.
            data = memoryview(data)[start:end]
            status = HTTPStatus.PARTIAL_CONTENT
        self._reply(status, data, headers, head=head)

    def _list(self, bucket, query):
        """ListObjectsV2 in one page: the objects under `prefix`, those past
        a `delimiter` grouped as common prefixes."""
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        try:
            objs, prefixes = self.storage.get_file_list(bucket, prefix or None, delimiter or None)
        except NotFound:
            return self._reply(HTTPStatus.NOT_FOUND, b"<Error><Code>NoSuchBucket</Code></Error>")
        rows = [
            "<Contents><Key>{}</Key><Size>{}</Size><LastModified>{}</LastModified><ETag>{}</ETag></Contents>".format(
                escape(o["name"]), o.get("size", 0), o.get("updated"), escape(_stored_etag(o) or '""')
            )
            for o in objs
        ]
        rows += ["<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>".format(escape(p)) for p in prefixes]
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{}</Name><Prefix>{}</Prefix>'
            "<KeyCount>{}</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>{}</ListBucketResult>"
        ).format(escape(bucket), escape(prefix), len(rows), "".join(rows))
        self._reply(HTTPStatus.OK, body.encode(), {"Content-Type": "application/xml"})

    def _store(self, bucket, name, data, content_type):
        etag = self._save(bucket, name, data, content_type)
        if etag is None:
            return self._reply(HTTPStatus.NOT_FOUND, b"<Error><Code>NoSuchBucket</Code></Error>")
        self._reply(HTTPStatus.OK, headers={"ETag": etag, "x-goog-generation": "1"})

    def _save(self, bucket, name, data, content_type):
        base = "http://{}".format(self.headers.get("Host", "127.0.0.1"))
        obj = objects._make_object_resource(base, bucket, name, content_type, str(len(data)))
        try:
            obj = objects._checksums(data, obj)
            self.storage.create_file(bucket, name, data, obj)
        except NotFound:
            return None
        return _etag(data)

    # HTTP plumbing.

    def _body(self) -> bytes:
        if self.headers.get("Content-Length") is None and not self.headers.get("Transfer-Encoding"):
            return b""
        return gse._read_raw_data(self) or b""

    def _reply(self, status, body=b"", headers=None, head=False):
        self.send_response(status.value, status.phrase)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)


def _etag(data: bytes) -> str:
    return '"{}"'.format(hashlib.md5(data).hexdigest())


def _stored_etag(obj) -> str | None:
    """The ETag `_etag` gives, from the MD5 the emulator stored with the
    object when it was written: GETs then cost no hash of the whole object
    (which made every request, a 1-byte range too, cost ~150 ms on a
    128 MiB object, unlike GCS)."""
    try:
        return '"{}"'.format(base64.b64decode(obj["md5Hash"]).hex())
    except (KeyError, TypeError, ValueError):
        return None


def _http_date(updated) -> str:
    try:
        when = datetime.strptime(updated, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        when = datetime.now(timezone.utc)
    return email.utils.format_datetime(when, usegmt=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", action="append", default=[])
    args = parser.parse_args()
    storage = gse.Storage(use_memory_fs=True)
    for name in args.bucket:
        buckets.create_bucket(name, storage)
    httpd = server.ThreadingHTTPServer((args.host, args.port), partial(Handler, storage, Uploads()))
    httpd.daemon_threads = True
    print("ready", httpd.server_address[1], flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
