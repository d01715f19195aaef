#!/usr/bin/env python3
"""Module dependency cycles in the crate: `scripts/module-cycles.py [src] [-v]`.

Edges come from `crate::…`, `super::…` and `self::…` paths and from paths
through a child module (`slot::Live`, `use topology::cluster`), in `use`
lines and in code alike, the unit tests' too (an inline `#[cfg(test)] mod
…` at the end of a file: its `super` is the file's module); comments and
doc comments are left out. A module is
a file (src/net/topology/mod.rs is net::topology); an edge goes to the
deepest module a path names. Reports the 2-cycles (A uses B and B uses A),
those between unrelated modules apart from those between a module and one
of its ancestors (a child using its parent's helpers), and every strongly
connected component of more than one module. `-v` prints every edge. A
rough reading of the source (no macro expansion, no name resolution): a
check to run after moving modules, not a proof."""
import os, re, sys, itertools
root = sys.argv[1] if len(sys.argv) > 1 else 'src'
mods = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if not f.endswith('.rs'): continue
        p = os.path.join(d, f)
        rel = os.path.relpath(p, root)[:-3].split(os.sep)
        if rel[-1] in ('mod', 'lib', 'main'): rel = rel[:-1]
        mods['::'.join(rel)] = p
known = set(mods)
def resolve(parts):
    # deepest existing module prefix
    for n in range(len(parts), 0, -1):
        m = '::'.join(parts[:n])
        if m in known: return m
    return None
def source(p):
    """The code of file `p` without comments (line and doc; strings are rare
    enough to ignore), split into the module's own code and its unit tests
    (an inline `#[cfg(test)] mod …` at the end of the file)."""
    text = open(p).read()
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    parts = re.split(r'#\[cfg\(test\)\]\s*mod \w+\s*\{', text, maxsplit=1)
    return parts[0], parts[1] if len(parts) > 1 else ''
edges = {m: set() for m in known}
for m, p in mods.items():
  body, tests = source(p)
  # A unit test's `super` is the file's module: read as a child of it. Its
  # imports count as the module's (the design forbids cycles in tests too).
  for text, here in ((body, m.split('::') if m else []),
                     (tests, (m.split('::') if m else []) + ['tests'])):
    # expand `use crate::a::{b, c::d}` groups roughly: take the prefix path
    for mt in re.finditer(r'\b(crate|super(?:::super)*|self)::(?:([A-Za-z_][\w:]*?)(?:::)?)?(\{([^;]*?)\})?(?![\w:])', text):
        head, path, _, group = mt.groups()
        if head == 'crate': base = []
        elif head == 'self': base = here
        else:
            ups = head.count('super')
            # a file `a/b.rs` is module a::b; super of it is a
            base = here[:len(here) - ups]
        parts = base + [x for x in (path or '').split('::') if x]
        paths = [parts]
        if group:
            for g in re.split(r',(?![^{]*\})', group):
                g = g.strip().split(' as ')[0].strip()
                if g and g != 'self':
                    paths.append(parts + [x for x in re.split(r'::|\{|\}|,', g) if x.strip()][:1])
        for ps in paths:
            t = resolve(ps)
            if t is not None and t != m:
                edges[m].add(t)
# bare paths to a child module (`slot::Live`, `use topology::cluster;`)
for m, p in mods.items():
    text = source(p)[0]
    here = m.split('::') if m else []
    parent = lambda k: k.rsplit('::', 1)[0] if '::' in k else ''
    children = {k.rsplit('::', 1)[-1]: k for k in known if k and parent(k) == m}
    for mt in re.finditer(r'(?<![\w:])([a-z_][\w]*)::([A-Za-z_{][\w:]*)', text):
        name, path = mt.groups()
        if name in children:
            t = resolve(here + [name] + [x for x in path.strip('{').split('::') if x])
            if t is not None and t != m:
                edges[m].add(t)
# 2-cycles
def is_ancestor(a, b):
    return a == '' or b.startswith(a + '::')
two = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, ())})
pc = [c for c in two if is_ancestor(c[0], c[1]) or is_ancestor(c[1], c[0])]
other = [c for c in two if c not in pc]
print('2-cycles between unrelated modules (A uses B and B uses A):')
for a, b in other: print(f'  {a} <-> {b}')
print('2-cycles between a module and its ancestor:')
for a, b in pc: print(f'  {a} <-> {b}')
# SCCs (Tarjan)
idx, low, st, on, sccs, c = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(sorted(comp))
for v in sorted(edges):
    if v not in idx: sc(v)
print('strongly connected components (longer cycles included):')
for s in sccs: print('  {' + ', '.join(x or '<crate root>' for x in s) + '}')
if '-v' in sys.argv:
    for m in sorted(edges): print(m or '<root>', '->', sorted(edges[m]))
