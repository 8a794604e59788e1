"""Remote PGO: a job's automatic-dynamic profile in a Redis server that machines share.

Why: a job restarted on another machine has no local profile file, so it would pay every
automatic-dynamic recompile again. With the profile in a server every attempt of the job
starts from what the previous ones learned.

On with ``TORCH_COMPILE_JOB_ID`` and ``TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO=1`` (knob
``automatic_dynamic_remote_pgo``). The server is torch's: ``TORCHINDUCTOR_REDIS_HOST``
(default localhost) and ``TORCHINDUCTOR_REDIS_PORT`` (default 6379); torch's
``TORCHINDUCTOR_REDIS_URL`` is not read. ``SHAPEJIT_REDIS_TIMEOUT`` (seconds, default 2)
bounds connecting and each reply, so a server that hangs costs at most about twice that,
once per process. The ``redis`` client is imported only when this is on.

Layout: one Redis hash per job, key ``shapejit-pgo:<job id>`` (the job id made safe as for
the local file); one field per code object, the JSON array ``[file hash, first line, name,
closure]`` (shapejit.pgo's code key); its value the JSON object ``{"format": "shapejit-pgo",
"version": 2, "job_id": <job id>, "code": <the code's record as in the local file>}``.
Plain data only: every value is validated before use; nothing is unpickled or executed.
A record merges with the server's entry under WATCH/MULTI (a join, as for the local file),
so concurrent attempts lose nothing.

Trouble never reaches the user's program: the server down or silent, the client missing,
an error reply (the key holding another type), a reply that is not Redis give one warning,
and the remote profile is off for the rest of the process (compiles use the local one). A
bad entry (not JSON, truncated, another format, version or job, a field that does not match
its content) gives one warning naming it, is ignored, and is replaced at the next record
of that code.
"""
import json
import logging
import os
import socket
import threading
import time
import warnings

from . import pgo

HOST_ENV = "TORCHINDUCTOR_REDIS_HOST"
PORT_ENV = "TORCHINDUCTOR_REDIS_PORT"
TIMEOUT_ENV = "SHAPEJIT_REDIS_TIMEOUT"
DEFAULT_HOST = "localhost"
DEFAULT_PORT = 6379
DEFAULT_TIMEOUT_S = 2.0
KEY_PREFIX = "shapejit-pgo:"
MAX_ENTRY_BYTES = 1 << 22    # one code's profile is a few hundred bytes; more is not ours
WATCH_ATTEMPTS = 5

_log = logging.getLogger("shapejit.dynamic")


class _Unavailable(Exception):
    """The remote store cannot be used (the message says why)."""


def _settings():
    """(host, port, timeout, problems): the server from the environment; a malformed value
    is a problem (port: remote off; timeout: the default is used)."""
    problems = []
    host = os.environ.get(HOST_ENV) or DEFAULT_HOST
    raw = os.environ.get(PORT_ENV)
    port = DEFAULT_PORT
    if raw:
        try:
            port = int(raw)
            if not 0 < port < 65536:
                raise ValueError
        except ValueError:
            port = None
            problems.append("%s=%r is not a port number (1-65535)" % (PORT_ENV, raw))
    timeout = DEFAULT_TIMEOUT_S
    raw = os.environ.get(TIMEOUT_ENV)
    if raw:
        try:
            timeout = float(raw)
            if not 0 < timeout <= 600:
                raise ValueError
        except ValueError:
            timeout = DEFAULT_TIMEOUT_S
            warnings.warn("shapejit: %s=%r is not a number of seconds in (0, 600]; using %g"
                          % (TIMEOUT_ENV, raw, DEFAULT_TIMEOUT_S), UserWarning, stacklevel=4)
    return host, port, timeout, problems


class Server:
    """A Redis server named by the environment, used by one feature of this process; the
    first failure warns once and turns the feature off for the rest of the process."""

    what = "remote PGO"
    fallback = "compiling with the local profile only"

    def __init__(self):
        self.host, self.port, self.timeout, problems = _settings()
        self.down = None        # why the server is not used, once it is not
        self._client = None
        if problems:
            self._off("; ".join(problems))

    def where(self):
        return "redis %s:%s" % (self.host, self.port)

    def _off(self, why):
        self.down = why
        warnings.warn("shapejit: %s (%s): %s; %s (%s is off for the rest of this process)"
                      % (self.what, self.where(), why, self.fallback, self.what),
                      UserWarning, stacklevel=4)

    def _fail(self, doing, e):
        self._off("%s failed: %s" % (doing, self._explain(e)))

    def _explain(self, e):
        if isinstance(e, _Unavailable):
            return str(e)
        try:
            from redis import exceptions as rx
            timeout = (rx.TimeoutError,)
            refused = (rx.ConnectionError,)
        except ImportError:
            timeout, refused = (), ()
        if isinstance(e, timeout + (socket.timeout, TimeoutError)):
            return "no answer within %gs (%s; %s)" % (self.timeout, e, TIMEOUT_ENV)
        if isinstance(e, refused + (ConnectionError,)):
            return "cannot reach the server (%s)" % e
        return "unexpected reply (%s: %s)" % (type(e).__name__, e)

    def _resolve(self):
        """Looks the host up under the timeout: the socket timeouts do not cover name
        resolution, and a resolver that never answers must not hang the compile."""
        result = {}

        def run():
            try:
                result["ok"] = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError) as e:
                result["error"] = e

        t = threading.Thread(target=run, name="shapejit-redis-resolve", daemon=True)
        t.start()
        t.join(self.timeout)
        if t.is_alive():
            raise _Unavailable("resolving the host %r took more than %gs (%s)"
                               % (self.host, self.timeout, TIMEOUT_ENV))
        if "error" in result:
            raise _Unavailable("cannot resolve the host %r (%s)" % (self.host, result["error"]))

    def _conn(self):
        if self._client is None:
            try:
                import redis
                from redis.backoff import NoBackoff
                from redis.retry import Retry
            except ImportError as e:
                raise _Unavailable("the redis client is not installed (pip install "
                                   "redis==8.1.0): %s" % e) from None
            self._resolve()
            # no retries: a server that does not answer costs one timeout, not several
            self._client = redis.Redis(
                host=self.host, port=self.port, socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout, retry=Retry(NoBackoff(), 0),
                protocol=2, driver_info=None, health_check_interval=0)
        return self._client


class Remote(Server):
    """One job's profile on the server, as this process uses it."""

    def __init__(self, job):
        self.job = job
        self.key = KEY_PREFIX + pgo.safe_job(job)
        self.loaded = False
        self.known = {}         # {code key: state} as last read from or written to the server
        self._warned = set()
        super().__init__()

    def where(self):
        return "%s key %r" % (super().where(), self.key)

    def _bad_entry(self, field, problem):
        name = field.decode("utf-8", "replace") if isinstance(field, bytes) else str(field)
        if name not in self._warned:
            self._warned.add(name)
            warnings.warn("shapejit: ignoring the remote PGO entry %s of %s: %s; it is replaced "
                          "at the next record of that code" % (name[:200], self.where(), problem),
                          UserWarning, stacklevel=4)

    def parse(self, field, value):
        """(code key, file, state) of one hash field and its value; pgo._Corrupt if either
        is not a valid entry of this job."""
        try:
            key = json.loads(field.decode("utf-8") if isinstance(field, bytes) else field)
        except (ValueError, RecursionError, AttributeError):
            raise pgo._Corrupt("the field is not JSON") from None
        if not (isinstance(key, list) and len(key) == 4 and isinstance(key[0], str)
                and type(key[1]) is int and key[1] >= 0 and isinstance(key[2], str)
                and (key[3] is None or isinstance(key[3], str))):
            raise pgo._Corrupt("the field is not [file hash, line, name, closure]")
        if not isinstance(value, bytes):
            raise pgo._Corrupt("the value is a %s, not bytes" % type(value).__name__)
        if len(value) > MAX_ENTRY_BYTES:
            raise pgo._Corrupt("the value has %d bytes (at most %d expected)"
                               % (len(value), MAX_ENTRY_BYTES))
        try:
            doc = json.loads(value.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # JSON and UTF-8 errors (truncated, binary)
            raise pgo._Corrupt("not valid JSON (%s)" % e) from None
        pgo._check_header(doc, self.job, versions=(pgo.VERSION,))
        if set(doc) != {"format", "version", "job_id", "code"}:
            raise pgo._Corrupt("top-level keys are %s" % sorted(doc))
        code_key, file, state = pgo.check_code(doc["code"], "code")
        if list(code_key) != key:
            raise pgo._Corrupt("its code %r does not match its field" % (list(code_key),))
        return code_key, file, state

    def load(self):
        """{code key: (file, state)} on the server for this job ({} when off or failing)."""
        self.loaded = True
        if self.down:
            return {}
        t0 = time.monotonic()
        try:
            raw = self._conn().hgetall(self.key)
            if not isinstance(raw, dict):
                raise _Unavailable("HGETALL answered a %s" % type(raw).__name__)
        except Exception as e:  # anything the client or server does: warn, compile locally
            self._fail("reading", e)
            return {}
        out = {}
        for field, value in raw.items():
            try:
                code_key, file, state = self.parse(field, value)
            except pgo._Corrupt as e:
                self._bad_entry(field, e)
                continue
            out[code_key] = (file, state)
            self.known[code_key] = state
        _log.info("get_remote_code_state %s: %s, %d entries (%.3fs)", self.where(),
                  "hit" if out else "miss", len(out), time.monotonic() - t0)
        return out

    def put(self, code_key, file, state):
        """Merge ``state`` into the server's entry for that code, when it adds something to
        what the server had. The merged state, or None (nothing written, or trouble)."""
        if self.down or self.known.get(code_key) == state:
            return None
        field = json.dumps(list(code_key)).encode("utf-8")
        try:
            client = self._conn()
            from redis.exceptions import WatchError
            for _ in range(WATCH_ATTEMPTS):
                with client.pipeline() as pipe:
                    try:
                        pipe.watch(self.key)
                        old = pipe.hget(self.key, field)
                        merged, before = state, None
                        if old is not None:
                            try:
                                before = self.parse(field, old)[2]
                                merged = pgo._merge_state(before, state)
                            except pgo._Corrupt as e:
                                self._bad_entry(field, e)
                        if merged == before:
                            pipe.unwatch()
                            self.known[code_key] = merged
                            return merged
                        entry = {"format": pgo.FORMAT, "version": pgo.VERSION,
                                 "job_id": self.job,
                                 "code": pgo.code_record(code_key, file, merged)}
                        pipe.multi()
                        pipe.hset(self.key, field, json.dumps(entry, sort_keys=True))
                        pipe.execute()
                    except WatchError:   # another process wrote the key meanwhile: redo
                        continue
                self.known[code_key] = merged
                _log.info("put_remote_code_state_: wrote %s field %s, %d sources",
                          self.where(), field.decode("utf-8"), len(merged))
                return merged
            raise _Unavailable("the key changed under %d attempts in a row" % WATCH_ATTEMPTS)
        except Exception as e:  # anything the client or server does: warn, compile locally
            self._fail("writing", e)
            return None
