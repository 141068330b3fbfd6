#!/usr/bin/env python3
"""Tabulates Nsight Compute's text report (ncu --section SpeedOfLight
--section WarpStateStats --section LaunchStats --section Occupancy
--section MemoryWorkloadAnalysis): one row per kernel and launch shape, the
median launch of each, with its count and the range of durations (launches
of one kernel and grid with different K share a row).

    scripts/ncu-table.py REPORT.txt
"""
import re
import sys
from collections import OrderedDict

HEAD = re.compile(r'\n(?=  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context)')


def metric(block, name):
    m = re.search(r'\n\s+' + re.escape(name) + r'(?:\s+[^\s\d][^\n]*?)?\s+([\d,.]+|no data)\n', block)
    return m.group(1) if m else '?'


def main(path):
    text = open(path, errors='replace').read()
    groups = OrderedDict()
    for block in HEAD.split(text)[1:]:
        head = block.split('\n', 1)[0].strip()
        m = re.match(r'(.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)', head)
        if not m:
            continue
        name = re.sub(r'\(.*', '', m.group(1).replace('void ', ''))
        name = re.sub(r'(\w+::)*\(anonymous namespace\)::|unnamed>::|weir::cuda::', '', name)
        grid = 'x'.join(g for g in m.group(2, 3, 4) if g != '1') or '1'
        flat = re.sub(r'\s+', ' ', block)
        stall = re.search(r'spends ([\d.]+) cycles being stalled (.*?)(?: \(|\. )', flat)
        row = {
            'us': float(metric(block, 'Duration').replace(',', '') or 0),
            'dram': metric(block, 'DRAM Throughput'),
            'l1': metric(block, 'L1/TEX Cache Throughput'),
            'regs': metric(block, 'Registers Per Thread'),
            'spill': metric(block, 'Local Memory Spilling Requests'),
            'occ': metric(block, 'Achieved Occupancy'),
            'cpi': metric(block, 'Warp Cycles Per Issued Instruction'),
            'stall': ('%s: %s' % (stall.group(1), stall.group(2)[:60])) if stall else '',
        }
        groups.setdefault((name, grid, m.group(5)), []).append(row)
    print('%4s  %-64s %10s %5s %8s %17s %6s %6s %5s %8s %6s %6s  %s' %
          ('n', 'kernel', 'grid', 'block', 'us', '(min-max)', 'DRAM%', 'L1%', 'regs', 'spills', 'occ%', 'cyc/i',
           'cycles a warp stalls on its top reason'))
    for (name, grid, block), rows in groups.items():
        rows.sort(key=lambda r: r['us'])
        r = rows[len(rows) // 2]
        span = '(%.2f-%.2f)' % (rows[0]['us'], rows[-1]['us'])
        print('%4d  %-64s %10s %5s %8.2f %17s %6s %6s %5s %8s %6s %6s  %s' %
              (len(rows), name[:64], grid, block, r['us'], span, r['dram'], r['l1'], r['regs'], r['spill'], r['occ'],
               r['cpi'], r['stall']))


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
