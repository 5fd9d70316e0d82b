#!/usr/bin/env python3
"""rewrite.py - turn a .cu file of cuda/ into host C++ for the CPU emulator (tests/emu/emu.am).

  kernel<T><<<grid, block, smem, stream>>>(args);  ->  emu_launch(emu_cfg(grid, block, smem, stream),
                                                       "kernel<T>", kernel<T>, args);
  extern __shared__ float sm[];                    ->  float *sm = (float *)emu_dynamic_smem();
  __shared__ T a[N];                               ->  static T a[N]; emu_shared_fresh(&a, sizeof a);
                                                       (blocks run one after another; each starts
                                                       with a of 0xff bytes)

A #line directive keeps compiler messages pointing at the .cu file.
usage: rewrite.py IN.cu OUT.cc
"""
import re
import sys


def launch_name_start(s, i):
    """Start of the kernel expression that ends just before s[i] (the first '<' of '<<<')."""
    j = i - 1
    while j >= 0:
        c = s[j]
        if c == ">":  # template arguments: back to the matching '<'
            depth = 0
            while j >= 0:
                if s[j] == ">":
                    depth += 1
                elif s[j] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            j -= 1
        elif c.isalnum() or c in "_:":
            j -= 1
        else:
            break
    return j + 1


def matching_paren(s, i):
    """Index of the ')' that closes the '(' at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "(":
            depth += 1
        elif s[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    raise SystemExit("rewrite.py: unbalanced parentheses after a launch")


def rewrite(s):
    out, pos = [], 0
    while True:
        i = s.find("<<<", pos)
        if i < 0:
            out.append(s[pos:])
            break
        start = launch_name_start(s, i)
        name = s[start:i].strip()
        if not name:
            raise SystemExit("rewrite.py: a launch without a kernel name at offset %d" % i)
        k = s.find(">>>", i)
        cfg = s[i + 3:k]
        p = s.index("(", k)
        q = matching_paren(s, p)
        args = s[p + 1:q].strip()
        out.append(s[pos:start])
        out.append('emu_launch(emu_cfg(%s), "%s", %s%s)' % (cfg, name, name, ", " + args if args else ""))
        pos = q + 1
    s = "".join(out)
    s = re.sub(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+)\s+(\w+)\s*\[\s*\]\s*;",
               r"\1 *\2 = (\1 *)emu_dynamic_smem();", s)
    s = re.sub(r"\b__shared__\s+([^;]+);", static_shared, s)
    return s


def static_shared(m):
    """__shared__ T a[N], b; -> the statics, then emu_shared_fresh for each, which fills it with
    0xff bytes once per block (a block's shared memory starts undefined, not as the last block left
    it)."""
    decls = m.group(1)
    names = []
    for d in decls.split(","):
        head = d.split("[")[0]
        ids = re.findall(r"[A-Za-z_]\w*", head)
        if not ids:
            raise SystemExit("rewrite.py: cannot find the name in __shared__ %s" % decls)
        names.append(ids[-1])
    return "static %s;%s" % (decls, "".join(" emu_shared_fresh(&%s, sizeof %s);" % (n, n) for n in names))


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    with open(dst, "w") as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(rewrite(text))


if __name__ == "__main__":
    main()
