#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Man pages (section 3) for every function of fern.h, made from fern.h itself.

The header is the one source: a function's page is the comment written
directly above its declaration (declarations that follow each other with no
blank line share that comment), the section of the header it sits in, and
its prototype, followed by the introduction of its section (the first
free-standing comment under the section's title), which applies to every
function of the section.
So the reference cannot drift from the header: edit the comment in fern.h
and the page follows at the next build.

    mkman.py HEADER OUTDIR VERSION     write OUTDIR/man3/fern_*.3 and fern.3
                                       (and the structure pages, below)
    mkman.py --list HEADER             print the public function names

fern.3 is the overview: every function by section, one line each.
The structures a program fills in (STRUCT_PAGES) get a page each, made the
same way from the comment above the typedef and each field's comment. A
call whose comment has no sentence saying what it does (only its return
values) or a field without a comment stops the build: fix the header.
"""
import os
import re
import sys

DECL_START = re.compile(r"^(?:[A-Za-z_][\w ]*?[\s*])(fern_\w+)\(")
SECTION = re.compile(r"^/\* (\S.*?)\s*\*/$")
RULE = re.compile(r"^/\* -{20,} \*/$")


def comment_text(lines):
    """The text of a /* ... */ block, one string per line, markers removed."""
    out = []
    for i, line in enumerate(lines):
        s = line.rstrip()
        if i == 0:
            s = re.sub(r"^\s*/\*+ ?", "", s)
        else:
            s = re.sub(r"^\s*\* ?", "", s, count=1) if re.match(r"^\s*\*(?!/)", s) else s.strip()
        s = re.sub(r"\s*\*/\s*$", "", s)
        out.append(s)
    while out and not out[-1].strip():
        out.pop()
    while out and not out[0].strip():
        out.pop(0)
    return out


def parse(path):
    """[(section, intro, [(name, prototype, comment_lines)])] in header order."""
    src = open(path, encoding="utf-8").read().split("\n")
    sections = []
    cur = None
    pending = None  # (comment lines, index of the line after it)
    group_comment = None
    prev_decl_end = -2
    i = 0
    while i < len(src):
        line = src[i]
        if RULE.match(line) and i + 2 < len(src) and RULE.match(src[i + 2]):
            m = SECTION.match(src[i + 1])
            cur = {"title": m.group(1) if m else src[i + 1], "intro": None, "funcs": []}
            sections.append(cur)
            pending = None
            i += 3
            continue
        if line.lstrip().startswith("/*") and cur is not None:
            j = i
            while "*/" not in src[j]:
                j += 1
            block = src[i:j + 1]
            text = comment_text(block)
            # A comment inside a struct or after code on the same line is not
            # documentation of a declaration.
            if line.startswith("/*"):
                pending = (text, j + 1)
                # Free-standing (a blank line follows): the section intro, if first.
                if (j + 1 < len(src) and not src[j + 1].strip() and cur["intro"] is None
                        and not cur["funcs"]):
                    cur["intro"] = text
            i = j + 1
            continue
        m = DECL_START.match(line)
        if m and cur is not None and not line.startswith(("typedef", "#")):
            j = i
            while not re.search(r"[;{]\s*$", src[j]):
                j += 1
            proto = " ".join(s.strip() for s in src[i:j + 1])
            proto = re.sub(r"\s*\{.*$", ";", proto)
            proto = re.sub(r"\s+", " ", proto)
            if pending and pending[1] == i:
                group_comment = pending[0]
            elif prev_decl_end != i - 1:
                group_comment = None  # starts a group of its own, uncommented
            cur["funcs"].append((m.group(1), proto, group_comment))
            prev_decl_end = j
            pending = None
            i = j + 1
            continue
        i += 1
    return [s for s in sections if s["funcs"]]


def roff_escape(s):
    s = s.replace("\\", "\\e")
    if s.startswith((".", "'")):
        s = "\\&" + s
    return s


def roff_paragraphs(lines):
    """Comment lines to roff: blank lines split paragraphs; indented lines
    (code, tables) are kept as they are, unfilled."""
    out = []
    in_code = False
    para_open = False
    for line in lines:
        if not line.strip():
            if in_code:
                out.append(".fi")
                in_code = False
            para_open = False
            continue
        code = line.startswith("    ") or line.startswith("\t")
        if code and not in_code:
            out.append(".PP")
            out.append(".nf")
            in_code = True
        elif not code and in_code:
            out.append(".fi")
            in_code = False
            para_open = False
        if not code and not para_open:
            out.append(".PP")
            para_open = True
        out.append(roff_escape(line if code else line.strip()))
    if in_code:
        out.append(".fi")
    return out


def th(name, version):
    return f'.TH {name.upper()} 3 "" "fern {version}" "fern manual"'


def page(name, proto, comment, section, siblings, version):
    lines = [
        '.\\" Generated by docs/man/mkman.py from include/fern/fern.h: edit the header, not this file.',
        th(name, version),
        ".SH NAME",
        f"{name} \\- {summary(comment, section)}",
        ".SH SYNOPSIS",
        ".nf",
        ".B #include <fern/fern.h>",
        ".PP",
        roff_escape(proto),
        ".fi",
        ".PP",
        "Link with \\fB\\-lfern\\fR (pkg-config: \\fBfern\\fR; CMake: \\fBfern::fern\\fR).",
        ".SH DESCRIPTION",
    ]
    if comment:
        # What the call does first; a warning paragraph ("NOTE: ...") that
        # the header puts first follows it.
        paras, cur = [], []
        for line in comment + [""]:
            if line.strip():
                cur.append(line)
            elif cur:
                paras.append(cur)
                cur = []
        notes = [p for p in paras if p[0].strip().startswith("NOTE:")]
        ordered = [p for p in paras if p not in notes] + notes
        lines += roff_paragraphs([l for p in ordered for l in p + [""]])
    else:
        lines += [".PP", f"One of the {roff_escape(section['title'])} calls of fern.h, described below."]
    if section["intro"]:
        # What the header says of the whole section applies to this call too.
        lines.append(f".SS {roff_escape(section['title'])}")
        lines += roff_paragraphs(section["intro"])
    see = [s for s in siblings if s != name] + [t for t in STRUCT_PAGES if re.search(rf"\b{t}\b", proto)]
    lines += [".SH SEE ALSO", "".join(f"\\fB{s}\\fR(3), " for s in see) + "\\fBfern\\fR(3)"]
    return "\n".join(lines) + "\n"


# Sentences that are not what a call does: its return values ("Return 0;
# EINVAL if ...", "Returns ETIMEDOUT ...") and warnings ("NOTE: ..."), which
# come first in some comments.
NOT_SUMMARY = re.compile(r"^(Return|Returns|NOTE\b)")


def sentences(comment):
    """The comment's sentences (ended by . : or ;), paragraph by paragraph;
    a paragraph that opens with NOTE: is left out whole."""
    paras, cur = [], []
    for line in (comment or []) + [""]:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    out = []
    for p in paras:
        if p.startswith("NOTE:"):
            continue
        out += split_sentences(p)
    return out


def split_sentences(text):
    """Split at . : ; followed by a space or the end, outside parentheses
    ("Fill *s (read without stopping workers; ...)" is one sentence)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch in ".:;" and depth == 0 and (i + 1 == len(text) or text[i + 1].isspace()):
            out.append(text[start:i + 1].strip())
            start = i + 1
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


def summary(comment, section):
    """For the NAME line: the first sentence of the comment that says what the
    call does, shortened. None if there is no such sentence (main refuses to
    make a page without one)."""
    for s in sentences(comment):
        if NOT_SUMMARY.match(s):
            continue
        s = s.rstrip(".:;")
        if len(s) > 90:
            s = s[:87].rsplit(" ", 1)[0] + "..."
        return roff_escape(s)
    return None


# The structures a program fills in, one page each (fern_config(3),
# fern_attr(3)): the comment above the typedef, the definition, and every
# field with its comment.
STRUCT_PAGES = ("fern_config", "fern_attr")
FIELD = re.compile(r"^\s+(.*?[\s*])(\w+)(\[[^]]*\])?;\s*(?:/\*\s?(.*?)\s*(\*/)?)?$")


def parse_structs(path, names):
    """{name: (comment lines, definition lines, [(decl, field, text)])}."""
    src = open(path, encoding="utf-8").read().split("\n")
    out = {}
    for i, line in enumerate(src):
        m = re.match(r"^typedef struct (\w+) \{$", line)
        if not m or m.group(1) not in names:
            continue
        name = m.group(1)
        comment = []
        if i > 0 and src[i - 1].rstrip().endswith("*/"):
            j = i - 1
            while not src[j].lstrip().startswith("/*"):
                j -= 1
            comment = comment_text(src[j:i])
        j = i + 1
        fields = []
        definition = [line]
        while not src[j].startswith("}"):
            fm = FIELD.match(src[j])
            if fm:
                decl = (fm.group(1).strip() + " " + fm.group(2) + (fm.group(3) or "")).replace("* ", "*")
                text = [fm.group(4) or ""]
                definition.append("    " + decl + ";")
                closed = bool(fm.group(5)) or not fm.group(4) and "/*" not in src[j]
                while not closed:
                    j += 1
                    t = src[j].strip()
                    closed = t.endswith("*/")
                    t = re.sub(r"^\*\s?", "", re.sub(r"\s*\*/$", "", t))
                    text.append(t)
                fields.append((decl, fm.group(2), " ".join(x for x in text if x)))
            j += 1
        definition.append(src[j])
        out[name] = (comment, definition, fields)
    return out


def struct_page(name, comment, definition, fields, users, version):
    what = summary(comment, None)
    if not what or not fields:
        raise SystemExit(f"mkman: struct {name} needs a comment saying what it is, and fields")
    lines = [
        '.\\" Generated by docs/man/mkman.py from include/fern/fern.h: edit the header, not this file.',
        th(name, version),
        ".SH NAME",
        f"{name} \\- {what}",
        ".SH SYNOPSIS",
        ".nf",
        ".B #include <fern/fern.h>",
        ".PP",
    ] + [roff_escape(l) for l in definition] + [".fi", ".SH DESCRIPTION"]
    lines += roff_paragraphs(comment)
    lines.append(".SH FIELDS")
    for decl, field, text in fields:
        if not text:
            raise SystemExit(f"mkman: field {name}.{field} has no comment")
        lines += [".TP", f"\\fB{roff_escape(decl)}\\fR", roff_escape(text)]
    lines += [".SH SEE ALSO", ", ".join(f"\\fB{u}\\fR(3)" for u in users + ["fern"])]
    return "\n".join(lines) + "\n"


def overview(sections, structs, version):
    lines = [
        '.\\" Generated by docs/man/mkman.py from include/fern/fern.h: edit the header, not this file.',
        th("fern", version),
        ".SH NAME",
        "fern \\- green threads for C and C++ on Linux",
        ".SH SYNOPSIS",
        ".nf",
        ".B #include <fern/fern.h>",
        ".fi",
        ".PP",
        "Link with \\fB\\-lfern\\fR (pkg-config: \\fBfern\\fR; CMake: \\fBfern::fern\\fR,",
        "or \\fBfern::cxx\\fR for C++ with \\fBfern/fern.hpp\\fR).",
        ".SH DESCRIPTION",
        "fern runs many cheap, stackful threads over a few kernel threads. A thread",
        "runs until it blocks, yields or ends, or until it has used its time slice",
        "while others wait: preemption, on by default, interrupts it in the",
        "executable's own code, never inside a shared library unless listed in",
        "\\fBFERN_PREEMPT_LIBS\\fR, nor inside fern (docs/preemption.md).",
        "Each function below has its own page. Runtime calls return",
        "0 or an errno value; the I/O calls keep the POSIX shape (\\-1 and errno);",
        "\\fBfern_select\\fR(3) returns a negative errno value.",
        "The settings and environment variables are described in",
        "docs/configuration.md of the source tree.",
    ]
    for sec in sections:
        lines.append(f".SS {roff_escape(sec['title'])}")
        for name, _, comment in sec["funcs"]:
            lines += [".TP", f"\\fB{name}\\fR(3)", summary(comment, sec)]
    lines.append(".SS Structures")
    for name in STRUCT_PAGES:
        lines += [".TP", f"\\fB{name}\\fR(3)", summary(structs[name][0], None)]
    lines += [".SH SEE ALSO",
              "\\fBfern-hook\\fR(7): libc's blocking calls on green threads;",
              "\\fBfern-cxx\\fR(7): the C++20 interface, \\fBfern/fern.hpp\\fR."]
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) == 3 and argv[1] == "--list":
        for sec in parse(argv[2]):
            for name, _, _ in sec["funcs"]:
                print(name)
        return 0
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    header, outdir, version = argv[1:]
    sections = parse(header)
    mandir = os.path.join(outdir, "man3")
    os.makedirs(mandir, exist_ok=True)
    wanted = {"fern.3"}
    undescribed = [n for sec in sections for n, _, c in sec["funcs"] if not summary(c, sec)]
    if undescribed:
        # Every call's page says what it does: write it in fern.h.
        print("mkman: no sentence saying what the call does in fern.h's comment of: "
              + " ".join(undescribed), file=sys.stderr)
        return 1
    for sec in sections:
        names = [n for n, _, _ in sec["funcs"]]
        for name, proto, comment in sec["funcs"]:
            wanted.add(name + ".3")
            write_if_changed(os.path.join(mandir, name + ".3"),
                             page(name, proto, comment, sec, names, version))
    structs = parse_structs(header, STRUCT_PAGES)
    for name in STRUCT_PAGES:
        if name not in structs:
            print(f"mkman: struct {name} not found in {header}", file=sys.stderr)
            return 1
        comment, definition, fields = structs[name]
        users = [n for sec in sections for n, proto, _ in sec["funcs"] if re.search(rf"\b{name}\b", proto)]
        wanted.add(name + ".3")
        write_if_changed(os.path.join(mandir, name + ".3"),
                         struct_page(name, comment, definition, fields, users, version))
    write_if_changed(os.path.join(mandir, "fern.3"), overview(sections, structs, version))
    # A function removed from the header loses its page.
    for f in os.listdir(mandir):
        if f.endswith(".3") and f not in wanted:
            os.remove(os.path.join(mandir, f))
    return 0


def write_if_changed(path, text):
    try:
        if open(path, encoding="utf-8").read() == text:
            return
    except OSError:
        pass
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
