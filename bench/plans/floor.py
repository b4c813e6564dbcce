#!/usr/bin/env python3
"""The floor of bench/plans.sh: the workload with plain OpenSSH, the least a tool can do
(standard library only).

    floor.py FLOOR_JSON      (written by `workload.py prepare floor`)

For every host at once (one subprocess.Popen each, then a wait for all): one `ssh`
process — one connection, no ControlMaster, BatchMode, the fleet's client key and
known_hosts with StrictHostKeyChecking=yes, no ssh_config file read (-F none) — that runs
ONE shell script making the workload's five changes in the host's directory
<srv>/<host name>/ (the same bytes and modes as the tools leave, so `workload.py verify`
accepts the host):
  (a) app.conf: the ^release= line becomes release=R (sed -i; the seed has that line)
  (b) motd.txt: "host <name> runs release R\\nmanaged by bench/plans\\n", mode 0644
  (c) uname -a (its output goes to this process's stdout, like the tools' logs)
  (d) releases/R, mode 0755
  (e) echo "deployed R on $(hostname)" > releases/R/MARKER, after the host's `delay`
sshd runs the script through the user's login shell: one remote shell per host.
Exit status 0 if every host's ssh exited 0; else the failed hosts are listed and it is 1.
"""

import json
import shlex
import subprocess
import sys


def script(srv, name, release, delay):
    q = shlex.quote
    base = f"{srv}/{name}"
    motd = f"host {name} runs release {release}\nmanaged by bench/plans\n"
    return "\n".join(
        [
            "set -e",
            f"cd {q(base)}",
            f"sed -i {q('s/^release=.*/release=' + release + '/')} app.conf",
            f"printf '%s' {q(motd)} > motd.txt",
            "chmod 0644 motd.txt",
            "uname -a",
            f"mkdir -p -m 0755 releases/{q(release)}",
            # The same text as step (e) of plan.yml: `delay` is a shell prefix.
            f'{delay}echo "deployed {release} on $(hostname)" > "{base}/releases/{release}/MARKER"',
            "",
        ]
    )


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: floor.py FLOOR_JSON")
    with open(sys.argv[1]) as f:
        inv = json.load(f)
    common = [
        "ssh", "-F", "none",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={inv['known_hosts']}",
        "-o", "IdentitiesOnly=yes",
        "-o", "ControlMaster=no",
        "-o", "ControlPath=none",
        "-i", inv["client_key"],
        "-l", inv["user"],
    ]
    procs = []
    for h in inv["hosts"]:
        cmd = common + ["-p", str(h["port"]), "127.0.0.1",
                        script(inv["srv"], h["name"], inv["release"], h["delay"])]
        procs.append((h["name"], subprocess.Popen(cmd, stdin=subprocess.DEVNULL)))
    failed = []
    for name, p in procs:
        rc = p.wait()
        if rc != 0:
            failed.append(f"{name} (exit {rc})")
    if failed:
        print(f"floor: {len(failed)} of {len(procs)} hosts failed: {', '.join(failed[:10])}",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
