"""Creates a container on Azurite (object_store cannot create containers).

    python azurite_container.py http://127.0.0.1:PORT CONTAINER

Signs the request with Shared Key for Azurite's well-known development
account (devstoreaccount1, a public key documented by Microsoft). The
container allows anonymous reads (so that curl can fetch blobs in the
benchmarks). Exits 0 when the container exists afterwards.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import sys
import urllib.error
import urllib.request

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
VERSION = "2021-08-06"


def main() -> int:
    endpoint, container = sys.argv[1].rstrip("/"), sys.argv[2]
    date = email.utils.formatdate(usegmt=True)
    # Path-style URL: the account is the first path segment, and part of
    # the canonicalized resource too.
    resource = "/{0}/{0}/{1}\nrestype:container".format(ACCOUNT, container)
    headers = "x-ms-blob-public-access:container\nx-ms-date:{}\nx-ms-version:{}\n".format(date, VERSION)
    to_sign = "PUT\n\n\n\n\n\n\n\n\n\n\n\n" + headers + resource
    mac = hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()
    request = urllib.request.Request(
        "{}/{}/{}?restype=container".format(endpoint, ACCOUNT, container),
        method="PUT",
        headers={
            "Content-Length": "0",
            "x-ms-blob-public-access": "container",
            "x-ms-date": date,
            "x-ms-version": VERSION,
            "Authorization": "SharedKey {}:{}".format(ACCOUNT, base64.b64encode(mac).decode()),
        },
    )
    try:
        urllib.request.urlopen(request, timeout=30).read()
    except urllib.error.HTTPError as e:
        if e.code != 409:  # 409: it exists already
            print(e.code, e.read().decode(errors="replace"), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
