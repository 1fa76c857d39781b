#!/usr/bin/env python3
"""A TCP proxy that a test can cut and restore: the venue broker's uplink to the central one.

Test peer only (not product code). Usage: uplink_proxy.py TARGET_PORT
Listens on a free 127.0.0.1 port and prints "ready PORT". SIGUSR1 cuts the uplink: the
listening socket is closed and every open connection is reset, so new connections are refused
until SIGUSR2 restores it (listening again on the same port). Prints "down" and "up" when done.
"""
import asyncio
import signal
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main():
    target_port = int(sys.argv[1])
    connections = set()  # (client writer, upstream writer)

    async def handle(client_reader, client_writer):
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_writer.transport.abort()
            return
        pair = (client_writer, up_writer)
        connections.add(pair)
        await asyncio.gather(pipe(client_reader, up_writer), pipe(up_reader, client_writer))
        connections.discard(pair)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, reuse_address=True)
    port = server.sockets[0].getsockname()[1]
    state = {"server": server}
    loop = asyncio.get_running_loop()

    async def cut():
        if state["server"] is not None:
            state["server"].close()
            await state["server"].wait_closed()
            state["server"] = None
        for client_writer, up_writer in list(connections):
            client_writer.transport.abort()
            up_writer.transport.abort()
        connections.clear()
        print("down", flush=True)

    async def restore():
        if state["server"] is None:
            state["server"] = await asyncio.start_server(handle, "127.0.0.1", port, reuse_address=True)
        print("up", flush=True)

    loop.add_signal_handler(signal.SIGUSR1, lambda: asyncio.ensure_future(cut()))
    loop.add_signal_handler(signal.SIGUSR2, lambda: asyncio.ensure_future(restore()))
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    print(f"ready {port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except RuntimeError:
        pass
