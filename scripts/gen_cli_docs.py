#!/usr/bin/env python3
"""The man page and the bash completion of wattscope, both from its command table as the binary prints it.

    scripts/gen_cli_docs.py BINARY OUTDIR

writes OUTDIR/wattscope.1.gz (roff, gzip -9n as Debian wants it) and OUTDIR/wattscope (a bash-completion file).
`wattscope --help` lists the commands of src/cli/commands.cpp's table, `wattscope CMD --help` each command's options
and subcommands: reading them from the binary, never from a second list, keeps the page and the completion from
drifting. Run by `cmake --install` (CMakeLists.txt) and so by scripts/package.sh.
"""

import gzip
import io
import os
import re
import subprocess
import sys

_SECTIONS = ("Positionals:", "Options:", "Subcommands:")


def help_of(binary, words):
    env = dict(os.environ, COLUMNS="200", ASAN_OPTIONS="detect_leaks=0")
    r = subprocess.run([binary, *words, "--help"], capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        raise SystemExit(f"{binary} {' '.join(words)} --help: exit {r.returncode}: {r.stderr[-500:]}")
    return r.stdout


def parse(text):
    """{"summary": [lines before Usage], "usage": str, "Options:": [(term, help)], ..., "tail": [lines]}."""
    out = {"summary": [], "usage": "", "tail": []}
    section = "summary"
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Usage:"):
            out["usage"] = stripped[len("Usage:"):].strip()
            section = "after-usage"
            continue
        if stripped in _SECTIONS:
            section = stripped
            out[section] = []
            continue
        if section in _SECTIONS:
            if not stripped:
                section = "after-section"
                continue
            if line.startswith("  ") and not line.startswith(" " * 20) and out[section] is not None:
                m = re.match(r"\s+(\S.*?)(?:\s{2,}(.*))?$", line)
                out[section].append([m.group(1), m.group(2) or ""])
            elif out[section]:  # a wrapped description
                out[section][-1][1] += " " + stripped
            continue
        if section == "summary":
            if stripped:
                out["summary"].append(stripped)
        elif stripped or out["tail"]:
            out["tail"].append(line.rstrip())
    while out["tail"] and not out["tail"][-1]:
        out["tail"].pop()
    return out


def flags_of(term):
    """'-t,--task TEXT REQUIRED' -> (['-t', '--task'], 'TEXT REQUIRED')."""
    head, _, rest = term.partition(" ")
    return [f for f in head.split(",") if f.startswith("-")], rest


def collect(binary):
    """The tree of commands: {"words": [...], "help": parsed, "children": [...]}."""

    def node(words):
        h = parse(help_of(binary, words))
        children = [node(words + [name]) for name, _ in h.get("Subcommands:", [])]
        return {"words": words, "help": h, "children": children}

    return node([])


# ------------------------------------------------------------------ roff


def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"^([.'])", r"\\&\1", text, flags=re.M)


def man_page(tree, version):
    top = tree["help"]
    lines = [f'.TH WATTSCOPE 1 "" "wattscope {version}" "User Commands"',
             ".SH NAME", "wattscope \\- " + roff(top["summary"][0].rstrip(".").split(": ", 1)[-1]),
             ".SH SYNOPSIS", f".B wattscope\n{roff(top['usage'].split(' ', 1)[-1])}",
             ".SH DESCRIPTION", roff(" ".join(top["summary"]))]
    lines += [".SH OPTIONS"] + [item for t, h in top.get("Options:", []) for item in (".TP", f"\\fB{roff(t)}\\fR",
                                                                                        roff(h))]
    lines.append(".SH COMMANDS")

    def command(n):
        h = n["help"]
        out = [f".SS {roff(' '.join(n['words']))}", roff(" ".join(h["summary"])), ".PP",
               f"Usage: \\fB{roff(h['usage'])}\\fR"]
        for section in ("Positionals:", "Options:"):
            items = [(t, d) for t, d in h.get(section, []) if t != "-h,--help"]
            if items:
                out += [".PP", f"\\fI{section[:-1]}\\fR"]
                for t, d in items:
                    out += [".TP", f"\\fB{roff(t)}\\fR", roff(d)]
        if h["tail"]:
            out += [".PP", ".nf"] + [roff(line) for line in h["tail"]] + [".fi"]
        for c in n["children"]:
            out += command(c)
        return out

    for c in tree["children"]:
        lines += command(c)
    if top["tail"]:
        lines += [".SH EXAMPLES", ".nf"] + [roff(line) for line in top["tail"]] + [".fi"]
    lines += [".SH FILES", ".TP", "\\fBwattscope.db\\fR",
              "The default store (SQLite) in the working directory.",
              ".TP", "\\fB/usr/share/wattscope/\\fR",
              "Deployment files: Prometheus, Grafana and alert examples, Kubernetes manifests, Slurm scripts.",
              ".SH SEE ALSO",
              "The documentation in the wattscope repository (docs/); the Python package: \\fBpython3 -c "
              "'import wattscope; help(wattscope)'\\fR."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ bash


def completion(tree):
    """A bash function that completes commands, subcommands and each one's options; file names otherwise."""
    cases = []

    def walk(n):
        h = n["help"]
        opts = [f for t, _ in h.get("Options:", []) for f in flags_of(t)[0]]
        subs = [name for name, _ in h.get("Subcommands:", [])]
        cases.append((" ".join(n["words"]), subs, opts))
        for c in n["children"]:
            walk(c)

    walk(tree)
    body = []
    for path, subs, opts in cases:
        body.append(f'    "{path}") subs="{" ".join(subs)}"; opts="{" ".join(opts)}" ;;')
    return f"""# bash completion for wattscope, generated from its command table (scripts/gen_cli_docs.py)
_wattscope() {{
  local cur path word subs opts i
  cur=${{COMP_WORDS[COMP_CWORD]}}
  path=""
  # The command path so far: the words that name known commands, in order.
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${{COMP_WORDS[i]}}
    [[ $word == -* ]] && continue
    _wattscope_known "${{path:+$path }}$word" && path="${{path:+$path }}$word"
  done
  _wattscope_words "$path"
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [[ -n $subs ]]; then
    COMPREPLY=($(compgen -W "$subs" -- "$cur"))
  fi
}}
_wattscope_words() {{
  subs=""; opts=""
  case "$1" in
{chr(10).join(body)}
  esac
}}
_wattscope_known() {{
  case "$1" in
    {"|".join(f'"{p}"' for p, _, _ in cases if p)}) return 0 ;;
  esac
  return 1
}}
complete -o bashdefault -o default -F _wattscope wattscope
"""


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    binary, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    tree = collect(binary)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0")).stdout.strip().split()[-1:] or ["?"]
    page = man_page(tree, version[0]).encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=buf, mtime=0) as f:  # gzip -9n
        f.write(page)
    with open(os.path.join(outdir, "wattscope.1.gz"), "wb") as f:
        f.write(buf.getvalue())
    with open(os.path.join(outdir, "wattscope"), "w") as f:
        f.write(completion(tree))


if __name__ == "__main__":
    main()
