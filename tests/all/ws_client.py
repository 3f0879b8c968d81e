#!/usr/bin/python3
"""WebSocket clients for tests/all/sockets.rs, driven line by line.

A real client (Python `websockets`, Debian's python3-websockets), not the
server's own library: each line on stdin is one JSON command, each answer
one JSON line on stdout. Every wait is bounded by the command's timeout.

  {"op": "open", "n": K, "port": P, "actor": A}  -> {"ok": true, "clients": [ids]}
                                                  or {"ok": false, "status": S}
  {"op": "send", "client": i, "text": T}          -> {"ok": true}
  {"op": "send_bytes", "client": i, "size": N}    -> {"ok": true}
  {"op": "recv", "client": i, "count": n, "timeout": s}
                                                  -> {"ok": bool, "messages": [...]}
  {"op": "wait_closed", "client": i, "timeout": s} -> {"ok": bool, "code": c, "reason": r}
  {"op": "close", "client": i}                    -> {"ok": true}
"""
import asyncio
import json
import sys

import websockets

clients = []


async def handle(cmd):
    op = cmd["op"]
    if op == "open":
        opened = []
        for _ in range(cmd["n"]):
            try:
                ws = await asyncio.wait_for(
                    websockets.connect(
                        f"ws://127.0.0.1:{cmd['port']}{cmd.get('path', '/')}",
                        extra_headers=[("stasis-actor", cmd["actor"])],
                        ping_interval=None,
                        max_size=None,
                    ),
                    cmd.get("timeout", 10),
                )
            except websockets.exceptions.InvalidStatusCode as e:
                return {"ok": False, "status": e.status_code}
            clients.append(ws)
            opened.append(len(clients) - 1)
        return {"ok": True, "clients": opened}
    ws = clients[cmd["client"]]
    if op == "send":
        await ws.send(cmd["text"])
        return {"ok": True}
    if op == "send_bytes":
        await ws.send(b"x" * cmd["size"])
        return {"ok": True}
    if op == "recv":
        messages = []
        try:
            while len(messages) < cmd["count"]:
                m = await asyncio.wait_for(ws.recv(), cmd.get("timeout", 10))
                messages.append(m if isinstance(m, str) else m.decode("utf-8", "replace"))
        except asyncio.TimeoutError:
            return {"ok": False, "error": "timeout", "messages": messages}
        except websockets.exceptions.ConnectionClosed as e:
            return {"ok": False, "error": "closed", "code": e.code, "messages": messages}
        return {"ok": True, "messages": messages}
    if op == "wait_closed":
        try:
            await asyncio.wait_for(ws.wait_closed(), cmd.get("timeout", 10))
        except asyncio.TimeoutError:
            return {"ok": False, "error": "timeout"}
        return {"ok": True, "code": ws.close_code, "reason": ws.close_reason}
    if op == "close":
        await ws.close()
        return {"ok": True}
    return {"ok": False, "error": f"unknown op {op}"}


async def main():
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        try:
            answer = await handle(json.loads(line))
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            answer = {"ok": False, "error": repr(e)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


asyncio.run(main())
