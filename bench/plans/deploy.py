# The benchmark workload for pyinfra (bench/plans.sh). Equivalent to plan.yml (Bosun) and
# playbook.yml (Ansible). `srv`, `release` and `delay` come from the generated inventory's
# group data (`delay`: "", or "sleep S; " as the slow host's own data); every host's files
# live in <srv>/<host name>/. pyinfra has no argv-only command operation: `uname -a` runs
# through server.shell.
from io import StringIO

from pyinfra import host
from pyinfra.operations import files, server

srv = host.data.srv
release = host.data.release
delay = host.data.delay
base = f"{srv}/{host.name}"

files.line(
    name="pin release",
    path=f"{base}/app.conf",
    line="^release=",
    replace=f"release={release}",
)
files.put(
    name="motd",
    src=StringIO(f"host {host.name} runs release {release}\nmanaged by bench/plans\n"),
    dest=f"{base}/motd.txt",
    mode="644",
)
server.shell(name="kernel", commands=["uname -a"])
files.directory(name="release dir", path=f"{base}/releases/{release}", mode="755")
server.shell(
    name="marker",
    commands=[f'{delay}echo "deployed {release} on $(hostname)" > "{base}/releases/{release}/MARKER"'],
)
