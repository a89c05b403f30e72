#!/usr/bin/env python3
"""Compares two PTX files kernel by kernel (.entry functions), after normalizing what changes
without the code changing: basic-block and temporary labels, the anonymous-namespace hash,
.loc / .file lines, and the parameter block's size (a struct that grew at its end). Prints each
function that differs (with both sizes) or exists on one side only, then the counts; exit status
1 when any differs. `--diff NAME_SUBSTRING` prints a unified diff of the matching function.

  scripts/ptx_compare.py A.ptx B.ptx [--diff SUBSTRING]
"""
import difflib
import re
import sys


def functions(path):
    txt = open(path).read()
    txt = re.sub(r'\$L__BB\d+_\d+', '$BB', txt)
    txt = re.sub(r'\$L__tmp\d+', '$tmp', txt)
    txt = re.sub(r'_GLOBAL__N__[0-9a-f_]+', '_GN', txt)
    txt = re.sub(r'_param_0\[\d+\]', '_param_0[N]', txt)
    out, cur, buf = {}, None, []
    for line in txt.split('\n'):
        s = line.strip()
        if s.startswith(('.loc', '.file', '// .globl')):
            continue
        m = re.search(r'\.entry\s+([^\s(]+)', line)
        if m:
            if cur:
                out[cur] = '\n'.join(buf)
            cur, buf = m.group(1), []
        if cur:
            buf.append(line)
    if cur:
        out[cur] = '\n'.join(buf)
    return out


def main():
    args = sys.argv[1:]
    want = None
    if '--diff' in args:
        i = args.index('--diff')
        want = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    a, b = functions(args[0]), functions(args[1])
    same = differ = 0
    for name in sorted(set(a) | set(b)):
        if a.get(name) == b.get(name):
            same += 1
            continue
        differ += 1
        print(f'DIFF {name[:140]}  {len(a.get(name, ""))} / {len(b.get(name, ""))} chars'
              + ('' if name in a and name in b else '  (one side only)'))
        if want and want in name:
            for line in difflib.unified_diff(a.get(name, '').split('\n'), b.get(name, '').split('\n'),
                                             lineterm='', n=2):
                print(line)
    print(f'{same} functions the same, {differ} differ')
    sys.exit(1 if differ else 0)


if __name__ == '__main__':
    main()
