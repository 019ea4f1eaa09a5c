#!/usr/bin/env python3
"""The longest functions of the C++ sources under the folders given (default: src), longest
first: lines from the signature's first line to the closing brace, comments included.

    scripts/function_lengths.py [DIR...]     TOP=N for the N longest (default 25)

A function is a brace at namespace or class scope after a parenthesis (comments, strings
and preprocessor lines set aside); its lambdas and local classes count with it. Made for
clang-formatted code: CONTRIBUTING.md, "Style and checks", keeps every function of src/
under 80 lines but the unpickler's opcode switch."""
import re, sys, os

def strip(src):
    # remove comments, strings, char literals; keep newlines
    out = []; i = 0; n = len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif src.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', src[i:])
            d = m.group(1); end = src.find(')' + d + '"', i); end = n if end < 0 else end + len(d) + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:end])); i = end
        elif c == '"' or (c == "'" and not (i > 0 and src[i-1].isalnum())):
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == '\\' else 1
            out.append(' ' * (j + 1 - i)); i = j + 1
        else:
            out.append(c); i += 1
    return ''.join(out)

def functions(path):
    src = strip(open(path, encoding='utf-8', errors='replace').read())
    src = re.sub(r'(?m)^[ \t]*#.*$', lambda m: ' ' * len(m.group(0)), src)
    lines = src.split('\n')
    res = []
    # scan braces; track stack of (kind, start_line, name)
    stack = []
    pos = 0
    line_starts = [0]
    for l in lines: line_starts.append(line_starts[-1] + len(l) + 1)
    import bisect
    def lineno(p): return bisect.bisect_right(line_starts, p)
    for m in re.finditer(r'[{}]', src):
        p = m.start()
        if src[p] == '{':
            in_fn = any(k == 'fn' for k, *_ in stack)
            before = src[:p].rstrip()
            # find the statement start: after previous ; { } at this level
            k = max(src.rfind(';', 0, p), src.rfind('{', 0, p), src.rfind('}', 0, p))
            head = src[k+1:p]
            kind = 'block'
            if not in_fn:
                h = ' '.join(head.split())
                if re.search(r'\b(namespace|class|struct|union|enum)\b[^()]*$', h) and not re.search(r'\)', h):
                    kind = 'scope'
                elif '(' in h and not re.match(r'^(=|return)', h) and not h.endswith('='):
                    kind = 'fn'
                elif re.search(r'\b(class|struct)\b', h):
                    kind = 'scope'
            if kind == 'fn':
                # signature start: first non-blank line of head (skip template<> lines? include them)
                s = k + 1
                while s < p and src[s] in ' \t\n': s += 1
                name = re.findall(r'([~\w:]+)\s*\(', head)
                stack.append(('fn', lineno(s), name[0] if name else '?'))
            else:
                stack.append((kind, 0, ''))
        else:
            if not stack: continue
            kind, start, name = stack.pop()
            if kind == 'fn':
                end = lineno(p)
                res.append((end - start + 1, path, start, name))
    return res

if __name__ == '__main__':
    allf = []
    for root in sys.argv[1:] or ['src']:
        for dp, dn, fn in os.walk(root):
            for f in fn:
                if f.endswith(('.cpp', '.hpp')):
                    allf += functions(os.path.join(dp, f))
    allf.sort(reverse=True)
    lim = int(os.environ.get('TOP', '25'))
    for n, p, s, name in allf[:lim]:
        print(f'{n:5d} {p}:{s} {name}')
