#!/usr/bin/env python3
"""Stall reasons of one kernel from ncu's SASS source view, summed per reason.

Input: the csv of `ncu --section SourceCounters --section WarpStateStats --page source --csv
--print-source sass ...` (one kernel launch; ncu's own lines before the table are skipped).
Prints, for the whole kernel and for each range of SASS lines given (0-based row numbers of the
table, `A:B` = rows A..B-1), the samples and each reason's share, largest first; `--find TEXT`
prints the rows whose SASS contains TEXT (to locate ranges: e.g. USETMAXREG, UCGABAR, EXIT);
`--top N` prints the N rows with the most stall samples (row, samples, SASS, top reasons).

  scripts/ncu_stalls.py ncu.csv [A:B ...] [--find TEXT ...] [--top N]
"""
import csv
import sys


def load(path):
    rows = list(csv.reader(open(path)))
    heads = [i for i, r in enumerate(rows) if r and r[0] == 'Address']
    if not heads:
        sys.exit(f'{path}: no source table (was it run with --page source --csv?)')
    h = rows[heads[0]]
    return h, [r for r in rows[heads[0] + 1:] if len(r) == len(h)]


def stalls(h, r):
    """The stall samples of one SASS row, by reason column (the 'Not Issued' variants left out)."""
    return {c: float(r[i] or 0) for i, c in enumerate(h) if c.startswith('stall_') and 'Not Issued' not in c}


def summary(h, data, lo, hi):
    tot = {}
    for r in data[lo:hi]:
        for c, v in stalls(h, r).items():
            tot[c] = tot.get(c, 0.0) + v
    n = sum(tot.values())
    shares = ' '.join(f'{c[6:]}={100 * v / n:.1f}%' for c, v in sorted(tot.items(), key=lambda x: -x[1]) if v > 0)
    return f'rows {lo}:{hi} samples {n:.0f} {shares}' if n else f'rows {lo}:{hi} no samples'


def main(argv):
    if not argv or argv[0] in ('-h', '--help'):
        sys.exit(__doc__)
    h, data = load(argv[0])
    ranges, finds, top, i = [], [], 0, 1
    while i < len(argv):
        if argv[i] == '--top' and i + 1 < len(argv):
            top = int(argv[i + 1])
            i += 2
            continue
        if argv[i] == '--find' and i + 1 < len(argv):
            finds.append(argv[i + 1])
            i += 2
            continue
        lo, hi = argv[i].split(':')
        ranges.append((int(lo), int(hi)))
        i += 1
    print(summary(h, data, 0, len(data)))
    for lo, hi in ranges:
        print(summary(h, data, lo, hi))
    for text in finds:
        for n, r in enumerate(data):
            if text in r[1]:
                print(n, r[1].strip()[:80])
    if top:
        per = []
        for n, r in enumerate(data):
            vals = stalls(h, r)
            per.append((sum(vals.values()), n, r[1].strip()[:60], vals))
        total = sum(p[0] for p in per) or 1
        for tot, n, sass, vals in sorted(per, reverse=True)[:top]:
            why = ' '.join(f'{c[6:]}={v:.0f}' for c, v in sorted(vals.items(), key=lambda x: -x[1])[:3] if v > 0)
            print(f'{n:5d} {100 * tot / total:5.1f}% {sass:60s} {why}')


if __name__ == '__main__':
    main(sys.argv[1:])
