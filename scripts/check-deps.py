#!/usr/bin/env python3
"""Checks the library's own dependency tree (every feature on, no
dev-dependencies) offline, as cargo-deny would for these two points:

1. The crate's `rust-version` (its MSRV): no dependency may need a newer
   Rust.
2. Licenses: every dependency's SPDX expression must be satisfiable with
   permissive licenses (ALLOWED). (Security advisories need the advisory
   database from the network, which CI does not reach: not checked here.)

Only the one toolchain of our machines can be installed, so the MSRV cannot
be built with here; what can be checked is that the claim is not below what
the dependencies declare, and (clippy's `incompatible_msrv`, part of
`cargo clippy -D warnings`) that our own code uses no standard-library API
newer than it. Run from the crate's root: python3 scripts/check-deps.py
"""
import json
import re
import subprocess
import sys

ALLOWED = {
    "MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "Zlib",
    "Unicode-3.0", "BSL-1.0", "Unlicense", "CC0-1.0",
}


def satisfied(expr):
    """Whether an SPDX expression can be met with ALLOWED licenses."""
    tokens = re.findall(r"\(|\)|[^\s()]+", expr.replace("/", " OR "))
    pos = 0

    def parse_or():
        nonlocal pos
        ok = parse_and()
        while pos < len(tokens) and tokens[pos] == "OR":
            pos += 1
            ok = parse_and() or ok
        return ok

    def parse_and():
        nonlocal pos
        ok = parse_term()
        while pos < len(tokens) and tokens[pos] == "AND":
            pos += 1
            ok = parse_term() and ok
        return ok

    def parse_term():
        nonlocal pos
        if tokens[pos] == "(":
            pos += 1
            ok = parse_or()
            pos += 1  # ")"
        else:
            ok = tokens[pos] in ALLOWED
            pos += 1
        # "X WITH exception": an exception only grants more.
        if pos < len(tokens) and tokens[pos] == "WITH":
            pos += 2
        return ok

    return parse_or()


def version(v):
    return tuple(int(x) for x in v.split("."))


meta = json.loads(
    subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--all-features", "--locked"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
)
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = meta["resolve"]["root"]
ours = version(packages[root]["rust_version"])

# The library's tree: normal and build dependencies, not dev-dependencies.
seen, stack = set(), [root]
while stack:
    pid = stack.pop()
    if pid in seen:
        continue
    seen.add(pid)
    for dep in nodes[pid]["deps"]:
        if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
            stack.append(dep["pkg"])

needs = sorted(
    (version(packages[p]["rust_version"]), packages[p]["name"])
    for p in seen
    if p != root and packages[p].get("rust_version")
)
highest, who = needs[-1]
fmt = lambda v: ".".join(map(str, v))
print(f"rust-version {fmt(ours)}; the library's {len(seen) - 1} dependencies need at most {fmt(highest)} ({who})")
failed = False
if highest > ours:
    print(f"error: {who} needs Rust {fmt(highest)}: raise rust-version in Cargo.toml", file=sys.stderr)
    failed = True

licenses = {}
for p in seen - {root}:
    licenses.setdefault(packages[p].get("license") or "(none)", []).append(packages[p]["name"])
for expr, names in sorted(licenses.items()):
    if not satisfied(expr):
        print(f"error: license {expr!r} of {', '.join(sorted(names))} is not in the allowed set", file=sys.stderr)
        failed = True
print(f"licenses: {len(licenses)} distinct expressions, each met by {', '.join(sorted(ALLOWED))}")
sys.exit(1 if failed else 0)
