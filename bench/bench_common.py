"""bench_common.py - what the benchmark scripts share (side_by_side.py,
cluster.py): their figures and Markdown tables, and the Release build of
parley they run unless given one. Standard library only."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fmt(v, kind):
    """A figure for a table: "ms" and "us" with 2 and 1 decimals, anything
    else a whole number with thousands separated; None is "—"."""
    if v is None:
        return "—"
    if kind == "ms":
        return f"{v:.2f}"
    if kind == "us":
        return f"{v:.1f}"
    return f"{v:,.0f}"


def markdown(head, rows):
    """A Markdown table, columns padded to their widest cell: the first
    column left-aligned, the others right-aligned."""
    w = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    out = ["| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(head)) + " |",
           "|" + "|".join("-" * (w[i] + 2) for i in range(len(head))) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i])
                                     for i, c in enumerate(r)) + " |")
    return "\n".join(out)


def build_release(targets, log):
    """Build the CMake targets into build-bench/ at the top of the tree as
    tools/run.sh builds (tools/build.sh: Release, the parley command
    optimized from a profile of itself), saying so through log: that
    directory."""
    bdir = os.path.join(ROOT, "build-bench")
    log(f"building {' and '.join(targets)} (Release, tools/build.sh) in {bdir}")
    subprocess.run([os.path.join(ROOT, "tools", "build.sh"), bdir, *targets], check=True,
                   stdout=subprocess.DEVNULL)
    return bdir
