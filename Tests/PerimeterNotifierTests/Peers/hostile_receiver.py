#!/usr/bin/env python3
"""A hostile webhook receiver for the notifier's tests (a test peer, not part of the product).

A raw socket server: it reads a request's head and body, then answers according to the first
path segment, the way a broken or malicious receiver might:

  /ok               200 with a small body
  /negative-length  Content-Length: -1
  /chunk-negative   chunked, chunk size -1
  /chunk-huge       chunked, chunk size 7fffffffffffffff, then a little data and a close
  /endless          200 with no length and a body that never ends
  /stall            the status line, then nothing (the connection kept open)
  /garbage          a line that is not an HTTP status line
  /huge-header      a 1 MiB header line
  /many-headers     2,000 header lines of 60 bytes
  /redirect         302 to /ok
  /keep             200 with a length, the connection kept open for the next request
  /keep-junk        the same, with bytes past the body's length (a kept connection poisoned
                    for whoever reuses it)
  /keep-late-junk   the same, the bytes sent once the answer has been read (0.2 s later), then
                    {"after_answer": connection} recorded
  /keep-then-close  200 with a length, then the connection closed while idle (0.2 s later, as a
                    receiver's idle timeout would), then {"after_answer": connection} recorded

--cert/--key serve TLS with that certificate; --bind picks the loopback address (127.0.0.1).
Prints "listening PORT", then one JSON line per request: {"path", "mode", "request_line",
"headers": [[name, value], ...], "body_bytes", "connection"} (connections numbered from 1 in the
order they were accepted).
"""
import argparse, json, socket, ssl, sys, threading, time

parser = argparse.ArgumentParser()
parser.add_argument("--cert")
parser.add_argument("--key")
parser.add_argument("--bind", default="127.0.0.1")
args = parser.parse_args()

lock = threading.Lock()


def record(entry):
    with lock:
        sys.stdout.write(json.dumps(entry) + "\n")
        sys.stdout.flush()


def read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append([name, value.strip()])
        if name.lower() == "content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return lines[0], headers, len(rest)


def serve(conn, number):
    try:
        if context is not None:
            conn = context.wrap_socket(conn, server_side=True)
        while answer(conn, number):
            pass
    except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
        pass  # the client gave up (or refused our certificate), as it should
    finally:
        try:
            conn.close()
        except OSError:
            pass


def answer(conn, number):
    """Answers one request; returns whether the connection is kept for another."""
    request = read_request(conn)
    if request is None:
        return False
    request_line, headers, body_bytes = request
    path = request_line.split(" ")[1] if " " in request_line else ""
    mode = path.strip("/").split("/")[0].split("?")[0]
    record({"path": path, "mode": mode, "request_line": request_line, "headers": headers,
            "body_bytes": body_bytes, "connection": number})
    if mode == "keep":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        return True
    elif mode == "keep-junk":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\njunk")
        return True
    elif mode == "keep-late-junk":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        # Sleep, not a clock: the bytes must come after the client has read the answer.
        time.sleep(0.2)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\njunk")
        record({"after_answer": number})
        return True
    elif mode == "keep-then-close":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        # Sleep, not a clock: the close must come after the client has read the answer.
        time.sleep(0.2)
        conn.shutdown(socket.SHUT_RDWR)
        record({"after_answer": number})
        return False
    elif mode == "negative-length":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nhello")
    elif mode == "chunk-negative":
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nhello\r\n0\r\n\r\n")
    elif mode == "chunk-huge":
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffffffff\r\nhello")
    elif mode == "endless":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        block = b"x" * 65536
        while True:
            conn.sendall(block)
    elif mode == "stall":
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        # Sleep, not a clock: a receiver that never answers, held past the notifier's timeout.
        time.sleep(120)
    elif mode == "garbage":
        conn.sendall(b"\x00\xffNOT HTTP AT ALL\r\n\r\n")
    elif mode == "huge-header":
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Huge: " + b"a" * (1 << 20) + b"\r\nContent-Length: 0\r\n\r\n")
    elif mode == "many-headers":
        lines = b"".join(b"X-Filler-%04d: %s\r\n" % (i, b"b" * 44) for i in range(2000))
        conn.sendall(b"HTTP/1.1 200 OK\r\n" + lines + b"Content-Length: 0\r\n\r\n")
    elif mode == "redirect":
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /ok\r\nContent-Length: 0\r\n\r\n")
    else:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    return False


context = None
if args.cert:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.cert, args.key)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((args.bind, 0))
server.listen(64)
print("listening %d" % server.getsockname()[1], flush=True)
accepted = 0
while True:
    conn, _ = server.accept()
    accepted += 1
    threading.Thread(target=serve, args=(conn, accepted), daemon=True).start()
