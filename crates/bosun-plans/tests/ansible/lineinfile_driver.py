#!/usr/bin/env python3
"""Runs ansible-core's real `lineinfile` module over a batch of cases.

Usage: lineinfile_driver.py MODE CASES_JSON OUT_JSON

CASES_JSON is a list of {"id": str, "content": [byte, ...] | null, "args": {...}}: the
file's bytes before the task (null: the file does not exist) and the module arguments
without `path`. OUT_JSON receives, per case, {"id", "failed", "changed", "msg",
"content"} with the file's bytes after the task (null: it does not exist).

MODE `driver` imports `ansible.modules.lineinfile` and runs its `main()` once per case
in this one process, feeding the arguments the way Ansible's own module-debugging entry
point does (milliseconds per case). MODE `playbook` writes one playbook with a task per
case and runs `ansible-playbook -c local` (about half a second per case): the end-to-end
cross-check that the driver sees what a real play sees.
"""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile


def case_dir(root, i):
    d = os.path.join(root, "case-%d" % i)
    os.mkdir(d)
    return d


def read_back(path):
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return list(f.read())


def prepare(root, cases):
    paths = []
    for i, case in enumerate(cases):
        path = os.path.join(case_dir(root, i), "f")
        if case["content"] is not None:
            with open(path, "wb") as f:
                f.write(bytes(case["content"]))
        paths.append(path)
    return paths


def run_driver(root, cases):
    from ansible.module_utils import basic
    from ansible.modules import lineinfile

    tmp = os.path.join(root, "module-tmp")
    os.mkdir(tmp)
    results = []
    for case, path in zip(cases, prepare(root, cases)):
        args = dict(case["args"], path=path, _ansible_tmpdir=tmp, _ansible_remote_tmp=tmp)
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
        if hasattr(basic, "_ANSIBLE_PROFILE"):  # ansible-core >= 2.19
            basic._ANSIBLE_PROFILE = "legacy"
        out = io.StringIO()
        raised = None
        with contextlib.redirect_stdout(out):
            try:
                lineinfile.main()
            except SystemExit:
                pass
            except Exception as e:  # e.g. re.error: Ansible reports a module failure
                raised = e
        if raised is not None:
            res = {"failed": True, "changed": False, "msg": "%s: %s" % (type(raised).__name__, raised)}
        else:
            res = json.loads(out.getvalue())
        results.append({
            "id": case["id"],
            "failed": bool(res.get("failed", False)),
            "changed": bool(res.get("changed", False)),
            "msg": res.get("msg", ""),
            "content": read_back(path),
        })
    return results


def run_playbook(root, cases):
    paths = prepare(root, cases)
    tasks = []
    for i, (case, path) in enumerate(zip(cases, paths)):
        for v in case["args"].values():
            if isinstance(v, str) and any(m in v for m in ("{{", "{%", "{#")):
                raise SystemExit("case %s: a Jinja marker would be templated" % case["id"])
        tasks.append({
            "name": "case %d" % i,
            "ansible.builtin.lineinfile": dict(case["args"], path=path),
            "register": "r%d" % i,
            "ignore_errors": True,
        })
    results_path = os.path.join(root, "results.json")
    collect = ", ".join("'%d': r%d" % (i, i) for i in range(len(cases)))
    tasks.append({
        "name": "collect",
        "ansible.builtin.copy": {"dest": results_path, "content": "{{ {%s} | to_json }}" % collect},
    })
    play = [{"hosts": "all", "gather_facts": False, "tasks": tasks}]
    playbook = os.path.join(root, "play.json")
    with open(playbook, "w") as f:
        json.dump(play, f)
    env = dict(os.environ, ANSIBLE_PIPELINING="1", ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=os.path.join(root, "local-tmp"),
               ANSIBLE_REMOTE_TEMP=os.path.join(root, "remote-tmp"),
               ANSIBLE_RETRY_FILES_ENABLED="0")
    # pip may put the entry point beside the interpreter without that folder on PATH.
    playbook_cmd = shutil.which("ansible-playbook") or os.path.join(
        os.path.dirname(sys.executable), "ansible-playbook")
    cmd = [playbook_cmd, "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % sys.executable, playbook]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if not os.path.exists(results_path):
        sys.stderr.write(proc.stdout.decode(errors="replace"))
        raise SystemExit("ansible-playbook wrote no results (exit %d)" % proc.returncode)
    with open(results_path) as f:
        registered = json.load(f)
    results = []
    for i, (case, path) in enumerate(zip(cases, paths)):
        res = registered[str(i)]
        results.append({
            "id": case["id"],
            "failed": bool(res.get("failed", False)),
            "changed": bool(res.get("changed", False)),
            "msg": res.get("msg", ""),
            "content": read_back(path),
        })
    return results


def main():
    mode, cases_path, out_path = sys.argv[1:4]
    with open(cases_path) as f:
        cases = json.load(f)
    with tempfile.TemporaryDirectory(prefix="bosun-lineinfile-") as root:
        if mode == "driver":
            results = run_driver(root, cases)
        elif mode == "playbook":
            results = run_playbook(root, cases)
        else:
            raise SystemExit("unknown mode %r" % mode)
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
