#!/usr/bin/env python3
"""Print a hardware card's `nccl_nvlink_by_size` block from XLA's measured collective table.

XLA's GPU cost model ships a table of NCCL collective throughputs it measured inside one
NVLink domain (`xla/service/gpu/model/default_collective_perf_table.txtpb`, a
`DeviceHloInstructionProfiles` textproto written by `collective_perf_table_gen_main`): per GPU
key (`sm_90`, `sm_100_B200`, `sm_100_GB200`, `sm_103`), per collective, replica-group layout and
size, `network_throughput_bytes_per_sec`. XLA's interpolator reads that throughput against the
bytes its cost analysis says the op transfers (`GpuHloCostAnalysis::BytesTransferred`): an
all-gather's output, a reduce-scatter's operand (the instruction's shape times the group
size, as `collective_interpolator.cc` rebuilds it), an all-to-all's buffer. This script
writes the same pairing: message bytes and GB/s per (collective, group size), for the group
layout in which the groups tile the measured GPUs (e.g. 4 x 2 for groups of 4 on 8 GPUs),
from `--min-bytes` to `--max-bytes` (1 MiB to 4 GiB by default: smaller messages cost little
time in training, larger ones run at the plateau).

Usage:
    scripts/nccl-sizes-from-xla.py TABLE.txtpb --key sm_90 --groups 2 4 8 --source "..."
    scripts/nccl-sizes-from-xla.py XLA_GIT_DIR --rev REV --key sm_103 --devices 64 \
        --groups 4 8 16 32 64 --source "..."

TABLE is a copy of the textproto (or a bare git directory with --rev, read with git show).
Nothing from the table is kept in this repository but the numbers the card quotes.
"""

import argparse
import re
import subprocess
import sys

OPS = {"all-gather": "all_gather", "reduce-scatter": "reduce_scatter", "all-to-all": "all_to_all"}
ELEMENT_BYTES = {"F32": 4, "BF16": 2, "F16": 2, "S8": 1, "U8": 1, "F8E4M3FN": 1, "F8E5M2": 1}


def read_table(path, rev):
    if rev:
        out = subprocess.run(
            ["git", f"--git-dir={path}", "show",
             f"{rev}:xla/service/gpu/model/default_collective_perf_table.txtpb"],
            check=True, capture_output=True, text=True)
        return out.stdout
    with open(path, encoding="utf-8") as f:
        return f.read()


def entries(text):
    """(gpu key, opcode, element type, first dimension, group size, groups, bytes/s)."""
    key = None
    current = None
    for line in text.splitlines():
        stripped = line.strip()
        m = re.match(r'key: "([^"]+)"', stripped)
        if m and line.startswith("  key"):
            key = m.group(1)
            continue
        if stripped.startswith("opcode:"):
            current = {"key": key, "op": stripped.split('"')[1], "dims": [], "shape_done": False}
            continue
        if current is None:
            continue
        m = re.match(r"element_type: (\w+)", stripped)
        if m and "type" not in current:
            current["type"] = m.group(1)
        m = re.match(r"dimensions: (\d+)", stripped)
        if m and not current["shape_done"]:
            current["dims"].append(int(m.group(1)))
        if stripped.startswith("layout"):
            current["shape_done"] = True
        m = re.match(r"num_replica_groups: (\d+)", stripped)
        if m:
            current["groups"] = int(m.group(1))
        m = re.match(r"num_devices_per_group: (\d+)", stripped)
        if m:
            current["group"] = int(m.group(1))
        m = re.match(r"network_throughput_bytes_per_sec: (\d+)", stripped)
        if m:
            current["rate"] = int(m.group(1))
            yield current
            current = None


def message_bytes(e):
    size = e["dims"][0] * ELEMENT_BYTES[e["type"]]
    # A reduce-scatter's transfer is its operand: the scattered shape times the group.
    return size * e["group"] if e["op"] == "reduce-scatter" else size


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table")
    parser.add_argument("--rev", help="read TABLE as a bare git directory at this revision")
    parser.add_argument("--key", required=True, help="GPU key in the table, e.g. sm_90")
    parser.add_argument("--groups", type=int, nargs="+", required=True)
    parser.add_argument("--devices", type=int,
                        help="GPUs the groups tile (default: the most the key measured)")
    parser.add_argument("--min-bytes", type=int, default=1 << 20)
    parser.add_argument("--max-bytes", type=int, default=1 << 32)
    parser.add_argument("--source", required=True, help="the card's source sentence")
    args = parser.parse_args()

    rows = [e for e in entries(read_table(args.table, args.rev))
            if e["key"] == args.key and e["op"] in OPS and e.get("group") and e["dims"]]
    if not rows:
        sys.exit(f"no collective entries under key {args.key!r}")
    devices = args.devices or max(r["group"] * r["groups"] for r in rows)
    print("nccl_nvlink_by_size:")
    print(f'  source: "{args.source}"')
    print("  curves:")
    for op in OPS:
        for group in args.groups:
            points = sorted(
                (message_bytes(r), r["rate"] / 1e9) for r in rows
                if r["op"] == op and r["group"] == group and r["group"] * r["groups"] == devices
                and args.min_bytes <= message_bytes(r) <= args.max_bytes)
            if not points:
                sys.exit(f"no {op} entries for groups of {group} tiling {devices} GPUs")
            sizes = ", ".join(str(b) for b, _ in points)
            rates = ", ".join(f"{g:.1f}" for _, g in points)
            print(f"    - {{op: {OPS[op]}, group: {group}, message_bytes: [{sizes}], gb_per_s: [{rates}]}}")


if __name__ == "__main__":
    main()
