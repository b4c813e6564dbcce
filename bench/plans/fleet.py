#!/usr/bin/env python3
"""A fleet of real sshd processes on loopback, for bench/plans.sh (standard library only).

    fleet.py up DIR N [--shell login|shlvl]
                             start N sshd's and supervise them until SIGTERM/SIGINT
    fleet.py cpu DIR         CPU time (clock ticks) of the sshd's so far, children included

`up` creates, under DIR:
  client_ed25519{,.pub}   the one client key, authorized on every host
  known_hosts             "[127.0.0.1]:PORT ssh-ed25519 …" for every host
  hosts/host-NNN/         per host: ssh_host_ed25519_key, sshd_config, authorized_keys,
                          sshd.pid, sshd.log (sshd -e: its log on stderr)
  srv/                    parent of the hosts' working directories (srv/host-NNN, made by
                          workload.py seed)
  fleet.json              {"user", "user_shell", "shell", "sshd", "sshd_version",
                          "client_key", "known_hosts", "srv",
                          "hosts": [{"name", "port", "pid", "dir"}]}
  ready                   written last, once every sshd answers with its SSH banner

Each sshd runs `/usr/sbin/sshd -D -e -f hosts/host-NNN/sshd_config` on its own
127.0.0.1 port, as the current user, with PidFile and AuthorizedKeysFile in its own
directory, StrictModes no, PasswordAuthentication no, MaxStartups 1000:30:2000,
MaxSessions 100, the internal sftp server, and LogLevel VERBOSE (so its log has one
"Starting session: command|shell|subsystem …" line per session: workload.py counts the
shells a tool had sshd start). The user's login shell runs every remote command, as
sshd starts it:
  --shell login (default)  nothing changed: bash, started by sshd for a command, sources
                           the user's ~/.bashrc, as on a real host of this user;
  --shell shlvl            `SetEnv SHLVL=1` in every session: bash then counts itself as
                           nested and skips ~/.bashrc (a host whose .bashrc costs nothing).
Each sshd is started with PR_SET_PDEATHSIG, so
if this supervisor dies (even by SIGKILL) its sshd's get SIGTERM. While supervising, an
sshd that exits is reported on stderr and in DIR/dead (bench/plans.sh checks that file
before every run). On SIGTERM/SIGINT: SIGTERM to every sshd, SIGKILL after 5 s, exit.
"""

import concurrent.futures
import ctypes
import getpass
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
SSHD = os.environ.get("BENCH_SSHD", "/usr/sbin/sshd")
READY_TIMEOUT = 60.0


def log(msg):
    print(f"fleet: {msg}", file=sys.stderr, flush=True)


def fail(msg):
    log(msg)
    sys.exit(1)


def keygen(path, comment):
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )


def free_ports(n, taken):
    """n distinct free loopback ports (bound together, then released)."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            socks.append(s)
            if port not in taken:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def sshd_config(hdir, port, extra):
    return "\n".join(
        [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {hdir}/ssh_host_ed25519_key",
            f"PidFile {hdir}/sshd.pid",
            f"AuthorizedKeysFile {hdir}/authorized_keys",
            "StrictModes no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "MaxStartups 1000:30:2000",
            "MaxSessions 100",
            "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE",
            *extra,
            "",
        ]
    )


def sshd_supports(option_line, probe_dir):
    """Whether this sshd accepts a config line (newer options such as PerSourcePenalties)."""
    cfg = os.path.join(probe_dir, "probe_config")
    with open(cfg, "w") as f:
        f.write(sshd_config(probe_dir, 22, [option_line]))
    r = subprocess.run(
        [SSHD, "-t", "-f", cfg], stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    os.unlink(cfg)
    return r.returncode == 0


_libc = ctypes.CDLL(None, use_errno=True)


def _pdeathsig():
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def start_sshd(hdir):
    logf = open(os.path.join(hdir, "sshd.log"), "ab")
    try:
        return subprocess.Popen(
            [SSHD, "-D", "-e", "-f", os.path.join(hdir, "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            preexec_fn=_pdeathsig,
        )
    finally:
        logf.close()


def banner(port, timeout=0.5):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(64).startswith(b"SSH-2.0-")
    except OSError:
        return False


def tail(path, n=5):
    try:
        with open(path, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode(errors="replace").rstrip()
    except OSError:
        return "(no log)"


def up(root, n, shell, procs):
    root = os.path.abspath(root)
    if not os.path.isabs(SSHD) or not os.access(SSHD, os.X_OK):
        fail(f"no sshd at {SSHD} (it must be an absolute path: sshd re-executes itself)")
    os.makedirs(os.path.join(root, "hosts"), exist_ok=True)
    os.makedirs(os.path.join(root, "srv"), exist_ok=True)
    user = getpass.getuser()
    version = subprocess.run(
        [SSHD, "-V"], stdin=subprocess.DEVNULL, capture_output=True, text=True
    ).stderr.strip().splitlines()
    version = version[0] if version else "unknown"

    client_key = os.path.join(root, "client_ed25519")
    keygen(client_key, "bench-client")
    with open(client_key + ".pub") as f:
        client_pub = f.read()

    names = [f"host-{i:03d}" for i in range(1, n + 1)]
    dirs = {name: os.path.join(root, "hosts", name) for name in names}
    for d in dirs.values():
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "authorized_keys"), "w") as f:
            f.write(client_pub)
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda nm: keygen(os.path.join(dirs[nm], "ssh_host_ed25519_key"), nm), names))

    # OpenSSH ≥ 9.8 penalises sources that cause many failed or aborted sessions; every
    # connection here comes from 127.0.0.1, so turn that off where it exists.
    extra = []
    probe = os.path.join(root, "hosts", names[0]) if names else root
    if sshd_supports("PerSourcePenalties no", probe):
        extra.append("PerSourcePenalties no")
    # bash, run by sshd for a command, sources ~/.bashrc when it is a top-level shell
    # (SHLVL unset). "login" leaves that as it is (whatever the user's .bashrc does, it
    # does for every remote command); "shlvl" sets SHLVL=1 in every session, so every
    # command's shell skips it.
    if shell == "shlvl":
        if not sshd_supports("SetEnv SHLVL=1", probe):
            fail("this sshd has no SetEnv (OpenSSH < 7.8): the shlvl variant cannot be set up")
        extra.append("SetEnv SHLVL=1")
    try:
        user_shell = pwd.getpwnam(user).pw_shell
    except KeyError:
        user_shell = "unknown"

    ports = {}
    pending = list(names)
    for attempt in range(3):
        if not pending:
            break
        for name, port in zip(pending, free_ports(len(pending), set(ports.values()))):
            ports[name] = port
            with open(os.path.join(dirs[name], "sshd_config"), "w") as f:
                f.write(sshd_config(dirs[name], port, extra))
            procs[name] = start_sshd(dirs[name])
        deadline = time.monotonic() + READY_TIMEOUT
        waiting, pending = list(pending), []
        while waiting:
            still = []
            for name in waiting:
                if procs[name].poll() is not None:
                    # Lost the port race (or a config error): retried with a new port.
                    pending.append(name)
                elif not banner(ports[name]):
                    still.append(name)
            waiting = still
            if waiting:
                if time.monotonic() > deadline:
                    fail(f"{len(waiting)} sshd not answering after {READY_TIMEOUT:.0f}s, e.g. "
                         f"{waiting[0]}: {tail(os.path.join(dirs[waiting[0]], 'sshd.log'))}")
                time.sleep(0.05)
    if pending:
        name = pending[0]
        fail(f"sshd for {name} exits at start: {tail(os.path.join(dirs[name], 'sshd.log'))}")

    with open(os.path.join(root, "known_hosts"), "w") as kh:
        for name in names:
            with open(os.path.join(dirs[name], "ssh_host_ed25519_key.pub")) as f:
                kind, key = f.read().split()[:2]
            kh.write(f"[127.0.0.1]:{ports[name]} {kind} {key}\n")
    fleet = {
        "user": user,
        "user_shell": user_shell,
        "shell": shell,
        "sshd": SSHD,
        "sshd_version": version,
        "client_key": client_key,
        "known_hosts": os.path.join(root, "known_hosts"),
        "srv": os.path.join(root, "srv"),
        "hosts": [
            {"name": nm, "port": ports[nm], "pid": procs[nm].pid, "dir": dirs[nm]} for nm in names
        ],
    }
    with open(os.path.join(root, "fleet.json"), "w") as f:
        json.dump(fleet, f, indent=1)
    with open(os.path.join(root, "ready"), "w") as f:
        f.write("ready\n")
    log(f"{n} sshd up on 127.0.0.1 ports {min(ports.values())}-{max(ports.values())} ({version}; "
        f"shell variant {shell}, the user's shell {user_shell})")
    return dirs


def supervise(root, procs, dirs):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    reported = set()
    while not stop:
        for name, p in procs.items():
            if name not in reported and p.poll() is not None:
                reported.add(name)
                msg = f"sshd of {name} exited ({p.returncode}): {tail(os.path.join(dirs[name], 'sshd.log'))}"
                log(msg)
                with open(os.path.join(root, "dead"), "a") as f:
                    f.write(msg + "\n")
        time.sleep(0.5)
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 5
    for p in procs.values():
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cpu(root):
    """Sum of utime+stime+cutime+cstime of every listening sshd: its own work plus that of
    the session processes it has reaped, which include everything run on the host."""
    with open(os.path.join(root, "fleet.json")) as f:
        fleet = json.load(f)
    total = 0
    for h in fleet["hosts"]:
        try:
            with open(f"/proc/{h['pid']}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is field 3 (state): utime..cstime are fields 14..17.
        total += sum(int(x) for x in fields[11:15])
    print(total)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "cpu":
        cpu(sys.argv[2])
        return
    args = sys.argv[1:]
    shell = "login"
    if len(args) == 5 and args[3] == "--shell":
        shell = args[4]
        args = args[:3]
    if len(args) != 3 or args[0] != "up":
        fail("usage: fleet.py up DIR N [--shell login|shlvl] | fleet.py cpu DIR")
    if shell not in ("login", "shlvl"):
        fail(f"unknown --shell {shell!r} (login or shlvl)")
    root, n = args[1], int(args[2])
    procs = {}
    try:
        dirs = up(root, n, shell, procs)
        supervise(root, procs, dirs)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
