#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Worst-case kernel stack used by fastreg's own frames, from each entry point.

Usage: scripts/stack-depth.py [fastreg.ko] [-v] [-x REGEX] [--max BYTES]
                                                               (x86_64; objdump, c++filt)

Reads ``objdump -dr`` of the module. In each function it follows the stack pointer along
the code (pushes, ``sub/add $N,%rsp``, ``enter``, arguments pushed for a call) and notes
the depth at each call; the frame is the deepest point plus 8 for the return address. A
call goes to its R_X86_64_PLT32 relocation or its direct target; a ``jmp`` to another
function is a tail call. Entry points are the functions whose address is taken (by a
relocation other than a call, in code or data), named by kind: CQ ``done`` handlers, the
rdma_cm handler, ib_client add/remove, work items, debugfs files, module init/exit. For
each: the deepest chain of fastreg frames and where it leaves the module; and the
deepest call out whose ``caller:target`` matches REGEX (default: the posting verbs,
below which the driver's own stack adds to fastreg's).

Limits: static, own frames only: the kernel's frames above an entry point and below a
call out are not counted. Rust trait-object calls (``call *0xK(%reg)``, or a register
loaded from ``0xK(%reg)``) go to slot K/8 of the module's vtables, of the trait HINTS
names for the caller (or ``dyn Trait`` in its name; marked ``[+K]``), else of every
trait (over-approximated, ``[~K]``). Other indirect calls (the kernel's ``fmt::Write``,
the C helpers' ``ops->post_send``) count as leaving the module (-v lists them).
Recursion is reported and cut. A callback the kernel makes from below a fastreg frame
(a ``Display`` impl run by printk) starts a chain of its own, not added to its caller's.

With --max BYTES, exits 1 (naming them) when an entry point's chain is deeper: make test
checks the module against its budget (Documentation/design.rst, "Stack").
"""
import argparse, collections, re, shutil, subprocess, sys

INSN = re.compile(r'^\s*([0-9a-f]+):\t(\S+)\s*(.*)$')
RELOC = re.compile(r'^\s*([0-9a-f]+): (R_X86_64_\w+)\s+(.*)$')
FUNC = re.compile(r'^([0-9a-f]+) <(.*)>:$')
ADDEND = re.compile(r'^(.*?)([+-]0x[0-9a-f]+)?$')
KINDS = [  # (regex on the demangled name, who calls it)
    (r'^init_module$', 'module init (insmod)'),
    (r'^cleanup_module$', 'module exit (rmmod)'),
    (r'done_callback|::err_done$', 'CQ completion (ib_cqe.done)'),
    (r'::cm_handler$', 'rdma_cm event handler'),
    (r'::add_callback$|::remove_callback$', 'ib_client add/remove'),
    (r'WorkItemPointer.*>::run$', 'work item'),
    (r'timer', 'timer'),
    (r'debugfs::file_ops::write::', 'debugfs write'),
    (r'debugfs::file_ops::writer_(act|open)::', 'debugfs read/open'),
    (r'kunit', 'KUnit test'),
]
HINTS = [  # (regex on a caller's name, the trait its indirect calls go through)
    (r'pool::Pool>::|drop_in_place::<.*pool::Pool>', 'pool::Waiter'),
    (r'Conn>::(deliver|drive|reap|submit)$|dial::Pending>::fail$|api::submit$'
     r'|Iface>::run_dials$', 'xfer::Client'),
    (r'Conn>::control_request$|Iface>::new$|NetTick as', 'control::Control'),
]
ENTRY_SECTIONS = r'\.(text|init\.text|exit\.text|data|rodata|init\.data|exit\.data|gnu\.linkonce)'


def run(*cmd, stdin=None):
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    return p.stdout if p.returncode == 0 else sys.exit(p.stderr.strip())


def demangle(names):
    """Rust's v0 names through c++filt: without it the entry points are not recognized
    and the vtables not found, so it is required."""
    if not shutil.which('c++filt'):
        sys.exit('stack-depth: c++filt (binutils) is needed to read the Rust names')
    names = sorted(set(names))
    out = run('c++filt', stdin='\n'.join(names)).splitlines()
    left = [d for d in out if d.startswith('_R')]
    if len(out) != len(names) or left:
        sys.exit('stack-depth: c++filt left Rust names mangled (%s): too old for v0 names'
                 % (left[:1] or ['?'])[0])
    return {n: re.sub(r'\[[0-9a-f]{16}\]', '', d) for n, d in zip(names, out)}


def short(name, width=100):
    name = re.sub(r'\b(?:[a-z_]\w*::)+([A-Z]\w*)', r'\1', name)    # paths of types
    name = re.sub(r'(?:\w+::)+(\w+::\w+)', r'\1', name)
    return name if len(name) <= width else name[:width - 3] + '...'


def leaf(name):
    """The last path component of a name, generics left out."""
    while (new := re.sub(r'<[^<>]*>', '', name)) != name:
        name = new
    return [p for p in re.sub(r'::\{.*', '', name).split('::') if p.strip()][-1]


def parse(ko):
    """Functions (name -> section, address, instructions), relocations of all sections."""
    funcs, at, sec, cur = {}, {}, None, None
    if not shutil.which('objdump'):
        sys.exit('stack-depth: objdump (binutils) is needed')
    head = run('objdump', '-f', ko)
    if 'file format elf64-x86-64' not in head:
        sys.exit('stack-depth: %s is not an x86_64 ELF object (the only kind read)' % ko)
    for line in run('objdump', '-dr', '--no-show-raw-insn', ko).splitlines():
        if line.startswith('Disassembly of section '):
            sec = line.split()[-1].rstrip(':')
        elif m := FUNC.match(line):
            cur = funcs[m.group(2)] = {'sec': sec, 'addr': int(m.group(1), 16), 'insns': []}
            at[(sec, cur['addr'])] = m.group(2)
        elif cur and (m := RELOC.match(line)):
            cur['insns'][-1][3] = (m.group(2), m.group(3))
        elif cur and (m := INSN.match(line)):
            cur['insns'].append([int(m.group(1), 16), m.group(2), m.group(3), None])
    relocs, sec = [], None
    for line in run('objdump', '-r', ko).splitlines():
        if m := re.match(r'RELOCATION RECORDS FOR \[(.*)\]:', line):
            sec = m.group(1)
        elif m := re.match(r'([0-9a-f]+) (R_\w+)\s+(\S+)$', line):
            relocs.append((sec, int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs, at, relocs


def target(value, rtype, funcs, at):
    """The module function a relocation names, or None."""
    base, add = ADDEND.match(value).groups()
    add = (int(add, 16) if add else 0) + (4 if rtype in ('R_X86_64_PC32', 'R_X86_64_PLT32') else 0)
    if base in funcs:
        return base if add == 0 else None
    return at.get((base, add)) if base.startswith('.') else None


def analyse(f, funcs, at, vtables):
    """Frame size, and calls as (depth before the call, tail call?, target)."""
    insns = f['insns']
    index = {i[0]: n for n, i in enumerate(insns)}
    depth, work, calls, deepest, seen = {0: 0}, [0], {}, 0, collections.Counter()
    while work:
        n = work.pop()
        d = depth[n]
        _, op, args, rel = insns[n]
        succ, tgt, tail = [n + 1], None, op == 'jmp'
        if m := re.match(r'\$(0x[0-9a-f]+),%rsp$', args):
            imm = int(m.group(1), 16)
            d += {'sub': imm, 'add': -imm, 'and': -imm % 2**64 - 8}.get(op, 0)
        elif op in ('push', 'pushf', 'pop', 'popf'):
            d += 8 if op[1] == 'u' else -8
        elif op == 'enter':
            d += 8 + int(args.split(',')[0][1:], 16)
        elif (op, args) == ('lea', '0x8(%rsp),%rsp'):
            d -= 8
        elif op in ('ret', 'ud2', 'int3'):
            succ = []
        elif op in ('call', 'jmp'):
            m = re.match(r'([0-9a-f]+) <', args)
            a = int(m.group(1), 16) if m else None
            if rel:
                tgt = target(rel[1], rel[0], funcs, at) or ADDEND.match(rel[1]).group(1)
                if tgt.startswith('__x86_indirect_thunk'):
                    sys.exit('stack-depth: built with retpolines (%s): indirect calls are '
                             'not followed through thunks; build without them' % tgt)
            elif tail and a in index:
                succ = [index[a]]
            elif a is not None:
                tgt = at.get((f['sec'], a), '?%x' % a)
            else:
                tgt = indirect(insns, n, args, f['name'], vtables)
            if tgt is not None:
                key = (tail, tgt if isinstance(tgt, str) else tgt[:2])
                calls[key] = (max(d, calls.get(key, (0,))[0]), tail, tgt)
                succ = [] if tail else succ
        elif op.startswith('j') and (m := re.match(r'([0-9a-f]+) <', args)):
            succ.append(index.get(int(m.group(1), 16), len(insns)))
        deepest = max(deepest, d, depth[n])
        for k in succ:
            if k < len(insns) and depth.get(k, -1) < d and seen[k] < 8:
                seen[k] += 1
                depth[k] = d
                work.append(k)
    return deepest + 8, list(calls.values())


def indirect(insns, n, args, caller, vtables):
    """An indirect call: ('vtable', '+slot', methods), or its operand (leaves the module)."""
    m = re.match(r'\*(?:(0x[0-9a-f]+)?\((%\w+)\))?(%\w+)?$', args)
    slot = int(m.group(1) or '0', 16) if m and m.group(2) else None
    for back in range(n - 1, max(n - 16, -1), -1) if m and m.group(3) else []:
        op, a = insns[back][1:3]
        if a.endswith(',' + m.group(3)) and op not in ('test', 'cmp'):
            if op == 'mov' and (k := re.match(r'(0x[0-9a-f]+)?\(%\w+\),', a)):
                slot = int(k.group(1) or '0', 16)
            break
    if slot is None or 'fmt::' in caller:
        return args
    d = re.search(r'dyn ([\w:]+)', caller)
    trait = next((t for r, t in HINTS if re.search(r, caller)), d and d.group(1))
    cands = sorted({v[slot] for t, v in vtables if slot in v and (not trait or t.endswith(trait))})
    return ('vtable', ('+' if trait else '~') + hex(slot), cands) if cands else args


def find_vtables(relocs, funcs, at, dem):
    """Rust vtables in .rodata, [drop_in_place or 0, size, align, methods...]: (trait, slots)."""
    rod = {off: target(v, t, funcs, at) for s, off, t, v in relocs if s == '.rodata'}
    vtables, used = [], set()
    for off in sorted(rod):
        if off in used or not rod[off]:
            continue
        if rod.get(off + 24) and off + 8 not in rod and off + 16 not in rod:
            start = off
        elif all(off - k not in rod for k in (8, 16, 24)):
            start = off - 24
        else:
            continue
        slots, k = {0: rod[start]} if rod.get(start) else {}, 24
        while rod.get(start + k):
            slots[k], k = rod[start + k], k + 8
        used.update(start + k for k in slots)
        if m := re.search(r' as ([\w:]+)>::\w+$', dem[slots[24]] if 24 in slots else ''):
            vtables.append((m.group(1), slots))
    return vtables


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('ko', nargs='?', default='fastreg.ko')
    ap.add_argument('-v', action='store_true', help='show everything')
    ap.add_argument('-x', default=r'post_send|post_recv', help='calls out to find, caller:target')
    ap.add_argument('--max', type=int, help='fail when an entry point needs more bytes')
    a = ap.parse_args()
    if a.max is not None and a.max <= 0:
        ap.error('--max takes a positive number of bytes')
    funcs, at, relocs = parse(a.ko)
    dem = demangle(list(funcs) + [ADDEND.match(r[3]).group(1) for r in relocs])
    for n, f in funcs.items():
        f['name'] = dem[n]
    vtables = find_vtables(relocs, funcs, at, dem)
    in_vtable = {fn for _, v in vtables for fn in v.values()}
    info = {n: analyse(f, funcs, at, vtables) for n, f in funcs.items()}
    taken = {'init_module', 'cleanup_module'} & set(funcs)
    for s, off, t, v in relocs:
        fn = target(v, t, funcs, at) if t != 'R_X86_64_PLT32' else None
        if fn and re.match(ENTRY_SECTIONS, s) and not (s == '.rodata' and fn in in_vtable):
            taken.add(fn)
    cycles, unknown = [], set()

    def walk(fn, stack, memo, want):
        """(bytes, chain, exit) of the deepest chain of frames (want None) or of calls out
        matching want; recursion is cut at the first call back into the stack."""
        if fn in memo:
            return memo[fn]
        frame, calls = info[fn]
        best = (frame, [(frame, fn, '')], None) if want is None else (0, [], None)
        stack.append(fn)
        for d, tail, tgt in sorted(calls, key=lambda c: -c[0]):
            here = d + (0 if tail else 8)
            subs = tgt[2] if isinstance(tgt, tuple) else [tgt] if tgt in funcs else []
            via = tgt[1] if isinstance(tgt, tuple) else ''
            if not subs:
                if tgt.startswith('*'):
                    unknown.add((fn, tgt))
                if want is None and best[2] is None and len(best[1]) == 1:
                    best = (frame, best[1], tgt)
                elif want and here > best[0] and re.search(want, f'{dem[fn]}:{dem.get(tgt, tgt)}'):
                    best = (here, [(here, fn, '')], tgt)
            for sub in subs:
                if sub in stack:
                    cycles.append(set(stack[stack.index(sub):]))
                    continue
                b, chain, ex = walk(sub, stack, memo, want)
                if b and here + b > best[0]:
                    best = (here + b, [(here, fn, via)] + chain, ex)
        stack.pop()
        memo[fn] = best
        return best

    kind = {fn: next((k for r, k in KINDS if re.search(r, dem[fn])), None) for fn in taken}
    rows = sorted(((kind[fn], walk(fn, [], {}, None), walk(fn, [], {}, a.x), fn) for fn in taken),
                  key=lambda r: (r[0] is None, r[0] or '', -r[1][0], r[3]))
    print('%s: stack of its own frames, per entry point (bytes each frame adds)' % a.ko)
    shown, others = {}, []
    for k, (total, chain, ex), (xb, xchain, xex), fn in rows:
        if k is None:
            others.append((total, fn))
        elif len(chain) == 1 and not a.v:
            print('%6d B  %s: %s -> %s' % (total, k, short(dem[fn], 60), leaf(dem.get(ex) or '-')))
            continue
        else:
            print('\n%6d B  %s: %s' % (total, k, short(dem[fn], 70)))
            for i, (b, f, via) in enumerate(chain):
                rest = total - sum(c[0] for c in chain[:i])
                if shown.get(f) == (rest, ex) and i and not a.v:
                    print('   %6d  %s, and below it as above (%d B)' % (b, short(dem[f], 70), rest))
                    break
                shown[f] = (rest, ex)
                print('   %6d  %s%s' % (b, via and '[%s] ' % via, short(dem[f], 90)))
            else:
                if ex:
                    print('           -> %s' % short(dem.get(ex, ex), 80))
            if xb and (a.v or xex != ex):
                print('   calls out /%s/ at %d B: %s, via %s' % (
                    a.x, xb, leaf(dem.get(xex, xex)), ' > '.join(leaf(dem[f]) for *_, f, _ in xchain)))
    if not any(r[0] for r in rows):
        sys.exit('stack-depth: no entry point found in %s' % a.ko)
    # Every address-taken function is held to the budget, classified or not (a callback of
    # a kind KINDS does not name yet must not escape it).
    over = [(r[1][0], r[0] or 'address taken', dem[r[3]]) for r in rows
            if a.max is not None and r[1][0] > a.max]
    print('\nOther address-taken functions (vtables, fmt callbacks), deepest first:')
    for total, fn in sorted(others, reverse=True)[:None if a.v else 8]:
        print('%6d B  %s' % (total, short(dem[fn], 100)))
    print('\nLargest frames:')
    for fn in sorted(funcs, key=lambda x: -info[x][0])[:15]:
        print('%6d B  %s' % (info[fn][0], short(dem[fn], 100)))
    groups = []         # functions in recursion, merged when they share one
    for c in cycles:
        for g in [g for g in groups if g & c]:
            groups.remove(g)
            c |= g
        groups.append(c)
    for g in sorted(groups, key=len):
        print('recursion (cut): ' + ', '.join(sorted(short(dem[x], 60) for x in g)))
    if a.v:
        print('\nIndirect calls counted as leaving the module:')
        for fn, t in sorted(unknown):
            print('  %s: %s' % (short(dem[fn], 80), t))
        for t, v in vtables:
            print('vtable %s: %s' % (t, ', '.join('+%#x %s' % (k, leaf(dem[x])) for k, x in v.items())))
    if a.max is not None:
        for b, k, f in over:
            print('over the budget of %d B: %d B, %s: %s' % (a.max, b, k, short(f, 70)))
        print('deepest entry point: %d B of %d B' % (max(r[1][0] for r in rows), a.max))
        sys.exit(1 if over else 0)


if __name__ == '__main__':
    main()
