"""A small HTTP/1.1 client on an asyncio Protocol, for the loopback `generate_stream` calls.

Only what talking to Triton's own HTTP endpoint needs: a POST with a Content-Length body, the
response's status and headers, a body framed by chunked transfer encoding, Content-Length or
the connection's end, and a few keep-alive connections per client (an idle one is closed after
`keepalive_s`; 0: a connection per call). Closing a connection before its response ended
(`Connection.close`) is how a request is cancelled in Triton.

    client = HttpClient("localhost", 8000, keepalive_s=2.0)
    connection = await client.post("/v2/models/m/generate_stream", body, {"Content-Type": ...})
    connection.status, connection.headers       # headers by lower-case name
    while piece := await connection.read():     # the body as it arrives (b"" at its end)
        ...
    connection.release()                        # a body read to its end: back to the pool

Failing to connect, a connection lost before its response ended and a malformed response raise
`HttpClientError`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping

_MAX_HEAD = 64 * 1024  # the largest response head (status line and headers) taken
_CONNECT_TIMEOUT_S = 10.0

# Where a connection is in its current response.
_IDLE, _HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(9)


class HttpClientError(Exception):
    """The server could not be reached, the connection was lost, or the response is malformed."""


class Connection(asyncio.Protocol):
    """One connection to the server, serving one response at a time."""

    def __init__(self, client: HttpClient):
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.headers: dict[str, str] = {}
        self._state = _IDLE
        self._raw = b""  # bytes received and not yet parsed (head, chunk framing)
        self._body: list[bytes] = []  # body bytes received and not yet read
        self._left = 0  # bytes left in the current chunk, or of a Content-Length body
        self._reusable = False
        self._error: HttpClientError | None = None
        self._waiter: asyncio.Future | None = None
        self._received = False  # whether any byte of the current response arrived
        self._idle_timer: asyncio.TimerHandle | None = None
        self.closed = False

    # ---- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._received = True
        state = self._state
        if state == _LENGTH:  # the common cases first: no parsing beyond counting
            self._take_length(data)
        elif state == _UNTIL_CLOSE:
            self._body.append(data)
        elif state == _IDLE or state == _DONE:
            # Nothing was asked (or the response ended): the server may not talk now.
            self._fail(HttpClientError("the server sent data outside a response"))
            return
        else:
            self._raw = self._raw + data if self._raw else data
            try:
                if self._state == _HEAD:
                    self._parse_head()
                if self._state in (_CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER):
                    self._parse_chunked()
                elif self._state == _LENGTH and self._raw:
                    raw, self._raw = self._raw, b""
                    self._take_length(raw)
                elif self._state == _UNTIL_CLOSE and self._raw:
                    self._body.append(self._raw)
                    self._raw = b""
            except (ValueError, IndexError, UnicodeDecodeError) as exc:
                self._fail(HttpClientError(f"malformed response: {exc}"))
                return
            if self._state == _DONE and self._raw:
                self._reusable = False  # bytes after the body: do not trust this connection
                self._raw = b""
        self._wake()

    def eof_received(self):
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self.client._forget(self)
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
        elif self._state not in (_IDLE, _DONE) and self._error is None:
            reason = f": {exc}" if exc else ""
            self._error = HttpClientError(f"the server closed the connection before the response ended{reason}")
        self._wake()

    # ---- parsing (on the event loop, from data_received) ----------------------------------
    def _parse_head(self) -> None:
        while self._state == _HEAD:
            end = self._raw.find(b"\r\n\r\n")
            if end < 0:
                if len(self._raw) > _MAX_HEAD:
                    raise ValueError("response head too large")
                return
            head, self._raw = self._raw[:end].decode("latin-1"), self._raw[end + 4:]
            status_line, *lines = head.split("\r\n")
            version, status = status_line.split(" ", 2)[:2]
            if not version.startswith("HTTP/1."):
                raise ValueError(f"not an HTTP/1 response: {status_line!r}")
            headers: dict[str, str] = {}
            for line in lines:
                name, sep, value = line.partition(":")
                if not sep:
                    raise ValueError(f"bad header line {line!r}")
                name = name.strip().lower()
                value = value.strip()
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
            code = int(status)
            if 100 <= code < 200:  # an interim response: the real one follows
                continue
            self.status, self.headers = code, headers
            keep = headers.get("connection", "").lower()
            self._reusable = version == "HTTP/1.1" and "close" not in keep
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._state = _CHUNK_SIZE
            elif "content-length" in headers:
                self._left = int(headers["content-length"])
                self._state = _LENGTH if self._left > 0 else _DONE
            else:
                self._reusable = False
                self._state = _UNTIL_CLOSE

    def _parse_chunked(self) -> None:
        raw, pos, body = self._raw, 0, self._body
        size = len(raw)
        while True:
            state = self._state
            if state == _CHUNK_DATA:
                take = min(self._left, size - pos)
                if take:
                    body.append(raw[pos:pos + take])
                    pos += take
                    self._left -= take
                if self._left:
                    break
                self._state = _CHUNK_END
            elif state == _CHUNK_END:
                if size - pos < 2:
                    break
                if raw[pos:pos + 2] != b"\r\n":
                    raise ValueError("a chunk does not end with CRLF")
                pos += 2
                self._state = _CHUNK_SIZE
            elif state == _CHUNK_SIZE:
                end = raw.find(b"\r\n", pos)
                if end < 0:
                    if size - pos > 1024:
                        raise ValueError("chunk size line too long")
                    break
                self._left = int(raw[pos:end].split(b";", 1)[0].strip(), 16)
                if self._left < 0:
                    raise ValueError("negative chunk size")
                pos = end + 2
                self._state = _CHUNK_DATA if self._left else _TRAILER
            elif state == _TRAILER:  # trailer lines, then the empty line that ends the body
                end = raw.find(b"\r\n", pos)
                if end < 0:
                    if size - pos > _MAX_HEAD:
                        raise ValueError("trailer too large")
                    break
                line_empty = end == pos
                pos = end + 2
                if line_empty:
                    self._state = _DONE
            else:  # _DONE: what follows the body is dealt with by data_received
                break
        self._raw = raw[pos:] if pos < size else b""

    def _take_length(self, data: bytes) -> None:
        if len(data) >= self._left:
            if len(data) > self._left:
                self._reusable = False
            self._body.append(data[:self._left] if len(data) > self._left else data)
            self._left = 0
            self._state = _DONE
        else:
            self._body.append(data)
            self._left -= len(data)

    def _fail(self, error: HttpClientError) -> None:
        if self._error is None:
            self._error = error
        self._reusable = False
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    # ---- one exchange (from the caller's task) -----------------------------------------------
    async def _exchange(self, request: bytes) -> None:
        self._state, self._raw, self._body, self._left = _HEAD, b"", [], 0
        self.status, self.headers, self._received, self._reusable = 0, {}, False, False
        self.transport.write(request)
        while self._state == _HEAD:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def read(self) -> bytes:
        """Body bytes that arrived since the last read (waiting for some); b"" at the body's end."""
        while not self._body:
            if self._error is not None:
                raise self._error
            if self._state == _DONE:
                return b""
            await self._wait()
        body = self._body
        self._body = []
        return body[0] if len(body) == 1 else b"".join(body)

    async def read_all(self) -> bytes:
        """The rest of the body."""
        pieces = []
        while piece := await self.read():
            pieces.append(piece)
        return b"".join(pieces)

    def release(self) -> None:
        """Done with the response: a connection whose body was read to its end goes back to the
        pool, any other is closed."""
        if self._state == _DONE and not self._body and self._reusable and self._error is None and not self.closed:
            self._state = _IDLE
            self.client._keep(self)
        else:
            self.close()

    def close(self) -> None:
        """Closes the connection at once (before its response ended, this cancels the request)."""
        self._reusable = False
        if self._state not in (_IDLE, _DONE) and self._error is None:
            self._error = HttpClientError("the connection was closed before the response ended")
        if not self.closed:
            self.closed = True
            self.client._forget(self)
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
            if self.transport is not None:
                self.transport.close()
        self._wake()


class HttpClient:
    """Requests to one server (`host`, `port`); idle connections are kept `keepalive_s` seconds."""

    def __init__(self, host: str, port: int, keepalive_s: float = 2.0, connect_timeout_s: float = _CONNECT_TIMEOUT_S):
        self.host = host
        self.port = port
        self.keepalive_s = keepalive_s
        self.connect_timeout_s = connect_timeout_s
        self._address: str | None = None  # the host's address once connected (no lookup per connection)
        self._idle: list[Connection] = []  # most recently used last
        self._host_header = f"{host}:{port}"

    def request_bytes(self, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        lines = [f"POST {path} HTTP/1.1", f"Host: {self._host_header}", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + body

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> Connection:
        """Sends the request and waits for the response's status and headers; the caller reads the
        body from the connection it returns, then `release()`s or `close()`s it."""
        request = self.request_bytes(path, body, headers)
        while self._idle:
            connection = self._idle.pop()
            if connection._idle_timer is not None:
                connection._idle_timer.cancel()
                connection._idle_timer = None
            if connection.closed or connection.transport.is_closing():
                continue
            try:
                await connection._exchange(request)
                return connection
            except HttpClientError:
                connection.close()
                if connection._received:
                    raise
                # The server closed this idle connection before it answered: a new one.
            except BaseException:
                connection.close()
                raise
        connection = await self._connect()
        try:
            await connection._exchange(request)
        except BaseException:
            connection.close()
            raise
        return connection

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        host = self._address or self.host
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: Connection(self), host, self.port), self.connect_timeout_s)
        except asyncio.TimeoutError:
            raise HttpClientError(f"connecting to {self.host}:{self.port} timed out") from None
        except OSError as exc:
            self._address = None
            raise HttpClientError(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        if self._address is None:
            peer = connection.transport.get_extra_info("peername")
            sock = connection.transport.get_extra_info("socket")
            if peer and sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                self._address = peer[0]
        return connection

    def _keep(self, connection: Connection) -> None:
        if self.keepalive_s <= 0:
            connection.close()
            return
        self._idle.append(connection)
        connection._idle_timer = asyncio.get_running_loop().call_later(self.keepalive_s, connection.close)

    def _forget(self, connection: Connection) -> None:
        try:
            self._idle.remove(connection)
        except ValueError:
            pass

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def close(self) -> None:
        """Closes the idle connections (those in use close as their callers finish)."""
        for connection in list(self._idle):
            connection.close()
        self._idle.clear()
