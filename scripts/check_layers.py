#!/usr/bin/env python3
"""Fails when an #include in src/ runs up the layers, or a folder grows past what a reader takes in at a glance.
Includes run one way:
core <- sources/sinks/accounting/phases/importers/alerts/forecast/remote_write <- sampler/processes/simulation/advice
     <- recording/runs/integrations <- web <- report/top <- server <- cli (<- main.cpp).
A folder may include its own files and any lower layer's, never a higher one's nor a sibling's of the same layer.
No folder holds more than MAX_OWN_SOURCES .cpp files of its own (its subfolders apart; cli/commands/ is one file per
command and exempt): past that, a newcomer cannot find a file by the folder's name.
Run by the build (target check_layers) and usable by hand: scripts/check_layers.py [SRC_DIR]."""
import pathlib
import re
import sys

LAYERS = {
    "core": 0, "wattscope": 0,  # wattscope/ is the generated version header
    "sources": 1, "sinks": 1, "accounting": 1, "phases": 1, "importers": 1,  # markers, phase accounting; logs
    "alerts": 1,  # rules, evaluation, notifiers
    "remote_write": 1,  # --remote-write: the series /metrics has, batched, queued on disk and pushed
    "forecast": 1,  # series models (pure arithmetic over a series) and the live monitors made of them
    "sampler": 2, "processes": 2,
    "simulation": 2,  # --simulate: scenarios and the stand-in devices they drive
    "recording": 3,  # a run being recorded: the session and the wiring of its sources
    "runs": 3,  # stored runs: the run model every view derives from, and its figures
    "integrations": 3,  # batch systems (Slurm) around a run
    "advice": 2,  # estimators over a series (a stored run's, from its model, or the live one)
    "web": 4,
    "report": 5, "top": 5,  # top reads the recording's frames or serve's API, not server/
    "server": 6,  # serve renders a stored run's report (report/) for its runs pages
    "cli": 7,
}
MAX_OWN_SOURCES = 10
EXEMPT_FROM_SIZE = {"cli/commands"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]*"', re.M)


def main() -> int:
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent / "src")
    bad = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".hpp", ".cpp", ".h", ".in") or not path.is_file():
            continue
        rel = path.relative_to(src)
        folder = rel.parts[0] if len(rel.parts) > 1 else None  # main.cpp sits on top of everything
        if folder is not None and folder not in LAYERS:
            bad.append(f"{rel}: folder '{folder}' has no layer in scripts/check_layers.py")
            continue
        for m in INCLUDE.finditer(path.read_text(errors="replace")):
            target = m.group(1)
            if target not in LAYERS:
                bad.append(f"{rel}: includes '{m.group(0).strip()}', a folder with no layer")
            elif folder is not None and target != folder and LAYERS[target] >= LAYERS[folder]:
                bad.append(f"{rel}: '{folder}' (layer {LAYERS[folder]}) includes '{target}/' "
                           f"(layer {LAYERS[target]}): includes must run down the layers")
    for folder in sorted(p for p in src.rglob("*") if p.is_dir()):
        rel = folder.relative_to(src).as_posix()
        own = sorted(f.name for f in folder.glob("*.cpp"))
        if rel not in EXEMPT_FROM_SIZE and len(own) > MAX_OWN_SOURCES:
            bad.append(f"{rel}/: {len(own)} .cpp files of its own (at most {MAX_OWN_SOURCES}): split it by what its "
                       f"files are")
    for b in bad:
        print(f"check_layers: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
