"""Acting on a running ``pluglog dev-cluster``: ``stop N``, ``start N``, ``status``.

The running dev cluster (:mod:`pluglog.cli.devcluster`) keeps a state file,
``dev-cluster.json`` in its directory: ZooKeeper's connect string, and for
every broker its pid, port, data dir, log file, command line and whether it
runs. It also listens on a Unix socket (named in the state file) for
requests, one JSON line each: ``{"action": "stop", "broker": 2, "kill":
false}`` or ``{"action": "start", "broker": 2}``, answered with one JSON line
``{"ok": true, "message": ...}`` or ``{"ok": false, "error": ...}``. The
cluster process does the stopping and starting itself, so a broker started
again stays under its watch (reported if it dies, stopped by Ctrl-C).

Without ``--dir`` the commands act on the dev cluster started last by this
user, whose directory is recorded in :func:`current_pointer`.
"""

import json
import os
import socket
import sys
import tempfile

from pluglog.cli.common import CliError

STATE_FILE = "dev-cluster.json"
SOCKET_FILE = "control.sock"
#: How long ``start N`` / ``stop N`` wait for the cluster process's answer.
REQUEST_TIMEOUT_S = 150


def current_pointer():
    """The file naming the directory of this user's most recent dev cluster."""
    return os.path.join(tempfile.gettempdir(), f"pluglog-dev-cluster-{os.getuid()}.current")


def cli_prefix():
    """How to run this CLI again: ``pluglog`` when it was started as that
    command, else ``python -m pluglog.cli.main`` with this interpreter."""
    if os.path.basename(sys.argv[0] or "") == "pluglog":
        return "pluglog"
    return f"{sys.executable} -m pluglog.cli.main"


def control_path(root):
    """The control socket's path: in ``root``, or in a short temporary
    directory when ``root`` is too long for a Unix socket name."""
    path = os.path.join(root, SOCKET_FILE)
    if len(path.encode()) < 100:
        return path
    return os.path.join(tempfile.mkdtemp(prefix="pluglog-dev-"), SOCKET_FILE)


def write_state(root, state):
    path = os.path.join(root, STATE_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


def read_state(root):
    path = os.path.join(root, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise CliError(
            f"no dev cluster runs in {root} ({path} is missing); "
            "start one with: pluglog dev-cluster --dir DIR"
        ) from None


def find_root(args):
    if args.dir is not None:
        return os.path.abspath(args.dir)
    try:
        with open(current_pointer(), encoding="utf-8") as handle:
            return handle.read().strip()
    except FileNotFoundError:
        raise CliError(
            "no running dev cluster found: start one with 'pluglog dev-cluster', "
            "or name its directory with --dir"
        ) from None


def request(root, body):
    """Send ``body`` to the dev cluster running in ``root``; its answer."""
    state = read_state(root)
    address = state["control"]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(REQUEST_TIMEOUT_S)
            sock.connect(address)
            sock.sendall(json.dumps(body).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise CliError(
            f"the dev cluster in {root} does not answer on {address} "
            f"({exc.strerror or exc}); is it still running?"
        ) from None
    try:
        return json.loads(data)
    except ValueError:
        raise CliError(f"the dev cluster in {root} closed the connection") from None


def run_action(_client, args):
    """``pluglog dev-cluster stop|start|status``."""
    root = find_root(args)
    if args.action == "status":
        state = read_state(root)
        print(f"ZooKeeper: {state['zookeeper']['connect']}")
        for node, broker in sorted(state["brokers"].items(), key=lambda b: int(b[0])):
            print(
                f"broker {node}: {broker['status']}\tpid {broker['pid']}\t"
                f"127.0.0.1:{broker['port']}\tlog {broker['log']}"
            )
        print(f"bootstrap: {state['bootstrap']}")
        return 0
    if args.broker is None:
        print(f"pluglog: dev-cluster {args.action}: name a broker id", file=sys.stderr)
        return 2
    answer = request(root, {"action": args.action, "broker": args.broker, "kill": bool(args.kill)})
    if not answer.get("ok"):
        raise CliError(answer.get("error", "failed"))
    print(answer["message"])
    return 0


# -- the running cluster's side ---------------------------------------------------


def answer(cluster, conn, stopping):
    """Serve one ``stop``/``start`` request on an accepted control connection."""
    with conn:
        conn.settimeout(5)
        try:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            body = json.loads(data)
            node = int(body["broker"])
            if body["action"] == "stop":
                ok, message = cluster.stop_broker(node, bool(body.get("kill")))
            elif body["action"] == "start":
                ok, message = cluster.start_broker(node, stopping)
            else:
                ok, message = False, f"unknown action {body['action']!r}"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            ok, message = False, f"bad request: {exc}"
        print(message if ok else f"pluglog: {message}", flush=True)
        reply = {"ok": True, "message": message} if ok else {"ok": False, "error": message}
        try:
            conn.sendall(json.dumps(reply).encode() + b"\n")
        except OSError:
            pass


def already_running(root):
    try:
        state = read_state(root)
        os.kill(state["supervisor_pid"], 0)
    except Exception:
        return None
    return state["supervisor_pid"]


def forget(root):
    """Remove the state file, and the pointer when it names this cluster."""
    try:
        os.unlink(os.path.join(root, STATE_FILE))
    except FileNotFoundError:
        pass
    pointer = current_pointer()
    try:
        with open(pointer, encoding="utf-8") as handle:
            if handle.read().strip() == root:
                os.unlink(pointer)
    except FileNotFoundError:
        pass
