#!/usr/bin/env python3
"""layout_calls.py - the calls between the C files of one folder, and the circles among them.

A file A depends on a file B of the same folder when A names a function that B defines
without `static` (a call, or the function passed by name). The files of a folder should
form layers: when A depends on B, nothing B needs should lead back to A. A circle means a
file was split by size instead of by job; move the functions that close it to where their
callers' direction says.

usage: scripts/layout_calls.py [--graph] FILE...
  Prints one line per circle ("circle in DIR: a.c <-> b.c (a.c uses f, g of b.c; ...)")
  and exits 1 when there is one; --graph also prints every edge.
usage: scripts/layout_calls.py --max-function-lines N FILE...
  Prints each function longer than N lines (from the line that names it to its closing
  brace) and exits 1 when there is one.
"""
import os
import re
import sys
from collections import defaultdict

TOKEN = re.compile(r'[A-Za-z_]\w*')
DEFINITION = re.compile(r'([A-Za-z_]\w*)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*$', re.S)


def strip(text):
    """The text with comments, string and character literals and preprocessor lines blanked."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * text.count('\n', i, j))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + c)
            i = j + 1
        elif c == '#' and (i == 0 or text[i - 1] == '\n'):
            j = i
            while True:  # a directive, with its continuation lines
                k = text.find('\n', j)
                if k < 0:
                    j = n
                    break
                if text[k - 1] != '\\':
                    j = k
                    break
                j = k + 1
            out.append('\n' * text.count('\n', i, j))
            i = j
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def scan(path):
    """(functions defined without static, every function defined, every identifier used,
    [(line, lines, name)] of each function) of one C file."""
    text = strip(open(path, encoding='utf-8', errors='replace').read())
    exported, defined, lengths = set(), set(), []
    depth, start, current = 0, 0, None
    for m in re.finditer(r'[{};]', text):
        ch = m.group()
        if ch == '{':
            if depth == 0:
                head = text[start:m.start()]
                d = DEFINITION.search(head.strip())
                current = None
                if d and '=' not in head.split('(')[0]:
                    name = d.group(1)
                    defined.add(name)
                    before = head.split(name + '(')[0] if name + '(' in head else ''
                    if 'static' not in TOKEN.findall(before):
                        exported.add(name)
                    first = text.count('\n', 0, start + len(before)) + 1
                    current = (first, name)
            depth += 1
        elif ch == '}':
            depth -= 1
            if depth == 0:
                start = m.end()
                if current:
                    last = text.count('\n', 0, m.start()) + 1
                    lengths.append((current[0], last - current[0] + 1, current[1]))
                    current = None
        elif depth == 0:
            start = m.end()
    used = set(TOKEN.findall(text))
    return exported, defined, used, lengths


def circles(files):
    by_dir = defaultdict(list)
    for f in files:
        if f.endswith(('.c', '.cu')):
            by_dir[os.path.dirname(f)].append(f)
    found = []
    edges_all = []
    for d, group in sorted(by_dir.items()):
        info = {f: scan(f) for f in group}
        owner = {}
        for f, (exported, _, _, _) in info.items():
            for name in exported:
                owner[name] = f
        edges = defaultdict(lambda: defaultdict(set))
        for f, (_, defined, used, _) in info.items():
            for name in used - defined:
                g = owner.get(name)
                if g and g != f:
                    edges[f][g].add(name)
        for f in sorted(edges):
            for g in sorted(edges[f]):
                edges_all.append((f, g, sorted(edges[f][g])))
        # strongly connected components (Tarjan)
        index, low, stack, on, comps = {}, {}, [], set(), []

        def visit(v):
            index[v] = low[v] = len(index)
            stack.append(v)
            on.add(v)
            for w in edges[v]:
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))

        for v in sorted(group):
            if v not in index:
                visit(v)
        for comp in comps:
            inside = set(comp)
            why = []
            for f in comp:
                for g in sorted(edges[f]):
                    if g in inside:
                        why.append('%s uses %s of %s' % (os.path.basename(f),
                                                        ', '.join(sorted(edges[f][g])),
                                                        os.path.basename(g)))
            found.append('circle in %s/: %s (%s)' % (d, ' <-> '.join(os.path.basename(c) for c in comp),
                                                     '; '.join(why)))
    return found, edges_all


def long_functions(files, limit):
    found = []
    for f in files:
        for line, lines, name in scan(f)[3]:
            if lines > limit:
                found.append('%s:%d: %s() has %d lines, more than %d: give its steps names of '
                             'their own' % (f, line, name, lines, limit))
    return found


def main(argv):
    graph = '--graph' in argv
    limit = None
    args = []
    it = iter(argv)
    for a in it:
        if a == '--max-function-lines':
            limit = int(next(it))
        elif not a.startswith('--'):
            args.append(a)
    files = args
    if limit is not None:
        found = long_functions(files, limit)
        for line in found:
            print(line)
        return 1 if found else 0
    found, edges = circles(files)
    if graph:
        for f, g, names in edges:
            print('%s -> %s: %s' % (f, g, ', '.join(names)))
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
