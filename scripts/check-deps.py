#!/usr/bin/env python3
"""Checks the library's own dependency tree (every feature on, no
dev-dependencies) offline, as cargo-deny would for these two points, and the
same for the `redquorum` command's (cli/):

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
fmt = lambda v: ".".join(map(str, v))


def tree(root):
    """A package's own tree: normal and build dependencies, not dev-dependencies."""
    seen, stack = set(), [root]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
                stack.append(dep["pkg"])
    return seen


def check(root):
    """Checks one workspace member's tree; says whether it passed."""
    name = packages[root]["name"]
    ours = version(packages[root]["rust_version"])
    seen = tree(root)
    needs = sorted(
        (version(packages[p]["rust_version"]), packages[p]["name"])
        for p in seen
        if p != root and packages[p].get("rust_version")
    )
    highest, who = needs[-1]
    print(f"{name}: rust-version {fmt(ours)}; its {len(seen) - 1} dependencies need at most {fmt(highest)} ({who})")
    ok = True
    if highest > ours:
        print(f"error: {who} needs Rust {fmt(highest)}: raise {name}'s rust-version", file=sys.stderr)
        ok = False
    licenses = {}
    for p in seen - {root}:
        licenses.setdefault(packages[p].get("license") or "(none)", []).append(packages[p]["name"])
    for expr, names in sorted(licenses.items()):
        if not satisfied(expr):
            print(f"error: license {expr!r} of {', '.join(sorted(names))} ({name}'s tree) is not in the allowed set", file=sys.stderr)
            ok = False
    print(f"{name}: {len(licenses)} distinct license expressions, each met by {', '.join(sorted(ALLOWED))}")
    return ok


# The library first; then the command (cli/), whose tree users install too.
members = sorted(meta["workspace_members"], key=lambda p: p != meta["resolve"]["root"])
failed = not all([check(m) for m in members])
sys.exit(1 if failed else 0)
