#!/usr/bin/env bash
# Policy evaluation: 20 Rego policies on a 1,000-resource plan document.
#
# 1. `bosun policy eval` (the 20 files as one set), BENCH_RUNS times: the engine's own
#    evaluation time per decision (loading the 20 policies, evaluating deny, warn and
#    require_approval of every package: `duration_ms` of the decision), p50 and p99, and
#    the whole command's wall time.
# 2. The server's path: each policy its own set, on one plan document — the example
#    `bench_sets` of bosun-policy (release), timing in one run, interleaved: the 20 files
#    as one set, 20 sets the way the server did it before the shared input, 20 sets each
#    `decide(&json)`, and 20 sets on one shared `Input` (`decide_input`).
#
# Usage: bench/policy.sh             (from anywhere; see bench/README.md)
# Knobs (environment): BENCH_RUNS=100 BENCH_RESOURCES=1000 BENCH_POLICIES=20
#                      BENCH_BOSUN_BIN=PATH (use this bosun binary; no cargo build)
#                      BENCH_CLI=0 (skip part 1: no bosun build)  BENCH_SETS=0 (skip part 2)
# The builds honour CARGO_TARGET_DIR.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
RUNS=${BENCH_RUNS:-100}
RESOURCES=${BENCH_RESOURCES:-1000}
POLICIES=${BENCH_POLICIES:-20}
BIN=${BENCH_BOSUN_BIN:-}
CLI=${BENCH_CLI:-1}
SETS=${BENCH_SETS:-1}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [ "$CLI" != 0 ] && [ -z "$BIN" ]; then
  (cd "$ROOT" && cargo build --release -q -p bosun)
  BIN="$TARGET/release/bosun"
fi
if [ "$SETS" != 0 ]; then
  (cd "$ROOT" && cargo build --release -q -p bosun-policy --example bench_sets)
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/policies"

python3 - "$WORK" "$RESOURCES" "$POLICIES" <<'PY'
import json, sys
work, n, p = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
types = ["aws_instance", "aws_s3_bucket", "aws_db_instance", "aws_iam_role", "aws_security_group"]
changes = []
for i in range(n):
    t = types[i % len(types)]
    actions = [["create"], ["update"], ["no-op"], ["delete"], ["delete", "create"]][i % 5]
    changes.append({
        "address": f"{t}.r{i}", "type": t, "name": f"r{i}",
        "change": {"actions": actions,
                   "before": {"tags": {"owner": "net"}, "size": i},
                   "after": {"tags": ({"owner": "net"} if i % 3 else {}), "size": i + 1}},
    })
json.dump({"plan": {"format_version": "1.2", "resource_changes": changes},
           "stack": {"id": "web", "labels": ["prod"]},
           "run": {"kind": "tracked", "trigger": "push", "commit": "abc123"}},
          open(f"{work}/input.json", "w"))
kinds = [
  # deny: a protected type destroyed
  'deny contains msg if {{ some rc in input.plan.resource_changes; rc.type == "{t}"; "delete" in rc.change.actions; msg := sprintf("%s destroyed", [rc.address]) }}',
  # warn: a created resource without an owner tag
  'warn contains msg if {{ some rc in input.plan.resource_changes; rc.type == "{t}"; "create" in rc.change.actions; not rc.change.after.tags.owner; msg := sprintf("%s has no owner", [rc.address]) }}',
  # require_approval: more than N changes of a type
  'require_approval contains msg if {{ changed := [rc | some rc in input.plan.resource_changes; rc.type == "{t}"; rc.change.actions != ["no-op"]]; count(changed) > 50; msg := sprintf("%d {t} change", [count(changed)]) }}',
  # warn: sizes that grow
  'warn contains msg if {{ some rc in input.plan.resource_changes; rc.type == "{t}"; rc.change.after.size > rc.change.before.size + 500; msg := sprintf("%s grows", [rc.address]) }}',
]
for i in range(p):
    t = types[i % len(types)]
    rule = kinds[i % len(kinds)].format(t=t)
    open(f"{work}/policies/p{i:02d}.rego", "w").write(f"package bosun.p{i:02d}\n\nimport rego.v1\n\n{rule}\n")
PY

if [ "$CLI" != 0 ]; then
durations=()
walls=()
for _ in $(seq 1 "$RUNS"); do
  start=$(date +%s%N)
  out=$("$BIN" --json policy eval "$WORK/policies" --input "$WORK/input.json" || true)
  end=$(date +%s%N)
  durations+=("$(python3 -c 'import json,sys; print(json.load(sys.stdin)["duration_ms"])' <<<"$out")")
  last=$out
  walls+=("$(( (end - start) / 1000000 ))")
done
python3 -c 'import json,sys; d=json.load(sys.stdin); print("the decision: %d deny, %d warn, %d require_approval, %d errors" % tuple(len(d[k]) for k in ("deny","warn","require_approval","errors")))' <<<"$last"
python3 - "$RESOURCES" "$POLICIES" "$RUNS" "${durations[*]}" "${walls[*]}" <<'PY'
import json, sys
res, pol, runs = sys.argv[1:4]
d = sorted(int(x) for x in sys.argv[4].split())
w = sorted(int(x) for x in sys.argv[5].split())
q = lambda a, p: a[min(len(a) - 1, int(round(p / 100 * (len(a) - 1))))]
print(f"Policy evaluation: {pol} policies, {res}-resource plan, {runs} decisions")
print("| measure | p50 | p99 | max |")
print("|---|---:|---:|---:|")
print(f"| evaluation (engine: load + decide) | {q(d,50)} ms | {q(d,99)} ms | {d[-1]} ms |")
print(f"| `bosun policy eval` wall (process, read, parse JSON) | {q(w,50)} ms | {q(w,99)} ms | {w[-1]} ms |")
print(json.dumps({"policies": int(pol), "resources": int(res), "runs": int(runs),
                  "eval_ms": {"p50": q(d,50), "p99": q(d,99), "max": d[-1]},
                  "wall_ms": {"p50": q(w,50), "p99": q(w,99), "max": w[-1]}}))
PY
fi

if [ "$SETS" != 0 ]; then
  echo
  echo "The server's path: each policy its own set ($RUNS decisions of all $POLICIES each way, interleaved)"
  "$TARGET/release/examples/bench_sets" "$WORK/policies" "$WORK/input.json" "$RUNS"
fi
