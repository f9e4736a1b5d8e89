"""A hostile MCP server for mcpgate's sandbox tests, on the standard library alone (so any
user can run it with the system's python3): each tool tries something a sandboxed server
must not be able to do, and answers with what happened, as an error when it was stopped.

It speaks MCP over stdio the way the SDKs' servers do: one JSON-RPC message a line,
`initialize` answered with the client's protocol version, other methods refused with
-32601 (so a client that asks `server/discover` first falls back to `initialize`)."""

import json
import os
import signal
import socket
import sys
import time


class CpuLimit(Exception):
    pass


def on_xcpu(signum, frame):
    raise CpuLimit()


def grandparent():
    """The gateway: this server's parent is the supervisor, whose parent is the gateway."""
    def ppid(pid):
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    return ppid(ppid(os.getpid()))


def read(args):
    path = args["path"].replace("{gateway}", str(grandparent()))
    with open(path, "rb") as f:
        data = f.read(65536)
    return f"read {len(data)} bytes of {path}: {data[:4000]!r}"


def write(args):
    with open(args["path"], "w") as f:
        f.write("written by the hostile server\n")
    return f"wrote {args['path']}"


def connect(args):
    with socket.create_connection(("127.0.0.1", args["port"]), timeout=5):
        return f"connected to port {args['port']}"


def unix(args):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(args["path"])
    return f"connected to {args['path']}"


def udp(args):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"hello", ("127.0.0.1", args["port"]))
    return f"sent a datagram to port {args['port']}"


def fork(args):
    pids = []
    try:
        for _ in range(args["count"]):
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            pids.append(pid)
    except OSError as err:
        raise OSError(f"forked {len(pids)} processes, then: {err}") from None
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return f"forked {len(pids)} processes"


def allocate(args):
    try:
        block = bytearray(args["bytes"])
    except MemoryError:
        raise MemoryError(f"could not allocate {args['bytes']} bytes") from None
    return f"allocated {len(block)} bytes"


def spin(args):
    if args.get("catch", True):
        signal.signal(signal.SIGXCPU, on_xcpu)
    else:
        signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    start = time.process_time()
    try:
        while time.process_time() - start < args["seconds"]:
            pass
    except CpuLimit:
        raise RuntimeError(
            f"stopped by SIGXCPU after {time.process_time():.1f} s of CPU"
        ) from None
    return f"spun {args['seconds']} s of CPU"


def whoami(args):
    return json.dumps({
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "environ": sorted(os.environ),
    })


TOOLS = {
    "read": (read, {"path": {"type": "string"}}),
    "write": (write, {"path": {"type": "string"}}),
    "connect": (connect, {"port": {"type": "integer"}}),
    "unix": (unix, {"path": {"type": "string"}}),
    "udp": (udp, {"port": {"type": "integer"}}),
    "fork": (fork, {"count": {"type": "integer"}}),
    "allocate": (allocate, {"bytes": {"type": "integer"}}),
    "spin": (spin, {"seconds": {"type": "number"}, "catch": {"type": "boolean"}}),
    "whoami": (whoami, {}),
}


def answer(request):
    method = request.get("method")
    params = request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "1.0.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": [
            {
                "name": name,
                "description": f"Tries to {name}.",
                "inputSchema": {"type": "object", "properties": props},
            }
            for name, (_, props) in TOOLS.items()
        ]}
    if method == "tools/call":
        run, _ = TOOLS[params["name"]]
        try:
            text, failed = run(params.get("arguments") or {}), False
        except Exception as err:  # every failure is the tool's answer
            text, failed = f"{type(err).__name__}: {err}", True
        return {"content": [{"type": "text", "text": text}], "isError": failed}
    return None


def main():
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue
        result = answer(request)
        if result is None:
            reply = {"jsonrpc": "2.0", "id": request["id"],
                     "error": {"code": -32601, "message": "method not found"}}
        else:
            reply = {"jsonrpc": "2.0", "id": request["id"], "result": result}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


main()
