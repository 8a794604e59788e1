"""Remote kernel cache: compiled kernel libraries shared between machines through Redis.

Off by default. On with the knob ``kernel_remote_cache`` ($SHAPEJIT_KERNEL_REMOTE_CACHE=1)
AND a secret in $SHAPEJIT_KERNEL_REMOTE_SECRET shared by the machines of the job; the
server is remote PGO's ($TORCHINDUCTOR_REDIS_HOST / _PORT, $SHAPEJIT_REDIS_TIMEOUT).

Why a secret: a kernel library is native code this process dlopens. A content hash stored
beside it on the server only shows that the bytes arrived whole; whoever can write to the
server could store a library of their own under a valid key with a matching hash. So each
entry carries an HMAC-SHA256 under the secret, which the server never sees: a reader loads
only what a holder of the secret stored. Without a secret the cache stays off (one
warning).

The disk cache (native/diskcache.c) asks here on a local miss, before compiling, and hands
each library it compiled over afterwards (the kernel_remote_fetch and kernel_remote_push
policies, registered by __init__.py). Key: ``shapejit-kernel:<disk cache key>``; the
disk key already covers the compiler identity, which includes the resolved -march target
(cpu_target, "native" as this machine resolves it), so a machine never receives a kernel
built for another CPU. Value: ``SJRK1\\0`` + HMAC-SHA256(secret, "shapejit-kernel-remote-1"
NUL key NUL compiler identity NUL payload) + payload length (8 bytes, little-endian) +
payload (the compiler's output). A fetched payload is written to a temp file the disk cache
then seals and verifies as its own before dlopen ever sees it.

Trouble never fails a compile: the server down or silent warns once and turns the remote
cache off for the process; an entry that fails verification (truncated, another format,
a wrong MAC) warns once per key, is ignored, and the kernel is compiled locally (and
stored again, replacing it).
"""
import hashlib
import hmac
import os
import struct
import warnings

from . import pgo_remote

KNOB = "kernel_remote_cache"
SECRET_ENV = "SHAPEJIT_KERNEL_REMOTE_SECRET"
KEY_PREFIX = "shapejit-kernel:"
MAGIC = b"SJRK1\0"
CONTEXT = b"shapejit-kernel-remote-1"
MAX_PAYLOAD = 256 << 20
_HEADER = len(MAGIC) + 32 + 8

stats = {"fetched": 0, "stored": 0, "refused": 0}
_server = None
_warned = set()


class KernelServer(pgo_remote.Server):
    what = "the remote kernel cache"
    fallback = "compiling kernels locally"


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


def _secret():
    """The secret as bytes, or None (the cache is off; warned once)."""
    raw = os.environ.get(SECRET_ENV, "")
    if len(raw) < 16:
        _warn_once(("secret", len(raw) == 0),
                   "shapejit: the remote kernel cache is on (%s) but %s is %s; it stays off "
                   "(the secret, at least 16 characters shared by the machines of the job, "
                   "authenticates the kernels they store)"
                   % (KNOB, SECRET_ENV, "not set" if not raw else "shorter than 16 characters"))
        return None
    return raw.encode("utf-8")


def _server_if_on():
    global _server
    from . import _C
    if not _C.config_get(KNOB):
        return None, None
    secret = _secret()
    if secret is None:
        return None, None
    if _server is None:
        _server = KernelServer()
    if _server.down:
        return None, None
    return _server, secret


def _mac(secret, key, ident, payload):
    h = hmac.new(secret, digestmod=hashlib.sha256)
    for part in (CONTEXT, key.encode("ascii"), ident.encode("utf-8")):
        h.update(part)
        h.update(b"\0")
    h.update(payload)
    return h.digest()


def pack(secret, key, ident, payload):
    """The server value of one kernel."""
    return MAGIC + _mac(secret, key, ident, payload) + struct.pack("<Q", len(payload)) + payload


def unpack(secret, key, ident, value):
    """The payload of a server value, or raises ValueError saying what is wrong."""
    if not isinstance(value, bytes):
        raise ValueError("the value is a %s, not bytes" % type(value).__name__)
    if len(value) < _HEADER or not value.startswith(MAGIC):
        raise ValueError("it is not a shapejit kernel entry (%d bytes, no SJRK1 header)"
                         % len(value))
    mac = value[len(MAGIC):len(MAGIC) + 32]
    (length,) = struct.unpack("<Q", value[len(MAGIC) + 32:_HEADER])
    payload = value[_HEADER:]
    if length != len(payload):
        raise ValueError("its length is wrong (%d bytes, the header says %d; truncated?)"
                         % (len(payload), length))
    if not hmac.compare_digest(mac, _mac(secret, key, ident, payload)):
        raise ValueError("its MAC does not verify (stored with another secret, for another "
                         "key or compiler, or altered)")
    return payload


def fetch(key, ident, dest):
    """Called by the disk cache on a local miss: True when the verified payload of ``key``
    was written to ``dest`` (a temp file of the disk cache); False otherwise. Never
    raises (except interrupts)."""
    server, secret = _server_if_on()
    if server is None:
        return False
    try:
        value = server._conn().get(KEY_PREFIX + key)
    except Exception as e:  # anything the client or server does: warn, compile locally
        server._fail("reading", e)
        return False
    if value is None:
        return False
    try:
        if isinstance(value, bytes) and len(value) > MAX_PAYLOAD + _HEADER:
            raise ValueError("it has %d bytes (at most %d expected)" % (len(value), MAX_PAYLOAD))
        payload = unpack(secret, key, ident, value)
    except ValueError as e:
        stats["refused"] += 1
        _warn_once(("entry", key), "shapejit: ignoring the remote kernel %s%s of %s: %s; "
                   "compiling it here" % (KEY_PREFIX, key, server.where(), e))
        return False
    try:
        with open(dest, "wb") as f:
            f.write(payload)
    except OSError as e:
        _warn_once(("write", dest), "shapejit: cannot write the remote kernel to %s: %s"
                   % (dest, e))
        return False
    stats["fetched"] += 1
    return True


def push(key, ident, path, length):
    """Called by the disk cache after it compiled ``key``: stores the first ``length``
    bytes of ``path`` (the compiler's output) on the server. Never raises (except
    interrupts)."""
    server, secret = _server_if_on()
    if server is None or not 0 < length <= MAX_PAYLOAD:
        return
    try:
        with open(path, "rb") as f:
            payload = f.read(length)
    except OSError as e:
        _warn_once(("read", path), "shapejit: cannot read the kernel %s to store it remotely: %s"
                   % (path, e))
        return
    if len(payload) != length:
        return
    try:
        server._conn().set(KEY_PREFIX + key, pack(secret, key, ident, payload))
    except Exception as e:  # anything the client or server does: warn, compile locally
        server._fail("writing", e)
        return
    stats["stored"] += 1


def _reset():
    """Forget the server, the warnings and the counters (tests)."""
    global _server
    _server = None
    _warned.clear()
    for k in stats:
        stats[k] = 0
